// Allowed-token sets against llguidance: replays the random walks recorded by
// tools/make_grammar_fixtures.py on SmolLM2's vocabulary and requires the same set before every
// token (size and an order-free hash of the ids, as the fixture stores them).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/load.h"
#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::structured;

namespace {

const char* kSmol = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
// VLLM_GRAMMAR_WALKS names another walk file (e.g. a larger one made by the same tool).
const char* walks_path() {
  const char* p = std::getenv("VLLM_GRAMMAR_WALKS");
  return p ? p : "tests/structured/data/grammar_walks.json";
}

std::string set_key(const std::vector<uint32_t>& mask, int n_vocab) {
  uint64_t h = 0;
  int count = 0;
  for (int t = 0; t < n_vocab; ++t) {
    if (!((mask[t >> 5] >> (t & 31)) & 1)) continue;
    ++count;
    uint64_t z = static_cast<uint64_t>(t) + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    h += z ^ (z >> 31);
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%d:%016llx", count, static_cast<unsigned long long>(h));
  return buf;
}

std::pair<uint64_t, uint64_t> splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return {x, z ^ (z >> 31)};
}

OutputConstraint constraint(const std::string& kind, const std::string& text) {
  OutputConstraint c;
  c.text = text;
  if (kind == "regex") c.kind = OutputConstraint::Kind::kRegex;
  else if (kind == "grammar") c.kind = OutputConstraint::Kind::kGrammar;
  else if (kind == "json_schema") c.kind = OutputConstraint::Kind::kJsonSchema;
  else if (kind == "json_object") c.kind = OutputConstraint::Kind::kJsonObject;
  else if (kind == "structural_tag") c.kind = OutputConstraint::Kind::kStructuralTag;
  else if (kind == "choice") {
    c.kind = OutputConstraint::Kind::kChoice;
    for (const auto& s : nlohmann::json::parse(text)) c.choices.push_back(s.get<std::string>());
  } else {
    throw Error("unknown kind " + kind);
  }
  return c;
}

}  // namespace

TEST(MaskOracle, LlguidanceWalksSmolLM2) {
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " missing";
  std::ifstream f(walks_path());
  ASSERT_TRUE(f) << walks_path();
  const auto fixture = nlohmann::json::parse(f);
  const auto& manifest = fixture["manifest"];
  auto tok = load_tokenizer(kSmol);
  const int n_vocab = manifest["n_vocab"].get<int>();
  ASSERT_EQ(tok->vocab_size(), n_vocab);
  const int32_t eos = manifest["eos"].get<int32_t>();
  const auto v0 = std::chrono::steady_clock::now();
  auto vocab = TokenVocab::from_tokenizer(*tok, {eos}, n_vocab);
  const double vocab_ms =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - v0).count() * 1e3;
  std::vector<double> mask_ms, compile_ms;  // every mask and compile, for percentiles
  std::vector<uint32_t> mask(vocab->mask_words());
  int cases = 0, walks = 0, steps = 0;
  std::vector<std::string> failed;
  double mask_seconds = 0, compile_seconds = 0;
  std::vector<std::pair<double, std::string>> slowest;  // mask ms per token, by grammar
  for (const auto& c : fixture["cases"]) {
    const std::string name = c["name"];
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const CompiledGrammar> g;
    try {
      g = compile(constraint(c["kind"], c["text"]), vocab);
    } catch (const Error& e) {
      failed.push_back(name + ": does not compile: " + e.what());
      continue;
    }
    const double ct = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    compile_seconds += ct;
    compile_ms.push_back(ct * 1e3);
    ++cases;
    bool case_ok = true;
    const double case_start = mask_seconds;
    const int case_steps = steps;
    for (const auto& w : c["walks"]) {
      ++walks;
      GrammarMatcher m(g);
      const auto& tokens = w["tokens"];
      const auto& masks = w["masks"];
      for (size_t i = 0; i < masks.size() && case_ok; ++i) {
        const auto m0 = std::chrono::steady_clock::now();
        m.fill_mask(mask);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
        mask_seconds += dt;
        mask_ms.push_back(dt * 1e3);
        ++steps;
        const std::string got = set_key(mask, n_vocab);
        if (got != masks[i].get<std::string>()) {
          failed.push_back(name + " walk " + std::to_string(walks) + " step " + std::to_string(i) +
                           ": llguidance " + masks[i].get<std::string>() + ", ours " + got);
          case_ok = false;
          if (const char* dir = std::getenv("VLLM_MASK_DUMP")) {  // ids, for a side-by-side look
            std::ofstream d(std::string(dir) + "/" + name + ".txt");
            for (size_t k = 0; k < i; ++k) d << tokens[k].get<int>() << (k + 1 < i ? "," : "");
            d << "\n";
            for (int t = 0; t < n_vocab; ++t)
              if ((mask[t >> 5] >> (t & 31)) & 1) d << t << " ";
            d << "\n";
          }
          break;
        }
        if (i < tokens.size() && !m.accept_token(tokens[i].get<int32_t>())) {
          failed.push_back(name + ": token " + std::to_string(tokens[i].get<int>()) + " refused");
          case_ok = false;
        }
      }
      if (!case_ok) break;
    }
    if (steps > case_steps)
      slowest.push_back({(mask_seconds - case_start) * 1e3 / (steps - case_steps), name});
  }
  std::sort(slowest.rbegin(), slowest.rend());
  std::sort(mask_ms.begin(), mask_ms.end());
  const auto pct = [&](double q) {
    return mask_ms.empty() ? 0.0 : mask_ms[std::min(mask_ms.size() - 1, size_t(q * mask_ms.size()))];
  };
  std::sort(compile_ms.begin(), compile_ms.end());
  std::printf("  vocabulary trie %.1f ms; compile mean %.3f ms, median %.3f ms, max %.3f ms; mask "
              "p50 %.4f ms, p99 %.3f ms, max %.3f ms\n", vocab_ms,
              cases ? compile_seconds * 1e3 / cases : 0.0,
              compile_ms.empty() ? 0.0 : compile_ms[compile_ms.size() / 2],
              compile_ms.empty() ? 0.0 : compile_ms.back(), pct(0.5), pct(0.99),
              mask_ms.empty() ? 0.0 : mask_ms.back());
  for (size_t i = 0; i < slowest.size() && i < 5; ++i)
    std::printf("  slowest masks: %-20s %.3f ms per token\n", slowest[i].second.c_str(),
                slowest[i].first);
  std::printf("mask oracle: %d grammars, %d walks, %d masks compared; %zu failures; "
              "compile %.1f ms total; mask %.3f ms per token (vocab %d)\n",
              cases, walks, steps, failed.size(), compile_seconds * 1e3,
              steps ? mask_seconds * 1e3 / steps : 0.0, n_vocab);
  for (const auto& s : failed) ADD_FAILURE() << s;
}

