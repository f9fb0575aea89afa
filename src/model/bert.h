// Encoder-only BERT for sentence embeddings (transformers' BertModel, pooled and normalised as
// the checkpoint's sentence-transformers modules.json says): bidirectional attention over each
// sequence on its own, no KV cache. CPU only; immutable after load; embed() parallelises itself
// on the shared CPU pool, so callers run one embed() at a time (the PoolingEngine's worker).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/pooling_model.h"
#include "runtime/tensor.h"

namespace vllm {

struct BertConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int intermediate_size = 0;
  int max_position_embeddings = 0;
  int type_vocab_size = 0;
  float layer_norm_eps = 1e-12f;
};

// What turns token states into one vector (sentence-transformers' Pooling and Normalize).
struct PoolingConfig {
  enum class Mode { kMean, kCls };
  Mode mode = Mode::kCls;  // vLLM's default for BERT without a sentence-transformers config
  bool normalize = true;
  int max_seq_length = 0;  // sentence_bert_config.json's, 0 when absent
};

// True when dir/config.json names an encoder this file serves (architectures: BertModel).
bool is_bert_model(const std::string& dir);

class BertModel : public PoolingModel {
 public:
  // Throws vllm::Error naming the file or field for anything it cannot serve, and for a
  // non-CPU device.
  static std::unique_ptr<BertModel> load(const std::string& dir, Device device = kCpu);
  ~BertModel() override;

  const BertConfig& config() const { return config_; }
  const PoolingConfig& pooling() const { return pooling_; }
  int hidden_size() const override { return config_.hidden_size; }
  bool normalize_by_default() const override { return pooling_.normalize; }
  std::string describe() const override;
  // The longest sequence served: max_position_embeddings, or less when sentence-transformers
  // says so (its max_seq_length, as vLLM derives max_model_len).
  int max_model_len() const override;

  // One pooled vector per sequence, not yet normalised (see normalize()); each sequence is
  // complete token ids (with [CLS] / [SEP]), 1..max_position_embeddings long, ids in the
  // vocabulary. Sequences never see each other. Returns [num_seqs * hidden_size], row-major.
  std::vector<float> embed(const std::vector<std::vector<int32_t>>& seqs) const override;
  // sentence-transformers' Normalize (l2_normalize).
  static void normalize(float* v, int64_t n) { l2_normalize(v, n); }

  struct Layer;  // weights of one encoder layer (bert.cpp)

 private:
  BertModel() = default;
  void encoder_layer(const Layer& layer, const std::vector<int32_t>& starts, Tensor& x) const;

  BertConfig config_;
  PoolingConfig pooling_;
  std::shared_ptr<void> weights_;  // keeps the mapped checkpoint alive
  Tensor word_embeddings_;         // [vocab, hidden]
  std::vector<float> position_embeddings_, token_type0_;  // [max_pos * hidden], [hidden]
  std::vector<float> embed_ln_weight_, embed_ln_bias_;
  std::vector<Layer> layers_;
};

}  // namespace vllm
