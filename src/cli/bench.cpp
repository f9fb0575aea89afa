// `vllm-cpp bench latency`: prefill and decode speed of one sequence, like vLLM's
// `bench latency` (random prompt ids, fixed output length, EOS ignored).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "cli/commands.h"
#include "model/generator.h"
#include "model/load.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/cpu/quant.h"
#include "runtime/thread_pool.h"

namespace vllm::cli {
namespace {

struct BenchArgs {
  std::string model;
  int input_len = 512;
  int output_len = 128;
  int threads = 0;
  int repeats = 3;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  std::string cpu_order = "batch-invariant";
  bool enforce_eager = false;
  KernelOptions kernels;
};

int run_latency(const BenchArgs& a) {
  set_kernel_options(a.kernels);
  if (a.threads > 0) set_num_threads(a.threads);
  set_cpu_order(parse_cpu_order(a.cpu_order));
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  const auto t_load = std::chrono::steady_clock::now();
  LoadedModel m = load_model(path, {}, parse_device(a.device), 0, 1, parse_dtype(a.dtype),
                             a.quantization);
  m.set_enforce_eager(a.enforce_eager);
  m.set_kv_cache_dtype(a.kv_cache_dtype);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(100, std::min(40000, m.config().vocab_size - 1));
  std::vector<int32_t> prompt(a.input_len);
  for (auto& t : prompt) t = tok(rng);
  Generator gen(*m.model, a.input_len + a.output_len + 1);
  GenerateOptions opts;
  opts.max_tokens = a.output_len + 1;  // the first token ends the prefill
  opts.ignore_eos = true;
  double best_prefill = 0, best_decode = 0;
  using clock = std::chrono::steady_clock;
  for (int r = 0; r < a.repeats; ++r) {
    const auto t0 = clock::now();
    clock::time_point first;
    int n = 0;
    gen.generate(prompt, opts, [&](int32_t) {
      if (n++ == 0) first = clock::now();
      return true;
    });
    const auto t1 = clock::now();
    best_prefill = std::max(best_prefill, a.input_len / std::chrono::duration<double>(first - t0).count());
    best_decode = std::max(best_decode, a.output_len / std::chrono::duration<double>(t1 - first).count());
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("{\"engine\": \"vllm-cpp\", \"device\": \"%s\", \"prefill_tok_s\": %.1f, "
              "\"decode_tok_s\": %.1f, \"load_s\": %.3f, \"peak_rss_mb\": %.1f, "
              "\"threads\": %d, \"isa\": \"%s\"}\n",
              a.device.c_str(), best_prefill, best_decode, load_s, ru.ru_maxrss / 1024.0,
              cpu_pool().num_threads(), cpu::qdot_isa());
  return 0;
}

}  // namespace

void add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto args = std::make_shared<BenchArgs>();
  CLI::App* lat = bench->add_subcommand("latency", "Prefill and decode speed of one sequence");
  lat->add_option("--model,-m", args->model, "A .gguf file or a Hugging Face model directory");
  lat->add_option("--input-len", args->input_len)->check(CLI::Range(1, 1 << 20));
  lat->add_option("--output-len", args->output_len)->check(CLI::Range(1, 1 << 20));
  lat->add_option("--threads,-t", args->threads)->check(CLI::Range(1, 1024));
  lat->add_option("--repeats", args->repeats)->check(CLI::Range(1, 100));
  lat->add_option("--device", args->device, "cpu, cuda or cuda:N")->capture_default_str();
  add_dtype_option(*lat, args->dtype);
  add_quantization_option(*lat, args->quantization);
  add_kv_cache_dtype_option(*lat, args->kv_cache_dtype);
  lat->add_flag("--enforce-eager", args->enforce_eager, "No CUDA graphs");
  add_cpu_order_option(*lat, args->cpu_order);
  add_kernel_options(*lat, args->kernels);
  lat->callback([args] { std::exit(run_guarded([&] { return run_latency(*args); })); });
  add_bench_serve(*bench);
}

}  // namespace vllm::cli
