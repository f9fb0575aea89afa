// AVX-512 VNNI build of the K-quant dots (kquant_dots.inc): one vpdpbusd per 32 products.
#include <immintrin.h>

#include <cstdint>

namespace vllm::cpu::avx512_kq {
namespace {
inline __m256i lanes(const uint8_t* q, const int8_t* a) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)));
}
}  // namespace
}  // namespace vllm::cpu::avx512_kq

#define VLLM_KQ_NS avx512_kq
#include "runtime/cpu/kquant_x86.inc"
