// `vllm-cpp generate`: prompt in, text out, on one model (greedy or seeded sampling).
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/batch.h"
#include "cli/commands.h"
#include "engine/remote_ranks.h"
#include "model/generator.h"
#include "model/load.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/thread_pool.h"
#include "util/check.h"

namespace vllm::cli {

int run_guarded(const std::function<int()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompt;
  int max_tokens = 64;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  int64_t seed = -1;
  int threads = 0;
  int max_model_len = 2048;
  bool ignore_eos = false;
  bool quiet = false;
  // Offline batch mode (engine core).
  std::string input, output;
  EngineConfig engine;
  std::string kv_cache_memory;
  double gpu_memory_utilization = 0.9;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  std::string cpu_order = "batch-invariant";
  bool enforce_eager = false;
  bool no_prefix_caching = false;
  int tensor_parallel_size = 1;  // batch mode
  NodeGroupConfig nodes;          // batch mode, across processes
  KernelOptions kernels;
};

}  // namespace

void add_cpu_order_option(CLI::App& cmd, std::string& order) {
  cmd.add_option("--cpu-order", order,
                 "CPU float summation order: batch-invariant (a token's logits do not depend on "
                 "batching or chunking) or llamacpp (llama.cpp's own, bit for bit under its "
                 "schedule)")
      ->check(CLI::IsMember({"batch-invariant", "llamacpp"}))
      ->capture_default_str();
}

void add_dtype_option(CLI::App& cmd, std::string& dtype) {
  cmd.add_option("--dtype", dtype,
                 "Weight type on a GPU, and KV cache type but for GGUF files (f16): auto (the "
                 "checkpoint's float types, quantized ones as bfloat16), bfloat16, float16 "
                 "(half) or float32 (float); only auto on the CPU")
      ->check(CLI::IsMember({"auto", "bfloat16", "float16", "half", "float32", "float"}))
      ->capture_default_str();
}

void add_quantization_option(CLI::App& cmd, std::string& quantization) {
  cmd.add_option("--quantization", quantization,
                 "fp8: quantize a float checkpoint's linear weights to FP8 (e4m3, one scale a "
                 "tensor) at load; FP8 checkpoints are read as FP8 without it. none: as stored")
      ->check(CLI::IsMember({"fp8", "none"}));
}

