// AVX-512 build of the ggml-order kernels: the operations of ggml's AVX-512 build (its scalef
// among them), lane for lane.
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
  static Lanes neg(Lanes a) { return {_mm512_xor_ps(a.v, _mm512_set1_ps(-0.0f))}; }
  static Lanes scale_pow2(Lanes j, Lanes n) {
    const __m512 scaled = _mm512_scalef_ps(j.v, n.v);
    const __mmask16 saturated =
        _mm512_cmp_ps_mask(_mm512_abs_ps(n.v), _mm512_set1_ps(192), _CMP_GT_OQ);
    if (!saturated) return {scaled};
    const __mmask16 not_positive = _mm512_cmp_ps_mask(n.v, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 limit =
        _mm512_mask_blend_ps(not_positive, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return {_mm512_mask_blend_ps(saturated, scaled, limit)};
  }
};

}  // namespace
}  // namespace vllm::cpu::ggml_order::avx512

#define VLLM_GGML_ORDER_NS avx512
#include "runtime/cpu/ggml_order.inc"
