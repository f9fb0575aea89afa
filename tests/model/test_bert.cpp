// all-MiniLM-L6-v2 against sentence-transformers: the vectors of fixtures/embeddings/minilm.json
// (tools/make_embedding_fixtures.py) from the ids sentence-transformers fed its model, within the
// manifest's tolerance; and a sequence's vector does not depend on the batch it runs in.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "embedding_fixture.h"
#include "model/bert.h"
#include "util/check.h"

namespace vllm {
namespace {

constexpr const char* kMiniLm = "models/all-MiniLM-L6-v2";

class MiniLm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::filesystem::exists(std::string(kMiniLm) + "/model.safetensors"))
      model_ = BertModel::load(kMiniLm).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << kMiniLm << " is absent (WITH_TEST_MODELS=1 scripts/setup.sh)";
  }
  static nlohmann::json fixture(const char* key) {
    std::ifstream in("fixtures/embeddings/" + std::string(key));
    EXPECT_TRUE(in) << "run from the repo root";
    return nlohmann::json::parse(in);
  }
  static BertModel* model_;
};
BertModel* MiniLm::model_ = nullptr;

TEST_F(MiniLm, ConfigFromCheckpointAndModules) {
  EXPECT_EQ(model_->hidden_size(), 384);
  EXPECT_EQ(model_->config().num_layers, 6);
  EXPECT_EQ(model_->pooling().mode, PoolingConfig::Mode::kMean);
  EXPECT_TRUE(model_->pooling().normalize);
  EXPECT_EQ(model_->max_model_len(), 256);  // sentence_bert_config.json's max_seq_length
}

TEST_F(MiniLm, MatchesSentenceTransformers) {
  const auto manifest = fixture("manifest.json");
  const double cos_min = manifest.at("tolerance").at("cosine_min").get<double>();
  const double abs_max = manifest.at("tolerance").at("max_abs").get<double>();
  const auto cases = fixture("minilm.json").at("cases");
  ASSERT_GE(cases.size(), 100u);
  std::vector<std::vector<int32_t>> seqs;
  for (const auto& c : cases) seqs.push_back(c.at("fed_ids").get<std::vector<int32_t>>());
  const std::vector<float> ours = model_->embed(seqs);
  const int64_t h = model_->hidden_size();
  double worst_cos = 1, worst_abs = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<float> ref = decode_f32_base64(cases[i].at("embedding").get<std::string>());
    ASSERT_EQ(ref.size(), static_cast<size_t>(h));
    std::vector<float> v(ours.begin() + i * h, ours.begin() + (i + 1) * h);
    BertModel::normalize(v.data(), h);
    double dot = 0, nv = 0, nr = 0, max_abs = 0;
    for (int64_t k = 0; k < h; ++k) {
      dot += double(v[k]) * ref[k];
      nv += double(v[k]) * v[k];
      nr += double(ref[k]) * ref[k];
      max_abs = std::max(max_abs, std::fabs(double(v[k]) - ref[k]));
    }
    const double cos = dot / std::sqrt(nv * nr);
    EXPECT_GE(cos, cos_min) << "case " << i << ": " << cases[i].at("text");
    EXPECT_LE(max_abs, abs_max) << "case " << i << ": " << cases[i].at("text");
    worst_cos = std::min(worst_cos, cos);
    worst_abs = std::max(worst_abs, max_abs);
  }
  std::printf("all-MiniLM-L6-v2 vs sentence-transformers, %zu texts: min cosine %.9f "
              "(1 - cos = %.2g), max abs diff %.3g\n", cases.size(), worst_cos, 1 - worst_cos,
              worst_abs);
}

TEST_F(MiniLm, VectorDoesNotDependOnBatch) {
  const auto cases = fixture("minilm.json").at("cases");
  std::vector<std::vector<int32_t>> seqs;
  for (size_t i = 0; i < 12; ++i)
    seqs.push_back(cases[i].at("fed_ids").get<std::vector<int32_t>>());
  const std::vector<float> batched = model_->embed(seqs);
  const int64_t h = model_->hidden_size();
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<float> alone = model_->embed({seqs[i]});
    EXPECT_EQ(0, std::memcmp(alone.data(), batched.data() + i * h, h * sizeof(float)))
        << "sequence " << i;
  }
}

TEST_F(MiniLm, RefusesWhatItCannotEmbed) {
  EXPECT_THROW(model_->embed({{}}), Error);
  EXPECT_THROW(model_->embed({{101, 30522, 102}}), Error);
  EXPECT_THROW(model_->embed({std::vector<int32_t>(513, 101)}), Error);
  EXPECT_THROW(BertModel::load(kMiniLm, Device{DeviceKind::Cuda, 0}), Error);
}

}  // namespace
}  // namespace vllm
