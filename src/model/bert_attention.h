// BERT's bidirectional attention on the CPU: every token of a sequence attends to all tokens of
// its sequence, one (sequence, head) per task. Each score is a multiply-add chain over the head
// dimension in order and each output one over the keys in order, so a sequence's result does
// not depend on its batch (only on the ISA chosen at start-up).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace vllm::bert_attention {

// qkv: [T, 3H] (q | k | v, heads contiguous inside each); out: [T, H]; starts: [num_seqs + 1]
// token offsets of the packed sequences.
void attention(const Tensor& qkv, const std::vector<int32_t>& starts, int num_heads, Tensor& out);

// One ISA's kernel for one (sequence, head): q, k, v point at the head's first column of the
// sequence's first row (rows `ld` floats apart), out likewise (rows `ldo` apart); scratch holds
// at least (d + 1) * (len rounded up to 16) floats.
using HeadFn = void (*)(const float* q, const float* k, const float* v, int64_t ld, int64_t len,
                        int64_t d, float scale, float* out, int64_t ldo, float* scratch);
namespace avx512 {
void head(const float* q, const float* k, const float* v, int64_t ld, int64_t len, int64_t d,
          float scale, float* out, int64_t ldo, float* scratch);
}
namespace avx2 {
void head(const float* q, const float* k, const float* v, int64_t ld, int64_t len, int64_t d,
          float scale, float* out, int64_t ldo, float* scratch);
}

}  // namespace vllm::bert_attention
