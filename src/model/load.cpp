#include "model/load.h"

#include <algorithm>
#include <filesystem>
#include <future>

#include "loader/gguf.h"
#include "loader/json_file.h"
#include "loader/safetensors.h"
#include "model/arch.h"
#include "model/bert.h"
#include "model/quantization.h"
#include "model/tensor_parallel.h"
#include "runtime/device.h"
#include "runtime/node_group.h"
#include "util/check.h"

namespace vllm {
namespace {

namespace fs = std::filesystem;

GgufVocab vocab_from_gguf(const GgufFile& g) {
  GgufVocab v;
  v.model = g.get_string("tokenizer.ggml.model").value_or("");
  v.pre = g.get_string("tokenizer.ggml.pre").value_or("default");
  v.tokens = g.get_string_array("tokenizer.ggml.tokens");
  for (int64_t t : g.get_int_array("tokenizer.ggml.token_type")) v.token_types.push_back(static_cast<int32_t>(t));
  v.scores = g.get_float_array("tokenizer.ggml.scores");
  v.merges = g.get_string_array("tokenizer.ggml.merges");
  auto id = [&](const char* key) -> std::optional<int32_t> {
    if (auto x = g.get_int(key)) return static_cast<int32_t>(*x);
    return std::nullopt;
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  v.add_bos = g.get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = g.get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix");
  v.chat_template = g.get_string("tokenizer.chat_template");
  if (v.tokens.empty()) throw Error(g.path() + ": no tokenizer vocabulary (tokenizer.ggml.tokens)");
  return v;
}

// The decoder of `config`, as one model or as tensor-parallel shards (with a node group, this
// node's shards only).
void build_ranks(LoadedModel& out, ModelConfig config, const WeightSource& weights,
                 const DecoderModel::Progress& on_layer, Device device, int tp,
                 NodeGroup* group) {
  if (tp < 1) throw Error("--tensor-parallel-size must be at least 1, got " + std::to_string(tp));
  if (group && group->nnodes() > 1 && group->tensor_parallel_size() != tp)
    throw Error("the node group has " + std::to_string(group->tensor_parallel_size()) +
                " ranks, the model is split " + std::to_string(tp) + " ways");
  if (group && group->nnodes() == 1) group = nullptr;
  if (tp == 1) {
    out.model = std::make_unique<DecoderModel>(std::move(config), weights, on_layer, device);
    return;
  }
  const int local = group ? group->ranks_per_node() : tp;
  const int first = group ? group->first_rank() : 0;
  // On CUDA this process's rank j runs on GPU device.index + j, its collectives over NCCL; on
  // the CPU the ranks are threads sharing the cores.
  std::vector<int> gpus;
  if (device.kind == DeviceKind::Cuda) {
    const int count = cuda_device_count() * cuda_backends_per_gpu();
    if (device.index + local > count)
      throw Error("--tensor-parallel-size " + std::to_string(tp) +
                  (group ? " over --nnodes " + std::to_string(group->nnodes()) : std::string()) +
                  " on " + device.str() + " needs GPUs " + device.str() + " to cuda:" +
                  std::to_string(device.index + local - 1) + " on this node, but " +
                  std::to_string(count) + " CUDA device(s) are present");
    for (int j = 0; j < local; ++j) gpus.push_back(device.index + j);
  }
  (void)shard_config(config, {0, tp});  // a size that does not split is refused before NCCL starts
  // NCCL needs a GPU of its own for each rank; ranks on backends that share GPUs (tests:
  // set_cuda_backends_per_gpu) are joined through the host.
  const bool own_gpus = std::all_of(gpus.begin(), gpus.end(),
                                    [](int g) { return cuda_physical_device(g) == g; });
  std::vector<std::shared_ptr<Communicator>> comms;
  if (group) {
    if (!own_gpus) throw Error("tensor parallel across nodes needs a GPU of its own per rank");
    comms = group->communicators(gpus);
  } else {
    comms = gpus.empty() || !own_gpus ? make_thread_communicators(tp)
                                      : make_nccl_communicators(gpus);
  }
  for (int j = 0; j < local; ++j) {
    const TpRank rank{first + j, tp};
    const Device rank_device = gpus.empty() ? device : Device{DeviceKind::Cuda, gpus[size_t(j)]};
    auto source = make_shard_source(weights, config, rank);
    DecoderModel::Progress progress;
    if (on_layer)
      progress = [&](int done, int total) { on_layer(j * total + done, local * total); };
    auto m = std::make_unique<DecoderModel>(shard_config(config, rank), *source, progress,
                                            rank_device, comms[size_t(j)]);
    if (j == 0) out.model = std::move(m);
    else out.other_ranks.push_back(std::move(m));
  }
}

}  // namespace

std::vector<const DecoderModel*> LoadedModel::ranks() const {
  std::vector<const DecoderModel*> out{model.get()};
  for (const auto& m : other_ranks) out.push_back(m.get());
  return out;
}

void LoadedModel::set_enforce_eager(bool eager) {
  model->set_enforce_eager(eager);
  for (auto& m : other_ranks) m->set_enforce_eager(eager);
}

void LoadedModel::set_kv_cache_dtype(const std::string& name) {
  model->set_kv_cache_dtype(name);
  for (auto& m : other_ranks) m->set_kv_cache_dtype(name);
}

std::optional<DType> parse_dtype(const std::string& name) {
  if (name == "auto") return std::nullopt;
  if (name == "bfloat16") return DType::BF16;
  if (name == "float16" || name == "half") return DType::F16;
  if (name == "float32" || name == "float") return DType::F32;
  throw Error("--dtype " + name + ": expected auto, bfloat16, float16 (half) or float32 (float)");
}

std::string default_model_path() {
  return std::string(VLLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(p)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(p)) {
    if (!fs::exists(p / "tokenizer.json")) throw Error(path + ": no tokenizer.json");
    return Tokenizer::from_dir(path);
  }
  return Tokenizer::from_gguf_vocab(vocab_from_gguf(*GgufFile::open(path)));
}

LoadedModel load_model(const std::string& path, const DecoderModel::Progress& on_layer,
                       Device device, int max_model_len, int tensor_parallel_size,
                       std::optional<DType> dtype, const std::string& quantization,
                       NodeGroup* group) {
  LoadedModel out;
  out.path = path;
  const fs::path p(path);
  if (!fs::exists(p)) throw Error(path + ": no such file or directory");
  if (fs::is_directory(p)) {
    const fs::path cfg = p / "config.json";
    if (!fs::exists(cfg)) throw Error(path + ": not a model directory (no config.json)");
    if (is_bert_model(path))
      throw Error(path + " is an embedding model (BertModel): serve it with `vllm-cpp serve` "
                  "and POST /v1/embeddings");
    nlohmann::json gen;
    if (const fs::path g = p / "generation_config.json"; fs::exists(g)) gen = read_json_file(g);
    const nlohmann::json hf = read_json_file(cfg);
    ModelConfig config = config_from_hf(hf, gen);
    config.max_model_len = max_model_len;
    config.dtype = dtype;
    const QuantConfig quant = parse_quant_config(hf, quantization);
    config.quantize_fp8 = quant.method == QuantConfig::Method::kFp8AtLoad;
    auto weights = make_quantized_source(SafetensorsModel::open(path), quant);
    out.weights = quant.describe();
    // The tokenizer (Llama-3's: ~0.3 s to parse) is read while the weights load.
    std::future<std::unique_ptr<Tokenizer>> tokenizer;
    if (fs::exists(p / "tokenizer.json"))
      tokenizer = std::async(std::launch::async, [path] { return Tokenizer::from_dir(path); });
    build_ranks(out, std::move(config), *weights, on_layer, device, tensor_parallel_size, group);
    if (tokenizer.valid()) out.tokenizer = tokenizer.get();
    return out;
  }
  if (!quantization.empty() && quantization != "none")
    throw Error("--quantization " + quantization + ": " + path +
                " is a GGUF file, whose weights keep their stored types");
  auto gguf = GgufFile::open(path);
  ModelConfig config = config_from_gguf(*gguf);
  config.max_model_len = max_model_len;
  config.dtype = dtype;
  out.tokenizer = Tokenizer::from_gguf_vocab(vocab_from_gguf(*gguf));
  auto weights = make_gguf_source(gguf, config);
  out.weights = "GGUF types as stored";
  build_ranks(out, std::move(config), *weights, on_layer, device, tensor_parallel_size, group);
  return out;
}

}  // namespace vllm
