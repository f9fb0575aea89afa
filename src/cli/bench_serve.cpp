// `vllm-cpp bench serve`: vLLM's online serving benchmark against any OpenAI-compatible
// server. Random prompts, Poisson (or unlimited) arrivals, optional concurrency cap; reports
// TTFT, TPOT, ITL, E2EL and throughput as vLLM does and saves the same result JSON.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "server/bench_client.h"
#include "server/bench_report.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

using server::BenchRequest;
using server::RequestResult;

struct BenchServeArgs {
  std::string backend = "vllm", base_url, host = "127.0.0.1", endpoint, model, api_key;
  int port = 8000;
  std::string dataset_name = "random";
  int num_prompts = 1000;
  int random_input_len = 1024, random_output_len = 128, random_vocab_size = 32000;
  double random_range_ratio = 0.0;
  std::string random_prompt_format;  // "ids" or "text"; default by endpoint
  std::string tokenizer_url;         // whose /detokenize makes text prompts (default: base)
  int max_concurrency = 0;           // 0: unlimited
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  double temperature = 0.0;
  bool ignore_eos = false, save_result = false, skip_initial_test = false;
  int64_t seed = 0;
  std::string metric_percentiles = "99", result_dir = ".", result_filename;
};

std::vector<double> parse_percentiles(const std::string& s) {
  std::vector<double> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    try {
      out.push_back(std::stod(item));
    } catch (const std::exception&) {
      throw Error("--metric-percentiles: not a number: " + item);
    }
    if (out.back() <= 0 || out.back() >= 100) throw Error("--metric-percentiles must be in (0, 100)");
    pos = comma + 1;
  }
  return out;
}

// vLLM's RandomDataset: lengths uniform in [len*(1-r), len*(1+r)], token ids a run of
// consecutive ids from a random offset (wrapping at the vocabulary size).
std::vector<BenchRequest> random_dataset(const BenchServeArgs& a, httplib::Client& client,
                                         bool as_text) {
  std::mt19937_64 rng(static_cast<uint64_t>(a.seed));
  auto length = [&](int len) {
    const int lo = static_cast<int>(len * (1 - a.random_range_ratio));
    const int hi = static_cast<int>(len * (1 + a.random_range_ratio));
    return std::max(1, std::uniform_int_distribution<int>(lo, hi)(rng));
  };
  std::vector<BenchRequest> out;
  for (int i = 0; i < a.num_prompts; ++i) {
    BenchRequest r;
    r.prompt_len = length(a.random_input_len);
    r.output_len = length(a.random_output_len);
    const int offset = std::uniform_int_distribution<int>(0, a.random_vocab_size - 1)(rng);
    std::vector<int32_t> ids(r.prompt_len);
    for (int k = 0; k < r.prompt_len; ++k) ids[k] = (offset + i + k) % a.random_vocab_size;
    r.prompt = ids;
    if (as_text) r.prompt = server::detokenize(client, ids, a.api_key);
    out.push_back(std::move(r));
  }
  return out;
}

// Arrival times (seconds from the start): all 0 for an infinite rate, else gamma-distributed
// gaps with mean 1/rate (burstiness 1: Poisson).
std::vector<double> arrivals(const BenchServeArgs& a) {
  std::vector<double> t(a.num_prompts, 0.0);
  if (std::isinf(a.request_rate)) return t;
  std::mt19937_64 rng(static_cast<uint64_t>(a.seed) + 1);
  std::gamma_distribution<double> gap(a.burstiness, 1.0 / (a.request_rate * a.burstiness));
  double now = 0;
  for (double& x : t) {
    x = now;
    now += gap(rng);
  }
  return t;
}

