#include "runtime/cpu/isa.h"

#include <string>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "runtime/kernel_options.h"

namespace vllm::cpu {

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29 (__builtin_cpu_supports("f16c") is unknown to clang 14, which
// builds the fuzz targets).
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

Isa detected_isa() {
  static const Isa isa = [] {
#if defined(__x86_64__)
    // --cpu-isa caps the choice (to measure or test every variant on one machine).
    const std::string& cap = kernel_options().cpu_isa;
    const bool want_scalar = cap == "scalar";
    const bool want_avx2 = cap == "avx2";
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    const bool vnni = avx2 && __builtin_cpu_supports("avx512vnni") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
    if (want_scalar) return Isa::Scalar;
    if (vnni && !want_avx2) return Isa::Avx512Vnni;
    if (avx2) return Isa::Avx2;
#endif
    return Isa::Scalar;
  }();
  return isa;
}

QDotFn qdot_for(DType type) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::qdot(type);
    case Isa::Avx2: return avx2::qdot(type);
    case Isa::Scalar: break;
  }
  return qdot_scalar(type);
}

QGemmFn qgemm_for(DType type) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::qgemm(type);
    case Isa::Avx2: return avx2::qgemm(type);
    case Isa::Scalar: break;
  }
  return nullptr;
}

const char* qdot_isa() {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::Avx2: return "avx2";
    case Isa::Scalar: break;
  }
  return "scalar";
}

float dot_f32(const float* x, const float* y, int64_t n) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::dot_f32(x, y, n);
    case Isa::Avx2: return avx2::dot_f32(x, y, n);
    case Isa::Scalar: break;
  }
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

Fp8DotFn fp8_dot() {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::dot_fp8_e4m3;
    case Isa::Avx2: return avx2::dot_fp8_e4m3;
    case Isa::Scalar: break;
  }
  return nullptr;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::axpy_f32(a, x, y, n);
    case Isa::Avx2: return avx2::axpy_f32(a, x, y, n);
    case Isa::Scalar: break;
  }
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void f32_to_f16_row(const float* x, uint16_t* y, int64_t n) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::f32_to_f16_row(x, y, n);
    case Isa::Avx2: return avx2::f32_to_f16_row(x, y, n);
    case Isa::Scalar: break;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void quantize_row_q8_1_fast(const float* x, BlockQ8_1* y, int64_t n) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::quantize_row_q8_1(x, y, n);
    case Isa::Avx2: return avx2::quantize_row_q8_1(x, y, n);
    case Isa::Scalar: break;
  }
  quantize_row_q8_1(x, y, n);
}

void round_to_f16(float* x, int64_t n) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512::round_to_f16(x, n);
    case Isa::Avx2: return avx2::round_to_f16(x, n);
    case Isa::Scalar: break;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
}

}  // namespace vllm::cpu
