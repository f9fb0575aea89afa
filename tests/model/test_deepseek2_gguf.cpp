// Random-weight GGUF files of llama.cpp's deepseek2 (tools/make_deepseek2_gguf.py, run by
// scripts/setup.sh) against llama.cpp's logits on the same files (fixtures/deepseek2_gguf,
// llama-cpp-python): `lite`, DeepSeek-V2-Lite's structure (27 layers, MLA without a q-LoRA,
// 64 routed Q4_K experts of which 6 run, 2 shared, softmax routing), and `v3`, DeepSeek-V3's
// kinds in 3 layers (q-LoRA, YaRN with its attention mscale, sigmoid routing with a correction
// bias in 4 of 8 groups, normalised and scaled weights).
//
// Not bit-exact, unlike SmolLM2 and Gemma-3: llama.cpp's grouped expert products and its MLA
// attention over a prompt chunk sum in orders we do not reproduce (a single token through the
// dense layers does give llama.cpp's bits: f16 weights multiply f16-rounded activations, as
// ggml does). Those last-bit differences can swap a routing choice that sits on a near tie
// (the last expert or group kept within kRoutingTie of the first left out, relative to its
// score, by our own arithmetic), and a swapped expert moves that token's logits, and through
// attention the later ones', by up to a third of the largest. The bars, per row: logits within
// 5e-2 of the largest and top-1 equal wherever llama.cpp's top-2 gap is at least 0.1 nat,
// unless a routing near tie at that row or an earlier one of its sequence explains the miss
// (the test names it); free-running greedy equal up to a near tie. A wrong tensor mapping or
// expert slice moves every row by the order of 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "llamacpp_fixture.h"
#include "model/load.h"

using namespace vllm;

namespace {

constexpr double kNearTie = 0.1;      // nat
constexpr double kBar = 5e-2;         // max |diff| / max |logit| per row
constexpr double kRoutingTie = 2e-3;  // relative routing score margin

struct Reference {
  nlohmann::json manifest;
  std::vector<float> logits;
};

Reference read_reference(const std::string& shape) {
  const std::string base = "fixtures/deepseek2_gguf/" + shape + "_logits";
  Reference r;
  r.manifest = nlohmann::json::parse(std::ifstream(base + ".json"));
  std::ifstream in(base + ".bin", std::ios::binary);
  in.seekg(0, std::ios::end);
  r.logits.resize(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(r.logits.data()), std::streamsize(r.logits.size() * 4));
  return r;
}

std::string model_path(const std::string& shape) {
  return shape == "lite" ? "models/deepseek2-lite-shape.gguf" : "models/deepseek2-" + shape + ".gguf";
}

class DeepSeek2Gguf : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path(GetParam())))
      GTEST_SKIP() << model_path(GetParam())
                   << " absent (WITH_TEST_MODELS=1 scripts/setup.sh makes it)";
  }
};

}  // namespace

TEST(DeepSeek2GgufShapes, LoadAsTheirFamilies) {
  for (const std::string shape : {"lite", "v3"}) {
    if (!std::filesystem::exists(model_path(shape))) GTEST_SKIP() << model_path(shape) << " absent";
    LoadedModel m = load_model(model_path(shape));
    const ModelConfig& c = m.config();
    EXPECT_EQ(c.layers.at(0).attention, AttentionType::kMla);
    EXPECT_EQ(c.layers.at(0).mlp, MlpType::kGated);
    EXPECT_EQ(c.layers.at(1).mlp, MlpType::kMoe);
    EXPECT_EQ(c.moe.num_experts, 64);
    EXPECT_EQ(c.moe.top_k, 6);
    // One f16 latent row of kv_lora_rank + rope dims per token and layer.
    EXPECT_EQ(m.model->kv_bytes_per_layer_token(), 2 * c.mla.latent_width());
    if (shape == "lite") {
      EXPECT_EQ(c.mla.q_lora_rank, 0);
      EXPECT_EQ(c.moe.scoring, MoeScoring::kSoftmax);
      EXPECT_EQ(c.moe.shared_intermediate_size, 2 * c.moe.intermediate_size);
    } else {
      EXPECT_EQ(c.mla.q_lora_rank, 96);
      EXPECT_EQ(c.moe.scoring, MoeScoring::kSigmoid);
      EXPECT_TRUE(c.moe.score_correction_bias);
      EXPECT_EQ(c.moe.num_groups, 8);
      EXPECT_EQ(c.moe.topk_groups, 4);
      EXPECT_TRUE(c.moe.norm_topk_prob);
      EXPECT_EQ(c.layers[0].rope.scaling.type, "yarn");
    }
  }
}

