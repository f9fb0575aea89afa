// AVX-512 build of the ggml-order kernels: the same instructions ggml's AVX-512 build uses.
// GCC 12's 512-bit intrinsics start from _mm512_undefined_ps(), which its uninitialised-use
// warnings flag once inlined here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>

#include "runtime/cpu/ggml_order.h"

namespace vllm::cpu::ggml_order::avx512 {
namespace {

struct Lanes {
  __m512 v;

  static Lanes zero() { return {_mm512_setzero_ps()}; }
  static Lanes set1(float x) { return {_mm512_set1_ps(x)}; }
  static Lanes load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static Lanes load_h(const uint16_t* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  static Lanes fma(Lanes a, Lanes b, Lanes c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static Lanes add(Lanes a, Lanes b) { return {_mm512_add_ps(a.v, b.v)}; }
  static Lanes sub(Lanes a, Lanes b) { return {_mm512_sub_ps(a.v, b.v)}; }
  static Lanes mul(Lanes a, Lanes b) { return {_mm512_mul_ps(a.v, b.v)}; }
  static Lanes div(Lanes a, Lanes b) { return {_mm512_div_ps(a.v, b.v)}; }
  static float reduce(Lanes a) { return _mm512_reduce_add_ps(a.v); }
  // See scalar::expf_lane in ggml_order.cpp for the steps.
  static Lanes expf(Lanes in) {
    const __m512 x = in.v;
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);
    const __m512 n =
        _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift), shift);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 saturated =
        _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b,
                                        _mm512_set1_ps(0x1.573e2ep-5f)),
                        u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b,
                                        _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 scaled = _mm512_scalef_ps(j, n);
    if (!saturated) return {scaled};
    const __mmask16 not_positive = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 limit =
        _mm512_mask_blend_ps(not_positive, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return {_mm512_mask_blend_ps(saturated, scaled, limit)};
  }
};

}  // namespace
}  // namespace vllm::cpu::ggml_order::avx512

#define VLLM_GGML_ORDER_NS avx512
#include "runtime/cpu/ggml_order.inc"