std::string rate_text(double rate) {
  if (std::isinf(rate)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  return buf;
}

std::string default_filename(const BenchServeArgs& a, const std::string& date) {
  const std::string rate = rate_text(a.request_rate);
  std::string name = a.model;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return "vllm-cpp-" + rate + "qps" +
         (a.max_concurrency > 0 ? "-concurrency" + std::to_string(a.max_concurrency) : "") + "-" +
         name + "-" + date + ".json";
}

int run_bench_serve(BenchServeArgs a) {
  if (a.dataset_name != "random")
    throw Error("--dataset-name " + a.dataset_name + ": only 'random' is supported");
  if (a.endpoint.empty()) a.endpoint = a.backend == "openai-chat" ? "/v1/chat/completions" : "/v1/completions";
  const std::string base = a.base_url.empty() ? "http://" + a.host + ":" + std::to_string(a.port) : a.base_url;
  if (a.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) a.api_key = k;
  if (a.model.empty()) a.model = server::first_served_model(base, a.api_key);
  if (a.model.empty()) throw Error("no --model given and GET " + base + "/v1/models did not name one");
  const std::vector<double> pcts = parse_percentiles(a.metric_percentiles);
  server::BenchTarget target{base, a.endpoint, a.model, a.api_key, a.ignore_eos, a.temperature};
  if (a.random_prompt_format.empty()) a.random_prompt_format = target.chat() ? "text" : "ids";
  if (target.chat() && a.random_prompt_format != "text")
    throw Error("chat endpoints take text prompts (--random-prompt-format text)");

  auto setup_client = server::make_client(base);
  auto tokenizer_client = server::make_client(a.tokenizer_url.empty() ? base : a.tokenizer_url);
  const auto requests = random_dataset(a, *tokenizer_client, a.random_prompt_format == "text");
  if (!a.skip_initial_test) {
    std::printf("Starting initial single prompt test run...\n");
    BenchRequest probe = requests.front();
    probe.output_len = std::min(probe.output_len, 4);
    const RequestResult r = server::send_request(*setup_client, target, probe);
    if (!r.success) throw Error("initial test run failed: " + r.error);
    std::printf("Initial test run completed. Starting main benchmark run...\n");
  }
  const std::string rate = rate_text(a.request_rate);
  std::printf("Traffic request rate: %s\nBurstiness factor: %g\nMaximum request concurrency: %s\n",
              rate.c_str(), a.burstiness,
              a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "None");
  std::fflush(stdout);

  // Workers take requests in order and wait for each one's arrival time; with a concurrency
  // cap there are exactly that many workers, which is vLLM's semaphore.
  const std::vector<double> when = arrivals(a);
  const int workers = a.max_concurrency > 0 ? std::min(a.max_concurrency, a.num_prompts)
                                            : std::min(a.num_prompts, 4096);
  std::vector<RequestResult> results(requests.size());
  std::atomic<size_t> next{0};
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      auto client = server::make_client(base);
      for (size_t i; (i = next.fetch_add(1)) < requests.size();) {
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(when[i])));
        const double start = std::chrono::duration<double>(Clock::now() - t0).count();
        results[i] = server::send_request(*client, target, requests[i]);
        results[i].start = start;
      }
    });
  }
  for (auto& t : pool) t.join();
  const double duration = std::chrono::duration<double>(Clock::now() - t0).count();

  const server::BenchSummary s = server::summarize(results, duration, pcts);
  std::fputs(server::format_table(s, pcts, a.request_rate, a.max_concurrency).c_str(), stdout);
  for (const RequestResult& r : results)
    if (!r.success) {
      std::fprintf(stderr, "first failure: %s\n", r.error.c_str());
      break;
    }
  if (a.save_result) {
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
    nlohmann::json j = server::result_json(s, results);
    j["date"] = date;
    j["backend"] = a.backend;
    j["endpoint"] = a.endpoint;
    j["base_url"] = base;
    j["model_id"] = a.model;
    j["tokenizer_id"] = a.model;
    j["num_prompts"] = a.num_prompts;
    j["request_rate"] = std::isinf(a.request_rate) ? nlohmann::json("inf") : nlohmann::json(a.request_rate);
    j["burstiness"] = a.burstiness;
    j["max_concurrency"] = a.max_concurrency > 0 ? nlohmann::json(a.max_concurrency) : nlohmann::json(nullptr);
    j["random_input_len"] = a.random_input_len;
    j["random_output_len"] = a.random_output_len;
    const std::string name = a.result_filename.empty() ? default_filename(a, date) : a.result_filename;
    const std::string path = name.find('/') == std::string::npos ? a.result_dir + "/" + name : name;
    std::ofstream f(path);
    if (!(f << j.dump(2) << "\n")) throw Error("cannot write " + path);
    std::printf("Saved the result to %s\n", path.c_str());
  }
  return s.completed > 0 ? 0 : 1;
}

}  // namespace