// The compact form: per walk only the number of masks and a hash chained over them; the walk's
// tokens come from a seeded splitmix64 stream over the ascending allowed ids, as
// tools/make_grammar_fixtures.py --chains drew them from llguidance's masks, so equal chains
// mean every mask of every walk was equal.
TEST(MaskOracle, LlguidanceChainedWalksSmolLM2) {
  if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " missing";
  const char* env = std::getenv("VLLM_GRAMMAR_CHAINS");
  const std::string path = env ? env : "tests/structured/data/grammar_chains.json";
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  const auto fixture = nlohmann::json::parse(f);
  const auto& manifest = fixture["manifest"];
  auto tok = load_tokenizer(kSmol);
  const int n_vocab = manifest["n_vocab"].get<int>();
  const int32_t eos = manifest["eos"].get<int32_t>();
  const int max_steps = manifest["max_steps"].get<int>();
  const uint64_t seed = manifest["seed"].get<uint64_t>();
  auto vocab = TokenVocab::from_tokenizer(*tok, {eos}, n_vocab);
  std::vector<uint32_t> mask(vocab->mask_words());
  std::vector<int32_t> others;
  int walks = 0, masks = 0, grammars = 0;
  std::vector<std::string> failed;
  const auto& cases = fixture["cases"];
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& c = cases[ci];
    auto g = compile(constraint(c["kind"], c["text"]), vocab);
    ++grammars;
    for (size_t wi = 0; wi < c["chains"].size(); ++wi) {
      ++walks;
      GrammarMatcher m(g);
      uint64_t state = (seed << 32) ^ (uint64_t(ci) << 16) ^ wi, chain = 0;
      int steps = 0;
      for (int k = 0; k < max_steps; ++k) {
        m.fill_mask(mask);
        ++steps;
        uint64_t h = 0;
        int count = 0;
        bool eos_ok = false;
        others.clear();
        for (int t = 0; t < n_vocab; ++t) {
          if (!((mask[t >> 5] >> (t & 31)) & 1)) continue;
          ++count;
          h += splitmix64(static_cast<uint64_t>(t)).second;
          if (t == eos) eos_ok = true;
          else others.push_back(t);
        }
        chain = splitmix64(chain ^ h ^ (uint64_t(count) << 40)).second;
        if (count == 0) break;
        uint64_t r;
        std::tie(state, r) = splitmix64(state);
        if (eos_ok && (others.empty() || double(r >> 11) * 0x1.0p-53 < 0.2)) break;
        std::tie(state, r) = splitmix64(state);
        if (!m.accept_token(others[r % others.size()])) break;
      }
      masks += steps;
      char buf[20];
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(chain));
      const auto& want = c["chains"][wi];
      if (want[0].get<int>() != steps || want[1].get<std::string>() != buf) {
        failed.push_back(c["name"].get<std::string>() + " walk " + std::to_string(wi) +
                         ": llguidance " + std::to_string(want[0].get<int>()) + " masks " +
                         want[1].get<std::string>() + ", ours " + std::to_string(steps) + " " + buf);
        break;  // one per grammar
      }
    }
  }
  std::printf("mask oracle (chained): %d grammars, %d walks, %d masks; %zu grammars differ\n",
              grammars, walks, masks, failed.size());
  for (const auto& s : failed) ADD_FAILURE() << s;
}