void add_kv_cache_dtype_option(CLI::App& cmd, std::string& kv_cache_dtype) {
  cmd.add_option("--kv-cache-dtype", kv_cache_dtype,
                 "auto: the weights' type (f32 on the CPU, f16 for GGUF files); fp8 (fp8_e4m3): "
                 "e4m3 K and V with scale 1, a quarter of f32's memory (CPU and CUDA; not MLA)")
      ->check(CLI::IsMember({"auto", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
}

void add_kernel_options(CLI::App& cmd, KernelOptions& o) {
  cmd.add_option("--cpu-isa", o.cpu_isa,
                 "Widest CPU kernels to use: auto (what the CPU has), avx512vnni, avx2 or scalar")
      ->check(CLI::IsMember({"auto", "avx512vnni", "avx2", "scalar"}))->capture_default_str();
  cmd.add_flag("!--no-cuda-fusion", o.cuda_fusion,
               "CUDA decode without its fused kernels (norm folded into the GEMVs, SiLU pairs, "
               "residual adds): for A/B measurements");
  cmd.add_flag("!--no-cuda-pdl", o.cuda_pdl,
               "CUDA kernels launched without programmatic dependent launch (Hopper)");
  cmd.add_option("--gemv-slices", o.gemv_slices,
                 "CUDA GEMV: force its K split into 1, 2, 4 or 8 slices (0: chosen per shape)")
      ->check(CLI::IsMember({0, 1, 2, 4, 8}))->capture_default_str();
  cmd.add_flag("--fp8-gemv-tensor-cores", o.fp8_gemv_tensor_cores,
               "CUDA: FP8 weights' decode GEMV on the tensor cores (experimental: slower than "
               "the default CUDA-core kernel so far)");
  cmd.add_option("--cuda-repeat-kernel", o.cuda_repeat_kernel,
                 "Profiling: launch every CUDA kernel whose name contains this twice (its cost "
                 "in the step is the difference in speed)");
}

void add_node_group_options(CLI::App& cmd, NodeGroupConfig& nodes) {
  cmd.add_option("--nnodes", nodes.nnodes,
                 "Processes (hosts) the --tensor-parallel-size ranks are spread over, evenly; "
                 "start the same command on each with its --node-rank")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd.add_option("--node-rank", nodes.node_rank,
                 "This process's node: 0 serves and schedules, the others run its steps")
      ->check(CLI::Range(0, 63))->capture_default_str();
  cmd.add_option("--master-addr", nodes.master_addr, "Where node 0 listens for the other nodes")
      ->capture_default_str();
  cmd.add_option("--master-port", nodes.master_port, "Port node 0 listens on for the others")
      ->check(CLI::Range(1, 65535))->capture_default_str();
}

int64_t parse_bytes(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw Error("--kv-cache-memory: not a size: " + s);
  }
  const std::string unit = s.substr(used);
  double mult = 1;
  if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (!unit.empty()) throw Error("--kv-cache-memory: unknown unit '" + unit + "'");
  if (!(v > 0)) throw Error("--kv-cache-memory must be positive");
  return static_cast<int64_t>(v * mult);
}

namespace {

int run_generate(const GenerateArgs& a) {
  set_kernel_options(a.kernels);
  if (a.threads > 0) set_num_threads(a.threads);
  set_cpu_order(parse_cpu_order(a.cpu_order));
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  const auto t0 = std::chrono::steady_clock::now();
  const Device device = parse_device(a.device);
  // The context served picks LongRoPE's factors: the engine's in batch mode, else the
  // generator's.
  const int served = a.input.empty() ? a.max_model_len : a.engine.max_model_len;
  if (a.tensor_parallel_size != 1 && a.input.empty())
    throw Error("--tensor-parallel-size runs in batch mode (--input/--output) and in serve");
  std::unique_ptr<NodeGroup> group;
  if (a.nodes.nnodes > 1)
    group = std::make_unique<NodeGroup>(
        a.nodes, a.tensor_parallel_size,
        node_settings({path, device, parse_dtype(a.dtype), a.quantization, a.kv_cache_dtype,
                       a.enforce_eager, served}));
  LoadedModel m = load_model(path, {}, device, served, a.tensor_parallel_size,
                             parse_dtype(a.dtype), a.quantization, group.get());
  m.set_enforce_eager(a.enforce_eager);
  m.set_kv_cache_dtype(a.kv_cache_dtype);
  if (group && !group->head()) return run_worker_node(*group, m.ranks());
  if (!a.input.empty() || !a.output.empty()) {
    if (a.input.empty() || a.output.empty()) throw Error("--input and --output go together");
    EngineConfig config = a.engine;
    if (!a.kv_cache_memory.empty()) config.kv_cache_memory = parse_bytes(a.kv_cache_memory);
    else if (device.kind == DeviceKind::Cuda) config.gpu_memory_utilization = a.gpu_memory_utilization;
    config.enable_prefix_caching = !a.no_prefix_caching;
    if (a.seed >= 0) config.seed = static_cast<uint64_t>(a.seed);
    return run_batch(m, config, a.input, a.output, group.get());
  }
  if (!m.tokenizer) throw Error(path + ": no tokenizer found");
  std::string prompt;
  for (const auto& p : a.prompt) prompt += (prompt.empty() ? "" : " ") + p;
  if (prompt.empty()) throw Error("no prompt given");
  const std::vector<int32_t> ids = m.tokenizer->encode(prompt, true);
  GenerateOptions opts;
  opts.max_tokens = a.max_tokens;
  opts.ignore_eos = a.ignore_eos;
  opts.sampling.temperature = a.temperature;  // the CLI's default is greedy (0)
  opts.sampling.top_p = a.top_p;
  opts.sampling.top_k = a.top_k;
  opts.sampling.min_p = a.min_p;
  if (a.seed >= 0) opts.sampling.seed = static_cast<uint64_t>(a.seed);
  Generator gen(*m.model, a.max_model_len);
  const auto t1 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first;
  // The prompt's last tokens as context, so a first word keeps its leading space.
  const size_t ctx = std::min<size_t>(ids.size(), 8);
  IncrementalDetokenizer detok(*m.tokenizer, /*skip_special_tokens=*/true,
                               std::span<const int32_t>(ids).last(ctx));
  int n = 0;
  std::cout << prompt << std::flush;
  gen.generate(ids, opts, [&](int32_t tok) {
    if (n++ == 0) first = std::chrono::steady_clock::now();
    std::cout << detok.push(tok) << std::flush;
    return true;
  });
  std::cout << detok.finish() << std::endl;
  const auto t2 = std::chrono::steady_clock::now();
  if (!a.quiet && n > 0) {
    auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
    std::fprintf(stderr,
                 "load %.2fs | prompt %zu tokens, %.1f tok/s | generated %d tokens, %.1f tok/s "
                 "(%d threads)\n",
                 secs(t1 - t0), ids.size(), ids.size() / secs(first - t1), n,
                 n > 1 ? (n - 1) / secs(t2 - first) : 0.0, cpu_pool().num_threads());
  }
  return 0;
}

}  // namespace

void add_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion for a prompt");
  cmd->add_option("prompt", args->prompt, "Prompt text");
  cmd->add_option("--model,-m", args->model, "A .gguf file or a Hugging Face model directory "
                                              "(default: the embedded SmolLM2-135M-Instruct)");
  cmd->add_option("--max-tokens,-n", args->max_tokens, "Tokens to generate")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", args->top_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", args->top_k)->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--min-p", args->min_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->seed, "Sampling seed");
  cmd->add_option("--threads,-t", args->threads, "CPU threads (default: all cores)")->check(CLI::Range(1, 1024));
  cmd->add_option("--max-model-len", args->max_model_len)->check(CLI::Range(1, 1 << 24))
      ->each([args](const std::string& v) { args->engine.max_model_len = std::stoi(v); });
  cmd->add_flag("--ignore-eos", args->ignore_eos);
  cmd->add_flag("--quiet,-q", args->quiet, "No timing line on stderr");
  cmd->add_option("--input", args->input, "JSON lines: {\"prompt\": text or ids, SamplingParams fields}");
  cmd->add_option("--output", args->output, "JSON lines, in input order: text, token_ids, finish_reason");
  cmd->add_option("--max-num-seqs", args->engine.max_num_seqs, "Requests running at once")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-num-batched-tokens", args->engine.max_num_batched_tokens)->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--kv-cache-memory", args->kv_cache_memory, "KV cache budget, e.g. 1GiB (default 1GiB)");
  cmd->add_option("--block-size", args->engine.block_size)->check(CLI::IsMember({8, 16, 32, 64, 128}));
  cmd->add_flag("--no-enable-prefix-caching", args->no_prefix_caching);
  cmd->add_flag("--disable-hybrid-kv-cache-manager",
                args->engine.disable_hybrid_kv_cache_manager,
                "Windowed layers keep every block, as global layers do");
  cmd->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  add_dtype_option(*cmd, args->dtype);
  add_quantization_option(*cmd, args->quantization);
  add_kv_cache_dtype_option(*cmd, args->kv_cache_dtype);
  cmd->add_flag("--enforce-eager", args->enforce_eager, "No CUDA graphs for decode steps");
  cmd->add_option("--tensor-parallel-size", args->tensor_parallel_size,
                  "Batch mode: ranks the model is split over, as serve's")
      ->check(CLI::Range(1, 64));
  add_node_group_options(*cmd, args->nodes);  // node 0 reads --input and writes --output
  add_kernel_options(*cmd, args->kernels);
  add_cpu_order_option(*cmd, args->cpu_order);
  cmd->add_option("--gpu-memory-utilization", args->gpu_memory_utilization,
                  "CUDA, batch mode: fraction of GPU memory to use when --kv-cache-memory is not "
                  "given")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->callback([args] { std::exit(run_guarded([&] { return run_generate(*args); })); });
}

}  // namespace vllm::cli
