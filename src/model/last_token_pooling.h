// A decoder served as an embedding model (vLLM's --runner pooling / --convert embed on a
// generative checkpoint): each sequence's vector is the final-norm hidden state of its last
// token, L2-normalised by default. One embed() is one forward over all its sequences, each a
// fresh context in blocks of its own; in the default CPU order a row's arithmetic does not
// depend on the batch, so neither does a vector. CPU and one rank only.
#pragma once
#include <string>

#include "model/decoder.h"
#include "model/pooling_model.h"

namespace vllm {

class LastTokenPooling : public PoolingModel {
 public:
  // max_model_len: the longest sequence served (0: the model's max_position_embeddings).
  // Throws vllm::Error for a model on a GPU or split across ranks.
  LastTokenPooling(const DecoderModel& model, int max_model_len = 0);

  int hidden_size() const override { return model_.config().hidden_size; }
  int max_model_len() const override { return max_model_len_; }
  bool normalize_by_default() const override { return true; }
  std::vector<float> embed(const std::vector<std::vector<int32_t>>& seqs) const override;
  std::string describe() const override;

 private:
  const DecoderModel& model_;
  int max_model_len_;
};

}  // namespace vllm
