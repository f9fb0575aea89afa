// AVX2 build of the int8 block dots: u8 x s8 products through maddubs + madd.
#include <immintrin.h>

namespace {
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
  const __m256i p16 = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}
// maddubs saturates pairs at 16 bits: products of u8 values past 128 can overflow.
constexpr bool kDpbusdTakesFullU8 = false;
}  // namespace

#define VLLM_QDOT_NS avx2
#include "runtime/cpu/qdot_x86.inc"
