#include "model/last_token_pooling.h"

#include <cstring>

#include "util/check.h"

namespace vllm {

LastTokenPooling::LastTokenPooling(const DecoderModel& model, int max_model_len)
    : model_(model),
      max_model_len_(max_model_len > 0 ? max_model_len
                                       : model.config().max_position_embeddings) {
  if (model.device().kind != DeviceKind::Cpu)
    throw Error("last-token pooling runs on the CPU only (the model is on " +
                model.device().str() + ")");
}

std::vector<float> LastTokenPooling::embed(const std::vector<std::vector<int32_t>>& seqs) const {
  const int64_t hidden = hidden_size();
  constexpr int kBlock = 16;
  const int groups = static_cast<int>(model_.kv_cache_groups().size());
  std::vector<float> out(seqs.size() * static_cast<size_t>(hidden));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<int32_t>& ids = seqs[i];
    const int n = static_cast<int>(ids.size());
    VLLM_CHECK(n > 0 && n <= max_model_len_, "sequence of ", n, " tokens to pool");
    const int blocks = (n + kBlock - 1) / kBlock;
    KvCache cache = model_.allocate_kv_cache(blocks * groups, kBlock);
    const Tensor h = model_.hidden_states(
        single_sequence_batch(ids, 0, single_sequence_tables(groups, blocks), kBlock, {n - 1}),
        cache);
    std::memcpy(out.data() + i * hidden, h.data<float>(), hidden * sizeof(float));
  }
  return out;
}

std::string LastTokenPooling::describe() const {
  return model_.config().architecture + " (embedding, last-token pooling, normalized)";
}

}  // namespace vllm
