#include "model/generator.h"

#include <algorithm>
#include <numeric>

#include "runtime/ops.h"
#include "util/check.h"

namespace vllm {

Generator::Generator(const DecoderModel& model, int max_model_len, int block_size)
    : model_(model), max_model_len_(max_model_len), block_size_(block_size) {
  const int num_blocks = (max_model_len + block_size - 1) / block_size;
  const int groups = static_cast<int>(model.kv_cache_groups().size());
  cache_ = model.allocate_kv_cache(num_blocks * groups, block_size);
  block_tables_ = single_sequence_tables(groups, num_blocks);
}

Tensor Generator::run(const std::vector<int32_t>& seq, int start, int n) {
  const ForwardBatch b = single_sequence_batch(std::span<const int32_t>(seq).subspan(start, n),
                                               start, block_tables_, block_size_, {n - 1});
  return model_.forward(b, cache_);
}

int32_t Generator::next_token(const Tensor& logits, const GenerateOptions& opts,
                              SamplerState& sampler) {
  if (logits.device() != kCpu && opts.sampling.plain_greedy() && !keep_logits) {
    Tensor id = Tensor::empty({1}, DType::I32, logits.device());
    argmax_rows(logits, id);
    return id.to(kCpu).data<int32_t>()[0];  // 4 bytes travel, not the vocabulary
  }
  const Tensor host = logits.device() == kCpu ? logits : logits.to(kCpu);
  std::vector<float> row(host.data<float>(), host.data<float>() + model_.config().vocab_size);
  if (keep_logits) step_logits.push_back(row);
  return sample(row, opts.sampling, sampler, model_.config().eos_token_ids).token;
}

std::vector<int32_t> Generator::generate(const std::vector<int32_t>& prompt,
                                         const GenerateOptions& opts,
                                         const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) throw Error("the prompt is empty");
  if (static_cast<int>(prompt.size()) >= max_model_len_)
    throw Error("prompt of " + std::to_string(prompt.size()) +
                " tokens does not fit max_model_len " + std::to_string(max_model_len_));
  step_logits.clear();
  SamplerState sampler(opts.sampling, prompt, std::random_device{}());
  std::vector<int32_t> seq = prompt, out;
  Tensor logits;
  const int chunk = std::max(1, opts.prefill_chunk);
  for (int start = 0; start < static_cast<int>(prompt.size()); start += chunk)
    logits = run(seq, start, std::min<int>(chunk, static_cast<int>(prompt.size()) - start));
  const auto& eos = model_.config().eos_token_ids;
  while (static_cast<int>(out.size()) < opts.max_tokens &&
         static_cast<int>(seq.size()) < max_model_len_) {
    const int32_t tok = next_token(logits, opts, sampler);
    out.push_back(tok);
    seq.push_back(tok);
    const bool is_eos = std::find(eos.begin(), eos.end(), tok) != eos.end();
    if (on_token && !on_token(tok)) break;
    if (is_eos && !opts.ignore_eos) break;
    if (static_cast<int>(out.size()) >= opts.max_tokens) break;
    logits = run(seq, static_cast<int>(seq.size()) - 1, 1);
  }
  return out;
}

}  // namespace vllm
