// K-quant matmul arithmetic: activations quantised to Q8_K (256 values, f32 scale, sums of
// 16), integer products per 32-value sub-block, and the float accumulation of each of
// llama.cpp's x86 kernels (kquant.h says which one runs where).
//
// Every integer below is exact; only the float steps can differ between two orders, and they
// are written in the order of the kernel they stand for: the lane a partial sum lives in, the
// fused multiply-adds, and the final horizontal sum (lanes i + (i+4), then (0+2) + (1+3)).
#include "runtime/cpu/kquant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

// The 8 lanes of an AVX2 int8 product of 32 values: lane l sums values 4l .. 4l+3.
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

// _mm256 horizontal sum as ggml's hsum_float_8: (l0+l4, l1+l5, l2+l6, l3+l7), then
// (r0 + r2) + (r1 + r3).
inline float hsum8(const float* acc) {
  float r[4];
  for (int i = 0; i < 4; ++i) r[i] = acc[i + 4] + acc[i];
  return (r[0] + r[2]) + (r[1] + r[3]);
}

// 6-bit scale and min j of a Q4_K / Q5_K super-block.
inline void scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Sub-block j (32 values) of a Q4_K / Q5_K super-block as unsigned values 0..31.
void unpack_q4k(const BlockQ4_K& b, int j, uint8_t* q) {
  const uint8_t* qs = b.qs + 32 * (j / 2);
  const int shift = 4 * (j % 2);
  for (int l = 0; l < 32; ++l) q[l] = (qs[l] >> shift) & 0x0f;
}
void unpack_q5k(const BlockQ5_K& b, int j, uint8_t* q) {
  const uint8_t* qs = b.qs + 32 * (j / 2);
  const int shift = 4 * (j % 2);
  for (int l = 0; l < 32; ++l) q[l] = uint8_t(((qs[l] >> shift) & 0x0f) | (((b.qh[l] >> j) & 1) << 4));
}
// Chunk c (32 values) of a Q6_K super-block as unsigned values 0..63 (stored value + 32).
void unpack_q6k(const BlockQ6_K& b, int c, uint8_t* q) {
  const int h = c / 4, t = c % 4;
  const uint8_t* ql = b.ql + 64 * h + 32 * (t & 1);
  const uint8_t* qh = b.qh + 32 * h;
  for (int l = 0; l < 32; ++l)
    q[l] = uint8_t(((ql[l] >> (4 * (t >> 1))) & 0x0f) | (((qh[l] >> (2 * t)) & 3) << 4));
}

// Q8_K sums of 32 values (ggml adds its pairs of 16-sums).
inline int32_t bsum32(const BlockQ8_K& a, int j) { return a.bsums[2 * j] + a.bsums[2 * j + 1]; }

// ggml_vec_dot_q4_K_q8_K / q5_K (AVX2): lane l accumulates sc_j * (values 4l..4l+3 of every
// sub-block j); the mins go through 4 lanes of pairs of sub-blocks.
template <typename Block, void (*Unpack)(const Block&, int, uint8_t*)>
float dot_k45_vec(const void* w, const BlockQ8_K* a, int64_t nb, bool q4) {
  auto* x = static_cast<const Block*>(w);
  float acc[8] = {}, acc_m[4] = {};
  float summs = 0;
  uint8_t q[32];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = a[i].d * f16_to_f32(x[i].d);
    const float dmin = -a[i].d * f16_to_f32(x[i].dmin);
    int32_t sumi[8] = {}, lane[8];
    int32_t mins[4];
    for (int k = 0; k < 4; ++k) {
      int sc0, m0, sc1, m1;
      scale_min(2 * k, x[i].scales, sc0, m0);
      scale_min(2 * k + 1, x[i].scales, sc1, m1);
      mins[k] = m0 * bsum32(a[i], 2 * k) + m1 * bsum32(a[i], 2 * k + 1);
    }
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      scale_min(j, x[i].scales, sc, m);
      Unpack(x[i], j, q);
      lanes32(q, a[i].qs + 32 * j, lane);
      for (int l = 0; l < 8; ++l) sumi[l] += sc * lane[l];
    }
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, float(sumi[l]), acc[l]);
    if (q4) {
      for (int k = 0; k < 4; ++k) acc_m[k] = std::fma(dmin, float(mins[k]), acc_m[k]);
    } else {
      summs = std::fma(dmin, float((mins[0] + mins[1]) + (mins[2] + mins[3])), summs);
    }
  }
  if (q4) return hsum8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]));
  return hsum8(acc) + summs;
}

