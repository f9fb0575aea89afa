// AVX-512 VNNI build of the int8 block dots: one vpdpbusd per 32 products.
#include <immintrin.h>

namespace {
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
constexpr bool kDpbusdTakesFullU8 = true;  // 32-bit accumulation, no intermediate saturation
}  // namespace

#define VLLM_QDOT_NS avx512
#include "runtime/cpu/qdot_x86.inc"
