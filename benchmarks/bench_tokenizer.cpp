// Encode throughput of one tokenizer on one thread: every line of a text file (JSON strings,
// one per line) encoded separately, as a server encodes requests. Prints one JSON line.
//   bench_tokenizer TOKENIZER_DIR_OR_GGUF LINES.jsonl [repeats]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/load.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER LINES.jsonl [repeats]\n", argv[0]);
    return 2;
  }
  try {
    auto tok = vllm::load_tokenizer(argv[1]);
    std::vector<std::string> lines;
    std::ifstream in(argv[2]);
    size_t bytes = 0;
    for (std::string l; std::getline(in, l);) {
      lines.push_back(nlohmann::json::parse(l).get<std::string>());
      bytes += lines.back().size();
    }
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& l : lines) tokens += tok->encode(l, false).size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("{\"engine\": \"vllm-cpp\", \"mb_s\": %.2f, \"tokens\": %zu, \"bytes\": %zu}\n",
                bytes / best / 1e6, tokens, bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
