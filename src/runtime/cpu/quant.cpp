#include "runtime/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/isa.h"
#include "util/check.h"

namespace vllm::cpu {
namespace {

void dequant_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = x[i].qs[j] * d;
  }
}

void dequant_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = ((x[i].qs[j] & 0x0f) - 8) * d;
      y[i * kQK + j + kQK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// Element j of a Q5_0 block: four low bits from qs, the fifth from qh, minus 16.
inline int q5_0_value(const BlockQ5_0& b, int j) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  const int low = j < kQK / 2 ? b.qs[j] & 0x0f : b.qs[j - kQK / 2] >> 4;
  return (low | int((qh >> j) & 1) << 4) - 16;
}

void dequant_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[i * kQK + j] = float(q5_0_value(x[i], j)) * d;
  }
}

void dequant_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[i * kQK + j] = (x[i].qs[j] & 0x0f) * d + m;
      y[i * kQK + j + kQK / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

// 6-bit scale and min j of a Q4_K / Q5_K super-block.
inline void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void dequant_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// Each product rounded once to f32, as PyTorch's `w.float() * scale` dequantization. Branch-free
// so that it vectorizes: the byte's magnitude bits placed in f32's exponent and mantissa read
// as 2^-120 times its value (dtype.h), and 2^120 * d is exact, so one multiply rounds once;
// NaN bytes then set the product's exponent bits.
void dequant_fp8_e4m3(const BlockFp8E4M3* __restrict x, float* __restrict y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kFp8Block) {
    const float d = x[i].d;
    if (!(std::fabs(d) < 0x1p7f)) {  // 2^120 * d would overflow (or d is NaN)
      for (int j = 0; j < kFp8Block; ++j) y[j] = fp8_e4m3_to_f32(x[i].qs[j]) * d;
      continue;
    }
    const float scale = d * 0x1p120f;
    for (int j = 0; j < kFp8Block; ++j) {
      const uint32_t b = x[i].qs[j];
      const uint32_t u = ((b & 0x80) << 24) | ((b & 0x7f) << 20);
      float f;
      std::memcpy(&f, &u, 4);
      f *= scale;
      uint32_t r;
      std::memcpy(&r, &f, 4);
      r |= (0u - uint32_t((b & 0x7f) == 0x7f)) & 0x7fc00000u;
      std::memcpy(&y[j], &r, 4);
    }
  }
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = n / dtype_info(type).block_size;
  VLLM_CHECK(nb * dtype_info(type).block_size == n, "row length ", n, " for ", dtype_name(type));
  switch (type) {
    case DType::F32: std::copy_n(static_cast<const float*>(src), n, dst); return;
    case DType::F16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q8_0: dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return;
    case DType::Q4_0: dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return;
    case DType::Q4_1: dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb); return;
    case DType::Q5_0: dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb); return;
    case DType::Q4_K: dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb); return;
    case DType::Q5_K: dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb); return;
    case DType::Q6_K: dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb); return;
    case DType::FP8_E4M3: {
      auto* blocks = static_cast<const BlockFp8E4M3*>(src);
      switch (detected_isa()) {  // the same values eight lanes at a time where the CPU allows
        case Isa::Avx512Vnni: return avx512::dequant_fp8_e4m3(blocks, dst, nb);
        case Isa::Avx2: return avx2::dequant_fp8_e4m3(blocks, dst, nb);
        case Isa::Scalar: return dequant_fp8_e4m3(blocks, dst, nb);
      }
      return;
    }
    case DType::F8_E4M3: {
      auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(s[i]);
      return;
    }
    case DType::I32: break;
  }
  VLLM_CHECK(false, "cannot dequantize ", dtype_name(type));
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int a = std::min(15, int(x[j] * id + 8.5f));
      const int b = std::min(15, int(x[j + kQK / 2] * id + 8.5f));
      y[i].qs[j] = uint8_t(a | (b << 4));
    }
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    const float d = (hi - lo) / 15.0f;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(lo);
    for (int j = 0; j < kQK / 2; ++j) {
      const int a = std::min(15, int((x[j] - lo) * id + 0.5f));
      const int b = std::min(15, int((x[j + kQK / 2] - lo) * id + 0.5f));
      y[i].qs[j] = uint8_t(a | (b << 4));
    }
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The scale is rounded through f16 as llama.cpp stores it, so products match its dots.
    const float d = f16_to_f32(f32_to_f16(amax / 127.0f));
    const float id = amax ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::nearbyintf(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = d;
    y[i].s = f16_to_f32(f32_to_f16(sum * (amax / 127.0f)));
  }
}

namespace {
float dot_q8_0_scalar(const void* w, const BlockQ8_1* a, int64_t nb) {
  auto* x = static_cast<const BlockQ8_0*>(w);
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += x[i].qs[j] * a[i].qs[j];
    sum += s * f16_to_f32(x[i].d) * a[i].d;
  }
  return sum;
}
float dot_q4_0_scalar(const void* w, const BlockQ8_1* a, int64_t nb) {
  auto* x = static_cast<const BlockQ4_0*>(w);
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j)
      s += ((x[i].qs[j] & 0x0f) - 8) * a[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * a[i].qs[j + 16];
    sum += s * f16_to_f32(x[i].d) * a[i].d;
  }
  return sum;
}
float dot_q5_0_scalar(const void* w, const BlockQ8_1* a, int64_t nb) {
  auto* x = static_cast<const BlockQ5_0*>(w);
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < kQK; ++j) s += q5_0_value(x[i], j) * a[i].qs[j];
    sum += s * f16_to_f32(x[i].d) * a[i].d;
  }
  return sum;
}
float dot_q4_1_scalar(const void* w, const BlockQ8_1* a, int64_t nb) {
  auto* x = static_cast<const BlockQ4_1*>(w);
  float sum = 0;
  for (int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < kQK / 2; ++j)
      s += (x[i].qs[j] & 0x0f) * a[i].qs[j] + (x[i].qs[j] >> 4) * a[i].qs[j + 16];
    sum += s * f16_to_f32(x[i].d) * a[i].d + f16_to_f32(x[i].m) * a[i].s;
  }
  return sum;
}
}  // namespace

QDotFn qdot_scalar(DType type) {
  switch (type) {
    case DType::Q8_0: return dot_q8_0_scalar;
    case DType::Q4_0: return dot_q4_0_scalar;
    case DType::Q4_1: return dot_q4_1_scalar;
    case DType::Q5_0: return dot_q5_0_scalar;
    default: return nullptr;
  }
}

}  // namespace vllm::cpu
