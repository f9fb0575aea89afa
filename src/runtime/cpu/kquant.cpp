// K-quant matmul arithmetic: activations quantised to Q8_K (256 values, f32 scale, sums of
// 16), the order llama.cpp's kernel for a call would take, and the dots themselves
// (kquant_dots.inc, built here for any CPU and in kquant_avx2.cpp / kquant_avx512.cpp for the
// integer products on SIMD; all three give the same bits).
#include "runtime/cpu/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/isa.h"
#include "util/check.h"

namespace vllm::cpu {
namespace {

// ggml's round-to-nearest-even through the float mantissa (valid for |v| < 2^22).
inline int nearest_int(float v) {
  float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Scalar builds of the integer hooks of kquant_dots.inc.
inline void lanes32(const uint8_t* q, const int8_t* a, int32_t* lane) {
  for (int l = 0; l < 8; ++l) {
    int32_t s = 0;
    for (int e = 4 * l; e < 4 * l + 4; ++e) s += int32_t(q[e]) * a[e];
    lane[l] = s;
  }
}
inline int32_t total32(const uint8_t* q, const int8_t* a) {
  int32_t s = 0;
  for (int e = 0; e < 32; ++e) s += int32_t(q[e]) * a[e];
  return s;
}

}  // namespace
}  // namespace vllm::cpu

#define VLLM_KQ_NS scalar_kq
#include "runtime/cpu/kquant_dots.inc"
#undef VLLM_KQ_NS

namespace vllm::cpu {
namespace avx2_kq {
float dot_kquant(DType type, KOrder order, const void* w, const BlockQ8_K* a, int64_t nb);
}
namespace avx512_kq {
float dot_kquant(DType type, KOrder order, const void* w, const BlockQ8_K* a, int64_t nb);
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  VLLM_CHECK(n % kQKK == 0, "Q8_K row length ", n);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    // The signed value of largest magnitude (the first, on ties) sets the scale.
    float amax = 0, max = 0;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQKK; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int s = 0;
      for (int e = 0; e < 16; ++e) s += y[i].qs[16 * j + e];
      y[i].bsums[j] = int16_t(s);
    }
    y[i].d = 1 / iscale;
  }
}

KOrder kquant_order(DType type, int64_t out_rows, int64_t act_rows, int64_t act_row) {
  if (type == DType::Q4_K && out_rows % 8 == 0) {
    // The repacked kernels take activation rows 4 at a time (gemm), the rest one by one.
    return act_row < act_rows - act_rows % 4 ? KOrder::kRepackGemm : KOrder::kRepackGemv;
  }
  return act_rows >= 8 ? KOrder::kTiled : KOrder::kVecDot;
}

float dot_kquant(DType type, KOrder order, const void* w, const BlockQ8_K* a, int64_t nb) {
  switch (detected_isa()) {
    case Isa::Avx512Vnni: return avx512_kq::dot_kquant(type, order, w, a, nb);
    case Isa::Avx2: return avx2_kq::dot_kquant(type, order, w, a, nb);
    case Isa::Scalar: break;
  }
  return scalar_kq::dot_kquant(type, order, w, a, nb);
}

bool is_kquant(DType type) {
  return type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K;
}

}  // namespace vllm::cpu
