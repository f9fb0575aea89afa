// ModelRunner: turns the scheduler's decisions into a ForwardBatch over the paged KV cache,
// runs the model and samples. Per-request state (sampler, prompt logprobs) and the persistent
// batch (block tables) live between steps; a request's sampling depends only on itself.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "engine/input_batch.h"
#include "model/decoder.h"
#include "model/sampler.h"
#include "structured/matcher.h"

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
  // Set when the request cannot go on (its grammar passed a matcher limit): no token was
  // sampled, and the engine ends the request with finish_reason "error" and this message.
  std::string error;
};

class ModelRunner {
 public:
  ModelRunner(const DecoderModel& model, int num_blocks, int block_size);

  // A request is known from add_request until remove_request; it gets a batch row when the
  // scheduler first schedules it. add_request replaces any state under the same id.
  void add_request(const std::string& id, RunnerRequest request);
  void remove_request(const std::string& id);
  // One step: forward every scheduled token, sample where the scheduler asks. Every
  // SchedulerOutput must come here, in order: running requests carry only their table edits.
  // `cancelled`: see DecoderModel::forward (StepCancelled propagates; no sampling happens).
  std::unordered_map<std::string, StepSample> execute(const core::SchedulerOutput& out,
                                                      const std::function<bool()>& cancelled = {});
  const std::vector<int>& eos_ids() const { return eos_ids_; }

 private:
  struct State {
    RunnerRequest request;
    SamplerState sampler;
    // Prompt logprobs of chunks computed so far, handed out with the first sampled token.
    std::vector<std::pair<TokenLogprob, std::vector<TokenLogprob>>> prompt_logprobs;
    bool prompt_logprobs_sent = false;  // a recompute after preemption must not repeat them
    // With a grammar: the sequence's position in it, advanced by every sampled token (it
    // outlives preemption, as the output tokens do) and the mask scratch.
    std::unique_ptr<structured::GrammarMatcher> matcher;
    std::vector<uint32_t> mask;
    // params.grammar_after not yet seen: sampling is free, the last bytes are kept to find it.
    bool grammar_waiting = false;
    std::string grammar_tail;
    bool wants_prompt_logprobs() const {
      return request.params.prompt_logprobs.has_value() && !prompt_logprobs_sent;
    }
  };

  // A sampled token while the grammar waits for params.grammar_after.
  static void grammar_wait(State& st, int32_t token);

  const DecoderModel& model_;
  KvCache cache_;
  std::vector<int> eos_ids_;
  std::unordered_map<std::string, State> states_;
  InputBatch inputs_;
  // Per scheduled request of the current step (scratch kept for its capacity).
  std::vector<State*> step_states_;
  std::vector<int> prompt_logits_end_;
};

}  // namespace vllm
