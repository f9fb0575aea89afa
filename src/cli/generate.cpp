// `vllm-cpp generate`: prompt in, text out, on one model (greedy or seeded sampling).
#include <chrono>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "model/generator.h"
#include "model/load.h"
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
};

int run_generate(const GenerateArgs& a) {
  if (a.threads > 0) set_num_threads(a.threads);
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel m = load_model(path);
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
  IncrementalDetokenizer detok(*m.tokenizer, /*skip_special_tokens=*/true);
  int n = 0;
  std::cout << prompt << std::flush;
  gen.generate(ids, opts, [&](int32_t tok) {
    if (n++ == 0) first = std::chrono::steady_clock::now();
    std::cout << detok.push(tok) << std::flush;
    return true;
  });
  std::cout << detok.finish() << std::endl;
  const auto t2 = std::chrono::steady_clock::now();
  if (!a.quiet) {
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
  cmd->add_option("--max-model-len", args->max_model_len)->check(CLI::Range(1, 1 << 24));
  cmd->add_flag("--ignore-eos", args->ignore_eos);
  cmd->add_flag("--quiet,-q", args->quiet, "No timing line on stderr");
  cmd->callback([args] { std::exit(run_guarded([&] { return run_generate(*args); })); });
}

}  // namespace vllm::cli
