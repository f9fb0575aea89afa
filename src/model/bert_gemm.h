// BERT's dense layers on the CPU: f32 weights packed once into panels of 16 output columns,
// and out[M, N] = x[M, K] @ W^T + b with register tiles of rows x panels. Every output is one
// multiply-add chain over k in order, started from its bias, so a row's result does not depend
// on M or on how rows are tiled (batch invariance), only on the ISA chosen at start-up.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace vllm::bert_gemm {

inline constexpr int64_t kPanel = 16;  // output columns per panel

struct PackedLinear {
  int64_t n = 0, k = 0;
  std::vector<float> panels;  // [ceil(n / 16), k, 16], columns past n zero
  std::vector<float> bias;    // [ceil(n / 16) * 16], zero past n
};

// w: [N, K] f32/f16/bf16; bias: N values.
PackedLinear pack(const Tensor& w, const std::vector<float>& bias);
// x: [M, K] f32 (rows may be strided); out: [M, N] f32.
void linear(const Tensor& x, const PackedLinear& w, Tensor& out);

// One ISA's kernel: rows x (1 or 2 panels) of out, from `panels` (the first panel of the
// group) and `bias` (that panel's first column). cols: valid columns from the first panel on.
using BlockFn = void (*)(const float* x, int64_t ldx, int64_t rows, const float* panels,
                         int num_panels, int64_t k, const float* bias, float* out, int64_t ldo,
                         int64_t cols);
namespace avx512 {
void run_block(const float* x, int64_t ldx, int64_t rows, const float* panels, int num_panels,
               int64_t k, const float* bias, float* out, int64_t ldo, int64_t cols);
}
namespace avx2 {
void run_block(const float* x, int64_t ldx, int64_t rows, const float* panels, int num_panels,
               int64_t k, const float* bias, float* out, int64_t ldo, int64_t cols);
}

}  // namespace vllm::bert_gemm