void add_bench_serve(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Online serving benchmark against an OpenAI-compatible server");
  cmd->add_option("--backend", a->backend, "vllm/openai (completions) or openai-chat")
      ->check(CLI::IsMember({"vllm", "openai", "openai-chat"}))->capture_default_str();
  cmd->add_option("--base-url", a->base_url, "e.g. http://127.0.0.1:8000 (overrides --host/--port)");
  cmd->add_option("--host", a->host)->capture_default_str();
  cmd->add_option("--port", a->port)->check(CLI::Range(1, 65535))->capture_default_str();
  cmd->add_option("--endpoint", a->endpoint, "Default /v1/completions (/v1/chat/completions for openai-chat)");
  cmd->add_option("--model", a->model, "Model name sent in requests (default: the server's first)");
  cmd->add_option("--api-key", a->api_key, "Bearer key (default: $OPENAI_API_KEY)");
  cmd->add_option("--dataset-name", a->dataset_name, "Only 'random'")->capture_default_str();
  cmd->add_option("--num-prompts", a->num_prompts)->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cmd->add_option("--random-input-len", a->random_input_len)->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cmd->add_option("--random-output-len", a->random_output_len)->check(CLI::Range(1, 1 << 24))->capture_default_str();
  cmd->add_option("--random-range-ratio", a->random_range_ratio)->check(CLI::Range(0.0, 0.999))->capture_default_str();
  cmd->add_option("--random-vocab-size", a->random_vocab_size, "Random ids are drawn below this")
      ->check(CLI::Range(2, 1 << 24))->capture_default_str();
  cmd->add_option("--random-prompt-format", a->random_prompt_format,
                  "ids (exact lengths; completions only) or text (decoded by the server's /detokenize)")
      ->check(CLI::IsMember({"ids", "text"}));
  cmd->add_option("--tokenizer-url", a->tokenizer_url,
                  "A vllm-cpp (or vLLM) server whose /detokenize makes the text prompts, for peers "
                  "without one (default: --base-url)");
  cmd->add_option("--max-concurrency", a->max_concurrency, "Requests in flight at most (default: no cap)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option_function<std::string>("--request-rate", [a](const std::string& v) {
        a->request_rate = v == "inf" ? std::numeric_limits<double>::infinity() : std::stod(v);
        if (!(a->request_rate > 0)) throw CLI::ValidationError("--request-rate", "must be positive or inf");
      }, "Requests per second (Poisson arrivals) or inf (default)");
  cmd->add_option("--burstiness", a->burstiness, "Gamma shape of arrival gaps; 1 = Poisson")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--temperature", a->temperature)->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Always generate the full output length");
  cmd->add_option("--seed", a->seed)->capture_default_str();
  cmd->add_option("--metric-percentiles", a->metric_percentiles, "Comma-separated, e.g. 50,90,99")
      ->capture_default_str();
  cmd->add_flag("--save-result", a->save_result, "Write the result JSON");
  cmd->add_option("--result-dir", a->result_dir)->capture_default_str();
  cmd->add_option("--result-filename", a->result_filename);
  cmd->add_flag("--skip-initial-test", a->skip_initial_test, "No single-request check first");
  cmd->callback([a] { std::exit(run_guarded([&] { return run_bench_serve(*a); })); });
}

}  // namespace vllm::cli
