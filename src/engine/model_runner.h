// ModelRunner: turns the scheduler's decisions into a ForwardBatch over the paged KV cache,
// runs the model and samples. It keeps per-request state (block table, sampler) between steps
// so that a request's sampling depends only on itself, never on its batch.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "model/decoder.h"
#include "model/sampler.h"

namespace vllm {

struct RunnerRequest {
  SamplingParams params;
  std::vector<int32_t> prompt;
  uint64_t seed = 0;  // used when params.seed is unset
};

struct StepSample {
  std::vector<int> token_ids;  // zero or one token this step
  std::optional<TokenLogprob> chosen;
  std::vector<TokenLogprob> top;
  // With the first sampled token: the prompt logprobs, entry i for prompt token i + 1 (the
  // first prompt token has none).
  std::vector<std::pair<TokenLogprob, std::vector<TokenLogprob>>> prompt_logprobs;
};

class ModelRunner {
 public:
  ModelRunner(const DecoderModel& model, int num_blocks, int block_size);

  void add_request(const std::string& id, RunnerRequest request);
  void remove_request(const std::string& id);
  // One step: forward every scheduled token, sample where the scheduler asks.
  std::unordered_map<std::string, StepSample> execute(const core::SchedulerOutput& out);
  const std::vector<int>& eos_ids() const { return eos_ids_; }

 private:
  struct State {
    RunnerRequest request;
    SamplerState sampler;
    // Prompt logprobs of chunks computed so far, handed out with the first sampled token.
    std::vector<std::pair<TokenLogprob, std::vector<TokenLogprob>>> prompt_logprobs;
    bool prompt_logprobs_sent = false;  // a recompute after preemption must not repeat them
    bool wants_prompt_logprobs() const {
      return request.params.prompt_logprobs.has_value() && !prompt_logprobs_sent;
    }
  };

  const DecoderModel& model_;
  KvCache cache_;
  int block_size_;
  std::vector<int> eos_ids_;
  std::unordered_map<std::string, State> states_;
};

}  // namespace vllm
