// Element types: plain floats and GGUF block-quantized types. A quantized row of n elements
// is n / block_size blocks of block_bytes each; the block layouts match the GGUF spec.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace vllm {

// F8_E4M3: plain float8 e4m3fn elements (the KV cache of --kv-cache-dtype fp8, scale 1).
// FP8_E4M3: float8 e4m3fn values in rows of 32-element blocks, each with its f32 scale
// (BlockFp8E4M3): FP8 checkpoints (per-tensor, per-channel and 2-D block scales all map onto
// it exactly) and --quantization fp8 (model/quantization.h). A GPU keeps only matmul weights
// with one scale a row in this type, laid out its own way (same total bytes): the N x K e4m3
// bytes, then the N f32 row scales, then padding (model/weights.cpp, upload_fp8_rows).
enum class DType : uint8_t {
  F32, F16, BF16, I32, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, Q5_0, FP8_E4M3, F8_E4M3
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_size;   // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
// Bytes taken by n elements of type t; n must be a multiple of the block size.
int64_t row_bytes(DType t, int64_t n);

// ---- half-precision conversions (bit exact, round-to-nearest-even) ----
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float f32_nan_with_sign(bool negative) {
  const uint32_t u = negative ? 0xffc00000u : 0x7fc00000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

// n f32 values rounded to t (F16 or BF16) as 16-bit words.
void f32_to_16bit(DType t, const float* in, uint16_t* out, int64_t n);

// ---- float8 e4m3fn (no infinities; S.1111.111 is NaN; largest finite 448) ----
// Exact: every e4m3fn value is an f32 (NaN stays NaN).
inline float fp8_e4m3_to_f32(uint8_t b) {
  // The 7 magnitude bits shifted into f32's exponent and mantissa fields read as 2^-120 times
  // the value, subnormals included (f32 subnormals then); 2^120 rescales exactly.
  const uint32_t u = (uint32_t(b & 0x80) << 24) | (uint32_t(b & 0x7f) << 20);
  float f;
  std::memcpy(&f, &u, 4);
  if ((b & 0x7f) == 0x7f) return f32_nan_with_sign(b & 0x80);
  return f * 0x1p120f;
}
// Round to nearest even, as PyTorch's and ml_dtypes' float8_e4m3fn casts do: magnitudes that
// round past 448 (>= 464) and NaN give NaN (0x7f with the sign); quantizers clamp first.
uint8_t f32_to_fp8_e4m3(float f);

// ---- GGUF block layouts ----
inline constexpr int kQK = 32;    // block size of Q8_0, Q4_0, Q4_1, Q5_0
inline constexpr int kQKK = 256;  // super-block size of the K-quants

struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // element j in low nibble of qs[j], element j+16 in high nibble
};
struct BlockQ4_1 {
  uint16_t d;  // scale
  uint16_t m;  // min
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];        // bit j: the fifth bit of element j
  uint8_t qs[kQK / 2];  // low four bits, laid out as Q4_0's
};
struct BlockQ4_K {
  uint16_t d;     // super-block scale for the 6-bit scales
  uint16_t dmin;  // super-block scale for the 6-bit mins
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
inline constexpr int kFp8Block = 32;  // elements per scale in FP8_E4M3 rows
struct BlockFp8E4M3 {
  float d;                 // scale: element j is d * fp8_e4m3_to_f32(qs[j])
  uint8_t qs[kFp8Block];   // e4m3fn bytes
};

static_assert(sizeof(BlockFp8E4M3) == 36);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
              sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

}  // namespace vllm
