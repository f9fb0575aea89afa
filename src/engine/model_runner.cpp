#include "engine/model_runner.h"

#include <algorithm>
#include <cstdio>

#include "runtime/ops.h"
#include "util/check.h"

namespace vllm {

ModelRunner::ModelRunner(const DecoderModel& model, int num_blocks, int block_size)
    : model_(model),
      cache_(model.allocate_kv_cache(num_blocks, block_size)),
      eos_ids_(model.config().eos_token_ids),
      inputs_(static_cast<int>(model.kv_cache_groups().size()), block_size) {}

void ModelRunner::add_request(const std::string& id, RunnerRequest request) {
  SamplerState sampler(request.params, request.prompt, request.seed);
  remove_request(id);
  std::unique_ptr<structured::GrammarMatcher> matcher;
  if (request.params.grammar)
    matcher = std::make_unique<structured::GrammarMatcher>(request.params.grammar);
  const bool waiting = matcher && !request.params.grammar_after.empty();
  states_.emplace(id, State{std::move(request), std::move(sampler), {}, false,
                            std::move(matcher), {}, waiting, {}});
}

void ModelRunner::grammar_wait(State& st, int32_t token) {
  const SamplingParams& p = st.request.params;
  if (token == p.grammar_after_token) {
    st.grammar_waiting = false;
    return;
  }
  const std::string* bytes = st.matcher->grammar().vocab->token_bytes(token);
  if (!bytes) return;
  st.grammar_tail += *bytes;
  if (st.grammar_tail.find(p.grammar_after) != std::string::npos) {
    st.grammar_waiting = false;
    return;
  }
  if (st.grammar_tail.size() > p.grammar_after.size())
    st.grammar_tail.erase(0, st.grammar_tail.size() - p.grammar_after.size());
}

void ModelRunner::remove_request(const std::string& id) {
  states_.erase(id);
  inputs_.remove_request(id);
}

std::unordered_map<std::string, StepSample> ModelRunner::execute(
    const core::SchedulerOutput& out, const std::function<bool()>& cancelled) {
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
  Tensor logits = model_.forward(b, cache_, cancelled);
  // The logits row a batch row samples from: after its prompt-logprobs rows, if any.
  const auto sample_row = [&](int batch_row) {
    const auto& s = out.scheduled[inputs_.scheduled_index(batch_row)];
    const State& st = *step_states_[inputs_.scheduled_index(batch_row)];
    int row = inputs_.first_logits_row(batch_row);
    if (st.wants_prompt_logprobs())
      row += std::clamp(static_cast<int>(st.request.prompt.size()) - 1 - s.num_computed_tokens, 0,
                        s.num_scheduled_tokens);
    return row;
  };
  // On a GPU, requests whose sampling is plain (model/sampling_params.h) draw their token
  // there and only ids travel: an argmax when all of them are greedy, else sample_rows with
  // each request's own uniform draw. Which path a request takes depends on its parameters
  // alone, so a seeded request gets the same tokens in any batch. Other rows' logits come to
  // the host sampler.
  std::vector<int32_t> device_tokens;  // by logits row; -1: sampled on the host
  if (logits.device() != kCpu) {
    const int64_t rows = logits.size(0);
    device_tokens.assign(rows, -1);
    std::vector<float> params(rows * 4, 0.0f);  // unset rows: greedy, and ignored
    std::vector<int32_t> top_k(rows, 0);
    std::vector<char> on_device(rows, 0);
    bool all_device = !any_prompt_logits, all_greedy = true;
    for (int batch_row = 0; batch_row < inputs_.num_rows(); ++batch_row) {
      const int k = inputs_.scheduled_index(batch_row);
      if (!out.scheduled[k].sample) continue;
      State& st = *step_states_[k];
      const SamplingParams& p = st.request.params;
      const int row = sample_row(batch_row);
      if (!p.plain()) {
        all_device = false;
        continue;
      }
      on_device[row] = 1;
      if (p.greedy()) continue;
      all_greedy = false;
      params[row * 4] = p.temperature;
      params[row * 4 + 1] = p.top_p;
      params[row * 4 + 2] = p.min_p;
      params[row * 4 + 3] = static_cast<float>(std::min(st.sampler.draw_uniform(), 0.99999994));
      top_k[row] = p.top_k;
    }
    if (std::find(on_device.begin(), on_device.end(), 1) != on_device.end()) {
      Tensor ids = Tensor::empty({rows}, DType::I32, logits.device());
      if (all_greedy) {
        argmax_rows(logits, ids);
      } else {
        const auto host_tensor = [](auto& v, DType dt, std::vector<int64_t> shape) {
          return Tensor::from_blob(v.data(), std::move(shape), dt, nullptr);
        };
        const Device d = logits.device();
        sample_rows(logits, host_tensor(params, DType::F32, {rows, 4}).to(d),
                    host_tensor(top_k, DType::I32, {rows}).to(d), ids);
      }
      const Tensor host = ids.to(kCpu);
      for (int64_t r = 0; r < rows; ++r)
        if (on_device[r]) device_tokens[r] = host.data<int32_t>()[r];
    }
    if (!all_device) logits = logits.to(kCpu);
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
    if (!device_tokens.empty() && device_tokens[row] >= 0) {
      st.sampler.append(device_tokens[row]);
      res.token_ids.push_back(device_tokens[row]);
      continue;
    }
    std::span<float> l(logits.data<float>() + int64_t(row) * vocab, vocab);
    // Only the row a request samples from gets a grammar mask: a prefill chunk that samples
    // nothing never reaches here.
    std::span<const uint32_t> mask;
    if (st.matcher && !st.grammar_waiting) {
      st.mask.resize(st.matcher->grammar().vocab->mask_words());
      try {
        st.matcher->fill_mask(st.mask);
      } catch (const Error& e) {
        // A grammar past its parse limit: the request ends with an error the client sees,
        // rather than going on unconstrained, ending as if complete, or stalling the step.
        res.error = std::string("structured output stopped: ") + e.what();
        continue;
      }
      mask = st.mask;
    }
    SampleResult r = sample(l, st.request.params, st.sampler, eos_ids_, mask);
    // The mask allowed the token, so only a terminated grammar (EOS taken) refuses more; a
    // limit passed while advancing shows in the next step's mask.
    if (st.matcher && st.grammar_waiting) {
      grammar_wait(st, r.token);
    } else if (st.matcher && !st.matcher->is_terminated()) {
      try {
        st.matcher->accept_token(r.token);
      } catch (const Error& e) {
        res.error = std::string("structured output stopped: ") + e.what();
        continue;
      }
    }
    res.token_ids.push_back(r.token);
    res.chosen = r.chosen;
    res.top = std::move(r.top);
  }
  return result;
}

}  // namespace vllm
