// AVX2 build of the K-quant dots (kquant_dots.inc): the int8 lanes through maddubs + madd
// (codes of at most 6 bits: a pair of products fits 16 bits).
#include <immintrin.h>

#include <cstdint>

namespace vllm::cpu::avx2_kq {
namespace {
inline __m256i lanes(const uint8_t* q, const int8_t* a) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}
}  // namespace
}  // namespace vllm::cpu::avx2_kq

#define VLLM_KQ_NS avx2_kq
#include "runtime/cpu/kquant_x86.inc"
