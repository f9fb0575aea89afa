// PoolingEngine on all-MiniLM-L6-v2 (and SmolLM2 pooled by its last token): requests from
// several threads, packed into shared batches or split over several forwards by a small token
// budget, get exactly the vectors that the model's embed gives each sequence alone (normalised
// when asked), in input order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "engine/pooling_engine.h"
#include "model/bert.h"
#include "model/last_token_pooling.h"
#include "model/load.h"
#include "util/check.h"

namespace vllm {
namespace {

constexpr const char* kMiniLm = "models/all-MiniLM-L6-v2";

// Token ids of plain words of the model's vocabulary, [CLS] ... [SEP], of varied lengths.
std::vector<std::vector<int32_t>> sequences(int count) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> s = {101};
    for (int k = 0; k < 3 + (i * 7) % 40; ++k) s.push_back(2000 + (i * 131 + k * 17) % 5000);
    s.push_back(102);
    out.push_back(std::move(s));
  }
  return out;
}

TEST(PoolingEngine, BatchesConcurrentRequestsWithoutChangingVectors) {
  if (!std::filesystem::exists(std::string(kMiniLm) + "/model.safetensors"))
    GTEST_SKIP() << kMiniLm << " is absent (WITH_TEST_MODELS=1 scripts/setup.sh)";
  const auto model = BertModel::load(kMiniLm);
  const int64_t h = model->hidden_size();
  const auto seqs = sequences(24);
  std::vector<std::vector<float>> alone;
  for (const auto& s : seqs) {
    std::vector<float> v = model->embed({s});
    BertModel::normalize(v.data(), h);
    alone.push_back(std::move(v));
  }
  for (const int64_t budget : {int64_t{8192}, int64_t{40}}) {  // 40: most requests split
    PoolingEngineConfig cfg;
    cfg.max_batch_tokens = budget;
    PoolingEngine engine(*model, cfg);
    std::vector<std::thread> clients;
    std::vector<PoolingEngine::Vectors> got(6);
    for (int c = 0; c < 6; ++c)
      clients.emplace_back([&, c] {
        std::vector<std::vector<int32_t>> mine(seqs.begin() + c * 4, seqs.begin() + c * 4 + 4);
        auto f = engine.submit(mine, /*normalize=*/true);
        ASSERT_TRUE(f.has_value());
        got[c] = f->get();
      });
    for (auto& t : clients) t.join();
    for (int c = 0; c < 6; ++c) {
      ASSERT_EQ(got[c].size(), 4u);
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(got[c][k], alone[c * 4 + k]) << "budget " << budget << " client " << c;
    }
    auto raw = engine.submit({seqs[0]}, /*normalize=*/false)->get();
    double norm = 0;
    for (float x : raw[0]) norm += double(x) * x;
    EXPECT_GT(std::fabs(std::sqrt(norm) - 1.0), 1e-3) << "mean-pooled vectors are not unit";
  }
}

TEST(PoolingEngine, ModelErrorsReachTheCaller) {
  if (!std::filesystem::exists(std::string(kMiniLm) + "/model.safetensors"))
    GTEST_SKIP() << kMiniLm << " is absent (WITH_TEST_MODELS=1 scripts/setup.sh)";
  const auto model = BertModel::load(kMiniLm);
  PoolingEngine engine(*model, {});
  auto bad = engine.submit({{101, 999999, 102}}, true);
  ASSERT_TRUE(bad.has_value());
  EXPECT_THROW(bad->get(), Error);
  auto good = engine.submit({{101, 2000, 102}}, true);  // the engine keeps serving
  EXPECT_EQ(good->get().size(), 1u);
}

TEST(PoolingEngine, PoolsADecoderByItsLastToken) {
  const char* path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (run scripts/setup.sh)";
  const LoadedModel loaded = load_model(path);
  const LastTokenPooling pooling(*loaded.model);
  const int64_t h = pooling.hidden_size();
  const std::vector<std::vector<int32_t>> seqs = {{504, 3575}, {19556, 28, 905, 17}, {42}};
  PoolingEngineConfig cfg;
  cfg.max_batch_tokens = 4;  // the second request runs in a forward of its own
  PoolingEngine engine(pooling, cfg);
  auto a = engine.submit({seqs[0], seqs[1]}, /*normalize=*/true);
  auto b = engine.submit({seqs[2]}, /*normalize=*/false);
  ASSERT_TRUE(a && b);
  const auto got_a = a->get(), got_b = b->get();
  for (size_t i = 0; i < 3; ++i) {
    std::vector<float> alone = pooling.embed({seqs[i]});
    if (i < 2) l2_normalize(alone.data(), h);
    EXPECT_EQ(i < 2 ? got_a[i] : got_b[0], alone) << i;
  }
}

}  // namespace
}  // namespace vllm
