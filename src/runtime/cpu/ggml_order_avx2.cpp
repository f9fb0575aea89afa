// AVX2 build of the ggml-order kernels: 16 lanes as two 8-lane halves, each operation the
// AVX2 counterpart of ggml's AVX-512 one.
#include <immintrin.h>

#include <cmath>

#include "runtime/cpu/ggml_order.h"

namespace vllm::cpu::ggml_order::avx2 {
namespace {

// x * 2^n for integer-valued n, rounded once as AVX-512's scalef does, and 0 or infinity where
// |n| > 192: two exact power-of-two factors of at most 2^96 each, so only the last product can
// round.
__m256 scale_pow2_8(__m256 x, __m256 n) {
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i rest = _mm256_sub_epi32(ni, half);
  auto pow2 = [](__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
  };
  const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(x, pow2(half)), pow2(rest));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 saturated = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192), _CMP_GT_OQ);
  if (_mm256_testz_ps(saturated, saturated)) return scaled;
  const __m256 limit = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ));
  return _mm256_blendv_ps(scaled, limit, saturated);
}

struct Lanes {
  __m256 lo, hi;

  static Lanes zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Lanes set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static Lanes load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Lanes load_h(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  void store(float* p) const {
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
  }
  static Lanes fma(Lanes a, Lanes b, Lanes c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static Lanes add(Lanes a, Lanes b) {
    return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
  }
  static Lanes sub(Lanes a, Lanes b) {
    return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)};
  }
  static Lanes mul(Lanes a, Lanes b) {
    return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
  }
  static Lanes div(Lanes a, Lanes b) {
    return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)};
  }
  // Lane i + lane i+8 is lo + hi; then the 8 -> 4 -> 2 -> 1 steps of the tree.
  static float reduce(Lanes a) {
    const __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
  static Lanes neg(Lanes a) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    return {_mm256_xor_ps(a.lo, sign), _mm256_xor_ps(a.hi, sign)};
  }
  static Lanes scale_pow2(Lanes j, Lanes n) {
    return {scale_pow2_8(j.lo, n.lo), scale_pow2_8(j.hi, n.hi)};
  }
};

}  // namespace
}  // namespace vllm::cpu::ggml_order::avx2

#define VLLM_GGML_ORDER_NS avx2
#include "runtime/cpu/ggml_order.inc"
