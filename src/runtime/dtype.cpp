#include "runtime/dtype.h"

#include "util/check.h"

namespace vllm {

const DTypeInfo& dtype_info(DType t) {
  static const DTypeInfo kInfo[] = {
      {"f32", 1, 4, false},
      {"f16", 1, 2, false},
      {"bf16", 1, 2, false},
      {"i32", 1, 4, false},
      {"q8_0", kQK, sizeof(BlockQ8_0), true},
      {"q4_0", kQK, sizeof(BlockQ4_0), true},
      {"q4_1", kQK, sizeof(BlockQ4_1), true},
      {"q4_K", kQKK, sizeof(BlockQ4_K), true},
      {"q5_K", kQKK, sizeof(BlockQ5_K), true},
      {"q6_K", kQKK, sizeof(BlockQ6_K), true},
      {"q5_0", kQK, sizeof(BlockQ5_0), true},
      {"fp8_e4m3", kFp8Block, sizeof(BlockFp8E4M3), true},
      {"f8_e4m3", 1, 1, false},
  };
  return kInfo[static_cast<int>(t)];
}

int64_t row_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  VLLM_CHECK(n % info.block_size == 0, "row of ", n, " elements is not a multiple of the ",
             info.name, " block size ", info.block_size);
  return n / info.block_size * info.block_bytes;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x > 0x7f800000) return uint16_t(sign | 0x7e00);  // NaN
  if (x >= 0x477ff000) return uint16_t(sign | 0x7c00);  // overflow -> inf
  if (x < 0x38800000) {                                 // subnormal or zero in f16
    if (x < 0x33000000) return uint16_t(sign);
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = x - 0x38000000;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fff;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

void f32_to_16bit(DType t, const float* in, uint16_t* out, int64_t n) {
  VLLM_CHECK(t == DType::F16 || t == DType::BF16, "f32_to_16bit into ", dtype_name(t));
  for (int64_t i = 0; i < n; ++i)
    out[i] = t == DType::BF16 ? f32_to_bf16(in[i]) : f32_to_f16(in[i]);
}

uint8_t f32_to_fp8_e4m3(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint8_t sign = uint8_t((x >> 24) & 0x80);
  x &= 0x7fffffff;
  if (x > 0x7f800000) return sign | 0x7f;  // NaN
  // 464 = 0x43e80000 is halfway between 448 (the largest finite) and 480: it rounds to 448's
  // even mantissa; anything above rounds past the format.
  if (x > 0x43e80000) return sign | 0x7f;
  if (x < 0x3c800000) {  // below 2^-6: a subnormal (step 2^-9) or zero
    // x's value / 2^-9, rounded to nearest even: the 24-bit significand shifted right.
    const int32_t e = int32_t(x >> 23);  // biased; the value is m * 2^(e - 150)
    if (e < 127 - 11) return sign;       // below 2^-11, a quarter step: rounds to 0
    const uint32_t m = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = uint32_t(150 - 9 - e);  // m * 2^(e-150) / 2^-9 = m >> shift
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint8_t(sign | r);  // r == 8 carries into the smallest normal, 0x08
  }
  // Normal: rebias 127 -> 7 and keep 3 mantissa bits, rounding the 20 dropped ones.
  uint32_t r = x - ((127u - 7u) << 23);
  const uint32_t rem = r & 0xfffff;
  r >>= 20;
  if (rem > 0x80000 || (rem == 0x80000 && (r & 1))) ++r;
  return uint8_t(sign | r);
}

}  // namespace vllm