// Q4_K repacked 8x8 (ggml_gemv / ggml_gemm_q4_K_8x8_q8_K): one output's sum and min terms
// accumulate in float per super-block (gemv) or per 64 values (gemm), and are subtracted last.
float dot_q4k_repacked(const void* w, const BlockQ8_K* a, int64_t nb, bool gemm) {
  auto* x = static_cast<const BlockQ4_K*>(w);
  float acc = 0, acc_m = 0;
  uint8_t q[32];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d) * a[i].d;
    const float dmin = f16_to_f32(x[i].dmin) * a[i].d;
    int32_t isum = 0, imin = 0;
    for (int k = 0; k < 4; ++k) {
      for (int j = 2 * k; j < 2 * k + 2; ++j) {
        int sc, m;
        scale_min(j, x[i].scales, sc, m);
        unpack_q4k(x[i], j, q);
        isum += sc * total32(q, a[i].qs + 32 * j);
        imin += m * bsum32(a[i], j);
      }
      if (gemm) {
        acc = std::fma(float(isum), d, acc);
        acc_m = std::fma(float(imin), dmin, acc_m);
        isum = imin = 0;
      }
    }
    if (!gemm) {
      acc = std::fma(float(isum), d, acc);
      acc_m = std::fma(float(imin), dmin, acc_m);
    }
  }
  return acc - acc_m;
}

// ggml_vec_dot_q6_K_q8_K (AVX2): chunk c's lane l takes scale 2c (l < 4) or 2c + 1, and lane
// l's offset term is 32 * (bsums and scales 2l, 2l+1).
float dot_q6k_vec(const void* w, const BlockQ8_K* a, int64_t nb) {
  auto* x = static_cast<const BlockQ6_K*>(w);
  float acc[8] = {};
  uint8_t q[32];
  for (int64_t i = 0; i < nb; ++i) {
    const float d = a[i].d * f16_to_f32(x[i].d);
    const int8_t* sc = x[i].scales;
    int32_t sumi[8] = {}, lane[8];
    for (int c = 0; c < 8; ++c) {
      unpack_q6k(x[i], c, q);
      lanes32(q, a[i].qs + 32 * c, lane);
      for (int l = 0; l < 8; ++l) sumi[l] += sc[2 * c + (l >= 4)] * lane[l];
    }
    for (int l = 0; l < 8; ++l) {
      sumi[l] -= 32 * (a[i].bsums[2 * l] * sc[2 * l] + a[i].bsums[2 * l + 1] * sc[2 * l + 1]);
      acc[l] = std::fma(d, float(sumi[l]), acc[l]);
    }
  }
  return hsum8(acc);
}

// ggml's tiled K-quant matmul (ggml-cpu/tiled): per super-block an exact integer sum, scaled by
// the weight's d (less dmin times the min sum, fused), then multiplied by the activation's d
// and added to the output in one fused multiply-add (GCC contracts the kernel's mul and add;
// the fused form is what matches llama.cpp's bits).
float dot_tiled(DType type, const void* w, const BlockQ8_K* a, int64_t nb) {
  float acc = 0;
  uint8_t q[32];
  for (int64_t i = 0; i < nb; ++i) {
    float r;
    if (type == DType::Q6_K) {
      const auto& x = static_cast<const BlockQ6_K*>(w)[i];
      int32_t s1 = 0;
      for (int c = 0; c < 8; ++c) {
        unpack_q6k(x, c, q);
        for (int h = 0; h < 2; ++h) {
          int32_t raw = 0;
          for (int e = 16 * h; e < 16 * h + 16; ++e) raw += int32_t(q[e]) * a[i].qs[32 * c + e];
          s1 += x.scales[2 * c + h] * (raw - 32 * a[i].bsums[2 * c + h]);
        }
      }
      r = float(s1) * f16_to_f32(x.d);
    } else {
      const bool q4 = type == DType::Q4_K;
      const auto* x4 = static_cast<const BlockQ4_K*>(w) + i;
      const auto* x5 = static_cast<const BlockQ5_K*>(w) + i;
      const uint8_t* scales = q4 ? x4->scales : x5->scales;
      int32_t s1 = 0, s2 = 0;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min(j, scales, sc, m);
        if (q4) unpack_q4k(*x4, j, q);
        else unpack_q5k(*x5, j, q);
        s1 += sc * total32(q, a[i].qs + 32 * j);
        s2 += m * bsum32(a[i], j);
      }
      const float d = f16_to_f32(q4 ? x4->d : x5->d), dmin = f16_to_f32(q4 ? x4->dmin : x5->dmin);
      r = std::fma(-dmin, float(s2), float(s1) * d);
    }
    acc = std::fma(r, a[i].d, acc);
  }
  return acc;
}

}  // namespace

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
  if (order == KOrder::kTiled) return dot_tiled(type, w, a, nb);
  switch (type) {
    case DType::Q4_K:
      if (order == KOrder::kVecDot) return dot_k45_vec<BlockQ4_K, unpack_q4k>(w, a, nb, true);
      return dot_q4k_repacked(w, a, nb, order == KOrder::kRepackGemm);
    case DType::Q5_K: return dot_k45_vec<BlockQ5_K, unpack_q5k>(w, a, nb, false);
    case DType::Q6_K: return dot_q6k_vec(w, a, nb);
    default: VLLM_CHECK(false, "no Q8_K dot for ", dtype_name(type));
  }
  return 0;
}

bool is_kquant(DType type) {
  return type == DType::Q4_K || type == DType::Q5_K || type == DType::Q6_K;
}

}  // namespace vllm::cpu
