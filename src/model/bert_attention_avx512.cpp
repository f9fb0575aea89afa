// bert_attention's kernel built for AVX-512 (this file gets the AVX-512 flags).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/bert_attention.h"

namespace vllm::bert_attention::avx512 {
#include "model/bert_attention.inc"
}  // namespace vllm::bert_attention::avx512
