// Internal to bert*.cpp: the weights of one BERT encoder layer (post-LayerNorm), with q, k and v
// fused into one matrix so one matmul makes all three.
#pragma once
#include <vector>

#include "model/bert.h"

namespace vllm {

struct BertModel::Layer {
  Tensor qkv_weight, qkv_bias;            // [3H, H], [3H] f32
  Tensor attn_out_weight, attn_out_bias;  // [H, H], [H] f32
  std::vector<float> attn_ln_weight, attn_ln_bias;
  Tensor up_weight, up_bias;              // [I, H], [I] f32
  Tensor down_weight, down_bias;          // [H, I], [H] f32
  std::vector<float> out_ln_weight, out_ln_bias;
};

}  // namespace vllm
