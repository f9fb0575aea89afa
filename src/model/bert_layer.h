// Internal to bert*.cpp: the weights of one BERT encoder layer (post-LayerNorm), packed for
// bert_gemm, with q, k and v fused into one matrix so one matmul makes all three.
#pragma once
#include <vector>

#include "model/bert.h"
#include "model/bert_gemm.h"

namespace vllm {

struct BertModel::Layer {
  bert_gemm::PackedLinear qkv;       // [3H, H]
  bert_gemm::PackedLinear attn_out;  // [H, H]
  std::vector<float> attn_ln_weight, attn_ln_bias;
  bert_gemm::PackedLinear up;        // [I, H]
  bert_gemm::PackedLinear down;      // [H, I]
  std::vector<float> out_ln_weight, out_ln_bias;
};

}  // namespace vllm
