// A single-sequence driver over the decoder and a private paged KV cache: chunked prefill,
// then one token per step. The engine core replaces it for batched serving.
#pragma once
#include <functional>
#include <vector>

#include "model/decoder.h"
#include "model/sampler.h"

namespace vllm {

struct GenerateOptions {
  int max_tokens = 64;
  bool ignore_eos = false;
  SamplingParams sampling = greedy_params();
  int prefill_chunk = 512;

  static SamplingParams greedy_params() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
};

class Generator {
 public:
  Generator(const DecoderModel& model, int max_model_len, int block_size = 16);
  // Generates after `prompt`; on_token(id) is called per new token and may return false to
  // stop. Returns the generated ids.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const GenerateOptions& opts,
                                const std::function<bool(int32_t)>& on_token = {});
  // Logits for every new token position of the last call's steps, when asked (tests).
  bool keep_logits = false;
  std::vector<std::vector<float>> step_logits;

 private:
  // Runs tokens [start, start + n) of `seq`; logits [1, vocab] of the last one, on the
  // model's device.
  Tensor run(const std::vector<int32_t>& seq, int start, int n);
  int32_t next_token(const Tensor& logits, const GenerateOptions& opts, SamplerState& sampler);

  const DecoderModel& model_;
  int max_model_len_;
  int block_size_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> block_tables_;  // per KV cache group
};

}  // namespace vllm
