// GGUF block (de)quantisation on the CPU, and the int8 activation format used for
// quantised matmuls: activations are quantised per 32 elements to int8, as llama.cpp does.
#pragma once
#include <cstdint>

#include "runtime/dtype.h"

namespace vllm::cpu {

// Activation block: scale d, and s = d * sum(qs) so that Q4_1's min term needs no pass.
struct BlockQ8_1 {
  float d;
  float s;
  int8_t qs[kQK];
};

// dst[0:n] = dequantized src row; n a multiple of the type's block size. Plain types too.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
// Reference quantisers (round-to-nearest, as ggml's reference code) for tests and tools.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n);
// Activation quantiser used by the matmul.
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);

// sum_i w[i] * a[i] over nb blocks of 32, for weight row w of type Q8_0, Q4_0 or Q4_1.
using QDotFn = float (*)(const void* w, const BlockQ8_1* a, int64_t nb);
// out[m * ldo + n] = dot(weight row n, activation row m) for N weight rows (w_stride bytes
// apart) and M activation rows of nb blocks each.
using QGemmFn = void (*)(const char* w, int64_t w_stride, int64_t N, const BlockQ8_1* a, int64_t M,
                         int64_t nb, float* out, int64_t ldo);
// The best implementation this CPU runs for `type` (AVX-512 VNNI, AVX2 or scalar).
QDotFn qdot_for(DType type);
QGemmFn qgemm_for(DType type);  // nullptr where only the per-output dot exists (scalar)
QDotFn qdot_scalar(DType type);
// Name of the ISA qdot_for picked ("avx512vnni", "avx2", "scalar").
const char* qdot_isa();

}  // namespace vllm::cpu
