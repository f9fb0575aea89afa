// What the PoolingEngine runs: a model that turns each token sequence into one vector. BERT
// pools its encoder's output; a decoder pools its last token (model/last_token_pooling.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vllm {

class PoolingModel {
 public:
  virtual ~PoolingModel() = default;
  virtual int hidden_size() const = 0;  // the length of each pooled vector
  // The longest sequence served (at most the model's position limit).
  virtual int max_model_len() const = 0;
  // Whether vectors are L2-normalised when a request does not say (vLLM's pooler default).
  virtual bool normalize_by_default() const = 0;
  // One pooled vector per sequence, not normalised: [num_seqs * hidden_size], row-major. Each
  // sequence is 1..max_model_len() valid token ids; sequences never see each other, so a
  // vector does not depend on its batch. One call at a time (the PoolingEngine's worker).
  virtual std::vector<float> embed(const std::vector<std::vector<int32_t>>& seqs) const = 0;
  // A short description for the start-up log line ("BertModel (embedding, mean pooling)").
  virtual std::string describe() const = 0;
};

// In place: v / max(||v||_2, 1e-12), as torch.nn.functional.normalize.
void l2_normalize(float* v, int64_t n);

}  // namespace vllm