TEST_P(DeepSeek2Gguf, LogitsFollowLlamaCpp) {
  const llamacpp_check::LlamaCppOrder order;  // the reference ran each sequence in one step
  const Reference ref = read_reference(GetParam());
  LoadedModel m = load_model(model_path(GetParam()));
  const int vocab = m.config().vocab_size;
  ASSERT_EQ(ref.manifest["vocab_size"].get<int>(), vocab);
  std::vector<double> errors;
  int rows = 0, decisive = 0, decisive_equal = 0, explained = 0, free_running_equal = 0;
  std::vector<float> margin;  // per row of the current case: its closest routing choice
  m.model->set_routing_observer([&](int, int64_t row, float mg) {
    margin[size_t(row)] = std::min(margin[size_t(row)], mg);
  });
  for (const auto& k : ref.manifest["cases"]) {
    std::vector<int32_t> seq = k["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = k["greedy_ids"].get<std::vector<int32_t>>();
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    margin.assign(seq.size(), INFINITY);
    const Tensor ours = m.model->score(seq);
    const float* want = ref.logits.data() + k["offset"].get<size_t>();
    std::set<size_t> explained_rows;
    for (size_t r = 0; r < seq.size(); ++r, ++rows) {
      const float* a = ours.data<float>() + r * vocab;
      const float* b = want + r * vocab;
      double diff = 0, mag = 0;
      for (int i = 0; i < vocab; ++i) {
        diff = std::max(diff, double(std::fabs(a[i] - b[i])));
        mag = std::max(mag, double(std::fabs(b[i])));
      }
      // A row is explained by a routing near tie of its own, or by an explained row before it
      // (attention carries a swapped expert's effect on to the later tokens).
      const bool tie = margin[r] < kRoutingTie || (r > 0 && explained_rows.count(r - 1));
      errors.push_back(diff / mag);
      std::vector<float> sorted(b, b + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const bool is_decisive = sorted[0] - sorted[1] >= kNearTie;
      const bool same = std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
      decisive += is_decisive;
      decisive_equal += is_decisive && same;
      if (diff / mag <= kBar && (same || !is_decisive)) continue;
      if (tie) {
        explained_rows.insert(r);
        ++explained;
        std::printf("%s row %zu: max|diff|/max|logit| %.2e%s, at a routing near tie (margin "
                    "%.1e)%s\n", k["prompt"].get<std::string>().c_str(), r, diff / mag,
                    is_decisive && !same ? " and another top-1" : "", margin[r],
                    margin[r] < kRoutingTie ? "" : " or after one");
        continue;
      }
      ADD_FAILURE() << k["prompt"] << " row " << r << ": max|diff|/max|logit| " << diff / mag
                    << (is_decisive && !same ? ", top-1 differs" : "")
                    << " with no routing near tie (margin " << margin[r] << ")";
    }
    // Free-running greedy, llama.cpp's schedule: equal to llama.cpp's continuation up to a
    // step where its top-2 gap is a near tie or whose row was explained above.
    Generator gen(*m.model, 512);
    GenerateOptions opts;
    opts.max_tokens = static_cast<int>(greedy.size());
    opts.ignore_eos = true;
    const size_t prompt_len = seq.size() - greedy.size();
    const auto got = gen.generate(std::vector<int32_t>(seq.begin(), seq.begin() + prompt_len), opts);
    const auto gaps = k["top2_gap"].get<std::vector<double>>();
    size_t i = 0;
    while (i < greedy.size() && got[i] == greedy[i]) ++i;
    if (i == greedy.size()) {
      ++free_running_equal;
    } else if (gaps[i] < kNearTie || explained_rows.count(prompt_len - 1 + i)) {
      std::printf("%s free-running diverges at step %zu: %s\n",
                  k["prompt"].get<std::string>().c_str(), i,
                  gaps[i] < kNearTie ? "llama.cpp's top-2 gap is a near tie"
                                     : "its row is at a routing near tie");
    } else {
      ADD_FAILURE() << k["prompt"] << " free-running diverges at step " << i
                    << " (llama.cpp's top-2 gap " << gaps[i] << ")";
    }
  }
  m.model->set_routing_observer({});
  std::sort(errors.begin(), errors.end());
  std::printf("deepseek2 %s GGUF vs llama.cpp over %d rows: max|diff|/max|logit| median %.2e, "
              "worst %.2e; top-1 equal on %d of %d rows with a gap >= %.1f nat; %d rows past a "
              "bar at a routing near tie; free-running identical %d of %zu\n",
              GetParam().c_str(), rows, errors[errors.size() / 2], errors.back(), decisive_equal,
              decisive, kNearTie, explained, free_running_equal, ref.manifest["cases"].size());
  EXPECT_GT(decisive, rows / 3) << "too few decisive rows for the comparison to mean much";
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeepSeek2Gguf, ::testing::Values("lite", "v3"));
