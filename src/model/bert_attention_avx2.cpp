// bert_attention's kernel built for AVX2 + FMA (this file gets those flags).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/bert_attention.h"

namespace vllm::bert_attention::avx2 {
#include "model/bert_attention.inc"
}  // namespace vllm::bert_attention::avx2
