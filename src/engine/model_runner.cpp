#include "engine/model_runner.h"

#include <algorithm>

#include "util/check.h"

namespace vllm {

ModelRunner::ModelRunner(const DecoderModel& model, int num_blocks, int block_size)
    : model_(model),
      cache_(model.allocate_kv_cache(num_blocks, block_size)),
      block_size_(block_size),
      eos_ids_(model.config().eos_token_ids) {}

void ModelRunner::add_request(const std::string& id, RunnerRequest request) {
  SamplerState sampler(request.params, request.prompt, request.seed);
  states_.erase(id);
  states_.emplace(id, State{std::move(request), std::move(sampler), {}, false});
}

void ModelRunner::remove_request(const std::string& id) { states_.erase(id); }

std::unordered_map<std::string, StepSample> ModelRunner::execute(const core::SchedulerOutput& out) {
  ForwardBatch b;
  int max_blocks = 0;
  for (const auto& s : out.scheduled) max_blocks = std::max<int>(max_blocks, s.block_ids[0].size());
  b.attn.max_blocks_per_seq = std::max(1, max_blocks);
  b.attn.query_start_loc.push_back(0);
  std::vector<int> first_row;  // per scheduled request: its first row of the logits
  for (const auto& s : out.scheduled) {
    const auto& table = s.block_ids[0];
    VLLM_CHECK(states_.count(s.request_id), "scheduled unknown request ", s.request_id);
    State& st = states_.at(s.request_id);
    if (s.num_computed_tokens == 0) st.prompt_logprobs.clear();  // (re)starting from scratch
    const int start = static_cast<int>(b.token_ids.size());
    for (int i = 0; i < s.num_scheduled_tokens; ++i) {
      const int pos = s.num_computed_tokens + i;
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(table[pos / block_size_] * block_size_ + pos % block_size_);
    }
    b.attn.query_start_loc.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.attn.seq_lens.push_back(s.num_computed_tokens + s.num_scheduled_tokens);
    b.attn.block_tables.insert(b.attn.block_tables.end(), table.begin(), table.end());
    b.attn.block_tables.resize(b.attn.block_tables.size() + (b.attn.max_blocks_per_seq - table.size()), 0);
    // Prompt logprobs need every prompt position of the chunk; sampling needs the last row.
    first_row.push_back(static_cast<int>(b.logits_indices.size()));
    const int num_prompt = static_cast<int>(st.request.prompt.size());
    if (st.wants_prompt_logprobs()) {
      for (int i = 0; i < s.num_scheduled_tokens; ++i)
        if (s.num_computed_tokens + i < num_prompt - 1) b.logits_indices.push_back(start + i);
    }
    if (s.sample) b.logits_indices.push_back(start + s.num_scheduled_tokens - 1);
  }
  std::unordered_map<std::string, StepSample> result;
  if (b.token_ids.empty()) return result;
  Tensor logits = model_.forward(b, cache_);
  if (logits.device() != kCpu) logits = logits.to(kCpu);
  const int vocab = model_.config().vocab_size;
  for (size_t k = 0; k < out.scheduled.size(); ++k) {
    const auto& s = out.scheduled[k];
    State& st = states_.at(s.request_id);
    StepSample& res = result[s.request_id];
    int row = first_row[k];
    const int num_prompt = static_cast<int>(st.request.prompt.size());
    if (st.wants_prompt_logprobs()) {
      for (int i = 0; i < s.num_scheduled_tokens; ++i) {
        const int pos = s.num_computed_tokens + i;
        if (pos >= num_prompt - 1) break;
        std::span<const float> l(logits.data<float>() + int64_t(row++) * vocab, vocab);
        st.prompt_logprobs.emplace_back(logprob_of(l, st.request.prompt[pos + 1]),
                                        top_logprobs(l, *st.request.params.prompt_logprobs));
      }
    }
    if (!s.sample) continue;
    if (st.wants_prompt_logprobs()) {
      res.prompt_logprobs = std::move(st.prompt_logprobs);
      st.prompt_logprobs.clear();
      st.prompt_logprobs_sent = true;
    }
    std::span<float> l(logits.data<float>() + int64_t(row) * vocab, vocab);
    SampleResult r = sample(l, st.request.params, st.sampler, eos_ids_);
    res.token_ids.push_back(r.token);
    res.chosen = r.chosen;
    res.top = std::move(r.top);
  }
  return result;
}

}  // namespace vllm
