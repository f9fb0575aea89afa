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

namespace avx2 {
QDotFn qdot(DType type);
float dot_f32(const float* x, const float* y, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
}  // namespace avx2
namespace avx512 {
QDotFn qdot(DType type);
float dot_f32(const float* x, const float* y, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
}  // namespace avx512

}  // namespace vllm::cpu
