// Runtime ISA selection for CPU kernels: the fastest compiled variant this CPU can run.
#pragma once
#include <cstdint>

#include "runtime/cpu/quant.h"

namespace vllm::cpu {

enum class Isa { Scalar, Avx2, Avx512Vnni };
Isa detected_isa();

// Vector helpers for f32 (dispatched once to the detected ISA).
float dot_f32(const float* x, const float* y, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);  // y += a * x
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
void round_to_f16(float* x, int64_t n);  // in place: x = f32(f16(x))
void quantize_row_q8_1_fast(const float* x, BlockQ8_1* y, int64_t n);  // dispatched
// dot_f32(dequantized w, a, 32 * nb) bit for bit, straight from the e4m3 blocks; null where
// only the scalar dot_f32 runs (dequantize a row and call dot_f32 there).
using Fp8DotFn = float (*)(const BlockFp8E4M3* w, const float* a, int64_t nb);
Fp8DotFn fp8_dot();

namespace avx2 {
void round_to_f16(float* x, int64_t n);
void dequant_fp8_e4m3(const BlockFp8E4M3* w, float* y, int64_t nb);
float dot_fp8_e4m3(const BlockFp8E4M3* w, const float* a, int64_t nb);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
QDotFn qdot(DType type);
QGemmFn qgemm(DType type);
float dot_f32(const float* x, const float* y, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
}  // namespace avx2
namespace avx512 {
void round_to_f16(float* x, int64_t n);
void dequant_fp8_e4m3(const BlockFp8E4M3* w, float* y, int64_t nb);
float dot_fp8_e4m3(const BlockFp8E4M3* w, const float* a, int64_t nb);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
QDotFn qdot(DType type);
QGemmFn qgemm(DType type);
float dot_f32(const float* x, const float* y, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void f32_to_f16_row(const float* x, uint16_t* y, int64_t n);
}  // namespace avx512

}  // namespace vllm::cpu
