// Opening a model the way a user names it: a .gguf file or a Hugging Face directory.
// Returns the decoder, its config and its tokenizer, ready for a runner.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "model/decoder.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

class NodeGroup;

struct LoadedModel {
  std::string path;
  // Under tensor parallelism: rank 0's shard (with a node group, this node's first rank's).
  std::unique_ptr<DecoderModel> model;
  std::vector<std::unique_ptr<DecoderModel>> other_ranks;  // the node's other ranks
  std::unique_ptr<Tokenizer> tokenizer;
  std::string weights;  // how the weights were read, e.g. "fp8 checkpoint, 128x128 block scales"
  const ModelConfig& config() const { return model->config(); }
  // Every rank's shard, rank 0 first (only `model` without tensor parallelism).
  std::vector<const DecoderModel*> ranks() const;
  // DecoderModel::set_kv_cache_dtype on every rank (--kv-cache-dtype).
  void set_kv_cache_dtype(const std::string& name);
  // DecoderModel::set_enforce_eager on every rank (--enforce-eager).
  void set_enforce_eager(bool eager);
};

// max_model_len: the context the engine will serve, if the user set one (0: the model's own);
// it picks LongRoPE's factors (ModelConfig::max_model_len).
// tensor_parallel_size > 1 loads one shard per rank (model/tensor_parallel.h), each rank
// reading only its slices; on the CPU the ranks are joined by thread communicators, on CUDA
// rank r runs on GPU device.index + r and they are joined over NCCL. dtype: --dtype
// (ModelConfig::dtype; see parse_dtype). quantization: --quantization ("", "none" or "fp8";
// model/quantization.h), for Hugging Face directories only. group: a tensor-parallel group
// spanning processes (runtime/node_group.h): only this node's shards are loaded, rank j of the
// node on GPU device.index + j, joined by the group's communicators.
LoadedModel load_model(const std::string& path, const DecoderModel::Progress& on_layer = {},
                       Device device = kCpu, int max_model_len = 0,
                       int tensor_parallel_size = 1, std::optional<DType> dtype = std::nullopt,
                       const std::string& quantization = {}, NodeGroup* group = nullptr);
// --dtype as vLLM spells it: "auto" (unset), "bfloat16", "float16" or "half", "float32" or
// "float". Throws on anything else, naming the choices.
std::optional<DType> parse_dtype(const std::string& name);
// Only the tokenizer of a model (no weights are read): tokenizer.json + tokenizer_config.json
// of a directory, or the vocabulary embedded in a .gguf file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
// The embedded default (SmolLM2-135M-Instruct Q4_1) as placed by scripts/setup.sh.
std::string default_model_path();

}  // namespace vllm
