#include "engine/model_runner.h"

#include "runtime/ops.h"
#include "util/check.h"

namespace vllm {

ModelRunner::ModelRunner(const DecoderModel& model, int num_blocks, int block_size)
    : model_(model),
      cache_(model.allocate_kv_cache(num_blocks, block_size)),
      eos_ids_(model.config().eos_token_ids),
      inputs_(/*num_groups=*/1, block_size) {}

void ModelRunner::add_request(const std::string& id, RunnerRequest request) {
  SamplerState sampler(request.params, request.prompt, request.seed);
  remove_request(id);
  states_.emplace(id, State{std::move(request), std::move(sampler), {}, false});
}

void ModelRunner::remove_request(const std::string& id) {
  states_.erase(id);
  inputs_.remove_request(id);
}

std::unordered_map<std::string, StepSample> ModelRunner::execute(const core::SchedulerOutput& out) {
  step_states_.clear();
  prompt_logits_end_.clear();
  bool any_prompt_logits = false;
  for (const auto& s : out.scheduled) {
    auto it = states_.find(s.request_id);
    VLLM_CHECK(it != states_.end(), "scheduled unknown request ", s.request_id);
    State& st = it->second;
    if (s.num_computed_tokens == 0) st.prompt_logprobs.clear();  // (re)starting from scratch
    const int end = st.wants_prompt_logprobs() ? static_cast<int>(st.request.prompt.size()) - 1 : 0;
    any_prompt_logits |= end > 0;
    prompt_logits_end_.push_back(end);
    step_states_.push_back(&st);
  }
  // Rows of the batch follow the persistent batch, not out.scheduled: map back per row.
  const ForwardBatch& b = inputs_.prepare(
      out, any_prompt_logits ? std::span<const int>(prompt_logits_end_) : std::span<const int>());
  std::unordered_map<std::string, StepSample> result;
  if (b.token_ids.empty()) return result;
  Tensor logits = model_.forward(b, cache_);
  // On a GPU, when every sampled request is plain greedy, the argmax is taken there and only
  // the token ids travel; otherwise the logits come to the host sampler.
  std::vector<int32_t> device_tokens;
  if (logits.device() != kCpu) {
    bool plain = !any_prompt_logits;
    for (const State* st : step_states_) plain &= st->request.params.plain_greedy();
    if (plain) {
      Tensor ids = Tensor::empty({logits.size(0)}, DType::I32, logits.device());
      argmax_rows(logits, ids);
      const Tensor host = ids.to(kCpu);
      device_tokens.assign(host.data<int32_t>(), host.data<int32_t>() + host.numel());
    } else {
      logits = logits.to(kCpu);
    }
  }
  const int vocab = model_.config().vocab_size;
  for (int batch_row = 0; batch_row < inputs_.num_rows(); ++batch_row) {
    const int k = inputs_.scheduled_index(batch_row);
    const auto& s = out.scheduled[k];
    State& st = *step_states_[k];
    StepSample& res = result[s.request_id];
    int row = inputs_.first_logits_row(batch_row);
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
    if (!device_tokens.empty()) {
      st.sampler.append(device_tokens[row]);
      res.token_ids.push_back(device_tokens[row]);
      continue;
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
