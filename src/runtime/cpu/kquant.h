// K-quant (Q4_K, Q5_K, Q6_K) matmuls as llama.cpp's CPU backend does them on x86: the
// activations quantised to Q8_K per 256 values, integer products, and per output the float
// accumulation order of the kernel llama.cpp picks:
// - Q4_K with a multiple of 8 output rows is repacked 8x8 (ggml's CPU_REPACK buffers, on by
//   default with AVX2): activation rows 4 at a time go through its gemm, which accumulates per
//   64 values; the remaining rows through its gemv, which accumulates per 256;
// - other K-quant weights go through ggml's tiled matmul (ggml-cpu/tiled) when a call has 8 or
//   more activation rows, and through ggml_vec_dot_qN_K_q8_K's AVX2 lanes otherwise.
// The same activations and the same order give the same bits, so a GGUF model's logits can
// equal llama.cpp's (tests/model/test_gemma3_llamacpp.cpp). Q5_K's order is written from the
// kernel but no fixture covers it yet.
#pragma once
#include <cstdint>

#include "runtime/dtype.h"

namespace vllm::cpu {

struct BlockQ8_K {
  float d;                     // scale: value = d * qs
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];  // sums of 16 consecutive qs
};

bool is_kquant(DType type);
// ggml's quantize_row_q8_K: the scale from the value of largest magnitude, round to nearest
// even. n a multiple of 256.
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);

enum class KOrder { kVecDot, kRepackGemv, kRepackGemm, kTiled };
// The order llama.cpp uses for activation row act_row of act_rows, against a weight of
// out_rows rows of `type`.
KOrder kquant_order(DType type, int64_t out_rows, int64_t act_rows, int64_t act_row);
// Weight row w (nb super-blocks of `type`) . activation row a, in `order`.
float dot_kquant(DType type, KOrder order, const void* w, const BlockQ8_K* a, int64_t nb);

}  // namespace vllm::cpu
