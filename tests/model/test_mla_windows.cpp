// MLA with sliding-window layers and padded latent rows (issue 16, item 3). No upstream
// implementation runs this configuration, so each property is checked by a relation that must
// hold exactly, with a control showing the check would catch a window that is ignored.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "model/generator.h"
#include "model/load.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "util/check.h"
#include "windowed_mla_fixture.h"

using namespace vllm;
using testing_mla::kLatentWidth;
using testing_mla::windowed_mla_model;

namespace {

const std::vector<std::string> kHybrid = {"full_attention", "sliding_attention",
                                          "sliding_attention"};

std::vector<int32_t> tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (i * 53) % 380);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data<float>(), b.data<float>(), a.numel() * sizeof(float)) == 0;
}

// 12 greedy tokens after `prompt`, prefilled in chunks of `chunk`: the tokens, and the logits
// of the last prompt position and of each step.
std::pair<std::vector<int32_t>, std::vector<std::vector<float>>> generate(
    const DecoderModel& model, const std::vector<int32_t>& prompt, int chunk) {
  Generator gen(model, 128, 4);
  gen.keep_logits = true;
  GenerateOptions opts;
  opts.max_tokens = 12;
  opts.ignore_eos = true;
  opts.prefill_chunk = chunk;
  auto out = gen.generate(prompt, opts);
  return {std::move(out), gen.step_logits};
}

double max_diff(const Tensor& a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    d = std::max(d, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return d;
}

}  // namespace

// A window at least as long as the sequence is no window at all: the same bits. The control:
// a short window changes the logits, so the comparison would see one that is ignored.
TEST(MlaWindows, WindowAsLongAsTheSequenceChangesNothing) {
  const auto seq = tokens(24);
  LoadedModel plain = load_model(windowed_mla_model("plain", {}, 0, 48));
  LoadedModel wide = load_model(windowed_mla_model("wide", kHybrid, 24, 48));
  LoadedModel narrow = load_model(windowed_mla_model("narrow", kHybrid, 6, 48));
  ASSERT_EQ(wide.config().layers[1].sliding_window, 24);
  ASSERT_EQ(wide.config().layers[1].attention, AttentionType::kMla);
  const Tensor a = plain.model->score(seq), b = wide.model->score(seq);
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_GT(max_diff(a, narrow.model->score(seq)), 1e-3) << "a window of 6 had no effect";
}

// At the op level, over the MLA cache layout (key = the first 40 lanes of a 48-lane row, value
// = its first 32): a windowed query equals an unwindowed one over a cache holding only the
// keys in the window. The control: the same call with the window dropped differs.
TEST(MlaWindows, WindowedCallEqualsUnwindowedOverTheLastKeys) {
  constexpr int kBlock = 4, kBlocks = 8, kRow = 48, kLat = 32, kHeads = 4, kKeys = 23, kWin = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  Tensor full = Tensor::empty({kBlocks, kBlock, 1, kRow}, DType::F32);
  for (int64_t i = 0; i < full.numel(); ++i) full.data<float>()[i] = normal(rng);
  Tensor q = Tensor::empty({1, kHeads, kLatentWidth}, DType::F32);
  for (int64_t i = 0; i < q.numel(); ++i) q.data<float>()[i] = normal(rng);
  // The last kWin keys, copied into a cache of their own from block 0 on.
  Tensor last = Tensor::empty({kBlocks, kBlock, 1, kRow}, DType::F32);
  for (int j = 0; j < kWin; ++j)
    std::memcpy(last.data<float>() + j * kRow, full.data<float>() + (kKeys - kWin + j) * kRow,
                kRow * sizeof(float));
  auto attend = [&](const Tensor& cache, int seq_len, int window) {
    AttentionMeta meta;
    meta.query_start_loc = {0, 1};
    meta.seq_lens = {seq_len};
    meta.max_blocks_per_seq = kBlocks;
    meta.block_tables.resize(kBlocks);
    std::iota(meta.block_tables.begin(), meta.block_tables.end(), 0);
    Tensor out = Tensor::empty({1, kHeads, kLat}, DType::F32);
    paged_attention(q, cache.slice(3, 0, kLatentWidth), cache.slice(3, 0, kLat), meta, 0.2f,
                    window, out);
    return out;
  };
  const Tensor truncated = attend(last, kWin, 0);
  EXPECT_TRUE(same_bits(attend(full, kKeys, kWin), truncated));
  EXPECT_GT(max_diff(attend(full, kKeys, 0), truncated), 1e-4) << "control: window dropped";
}

// Only the logical lanes of a latent row are ever written: a canary in the padding survives a
// forward, while every token's logical lanes change in every layer.
TEST(MlaWindows, PaddedLanesAreNeverWritten) {
  LoadedModel m = load_model(windowed_mla_model("canary", kHybrid, 6, 48));
  const DecoderModel& model = *m.model;
  const int groups = static_cast<int>(model.kv_cache_groups().size());
  ASSERT_EQ(groups, 3);  // full, and two sliding groups of one layer each
  constexpr int kBlock = 4, kPerGroup = 4, kTokens = 10;
  KvCache cache = model.allocate_kv_cache(groups * kPerGroup, kBlock);
  std::set<const void*> buffers;
  for (Tensor& t : cache.k) {
    ASSERT_EQ(t.size(3), 48);
    if (buffers.insert(t.raw()).second) std::memset(t.raw(), 0xA5, t.nbytes());
  }
  const auto seq = tokens(kTokens);
  model.forward(single_sequence_batch(seq, 0, single_sequence_tables(groups, kPerGroup), kBlock,
                                      {kTokens - 1}),
                cache);
  uint32_t canary;
  std::memset(&canary, 0xA5, sizeof canary);
  int64_t padding_hit = 0, rows_written = 0;
  std::set<const void*> seen;
  for (const Tensor& t : cache.k) {
    if (!seen.insert(t.raw()).second) continue;
    const uint32_t* p = static_cast<const uint32_t*>(t.raw());
    for (int64_t r = 0; r < t.size(0) * t.size(1); ++r) {
      const uint32_t* row = p + r * 48;
      for (int l = kLatentWidth; l < 48; ++l) padding_hit += row[l] != canary;
      bool written = true;
      for (int l = 0; l < kLatentWidth; ++l) written &= row[l] != canary;
      rows_written += written;
    }
  }
  EXPECT_EQ(padding_hit, 0);
  EXPECT_EQ(rows_written, int64_t(kTokens) * m.config().num_layers);
}

// Chunked prefill gives the tokens and the logits of a one-shot prefill with windowed layers
// (the chunks cross both the window and block boundaries). The control: the window matters on
// this sequence (the unwindowed model's logits differ).
TEST(MlaWindows, ChunkedPrefillGivesTheTokensOfOneShot) {
  LoadedModel windowed = load_model(windowed_mla_model("chunked", kHybrid, 6, 48));
  LoadedModel plain = load_model(windowed_mla_model("chunked_plain", {}, 0, 48));
  const auto prompt = tokens(19);
  auto run = [&](const DecoderModel& model, int chunk) { return generate(model, prompt, chunk); };
  const auto one_shot = run(*windowed.model, 512);
  const auto chunked = run(*windowed.model, 5);
  EXPECT_EQ(chunked.first, one_shot.first);
  ASSERT_EQ(chunked.second.size(), one_shot.second.size());
  for (size_t s = 0; s < one_shot.second.size(); ++s)
    EXPECT_EQ(chunked.second[s], one_shot.second[s]) << "step " << s;
  const auto unwindowed = run(*plain.model, 512);
  double moved = 0;
  for (size_t i = 0; i < one_shot.second[0].size(); ++i)
    moved = std::max(moved, double(std::fabs(one_shot.second[0][i] - unwindowed.second[0][i])));
  EXPECT_GT(moved, 1e-3) << "control: the window of 6 changes nothing on a 19-token prompt";
}

// On CUDA a prefill of 16 or more rows takes mla_prefill_attention's GEMMs, shorter chunks
// the paged kernel; both must honour the window. A 19-token prompt in one step and in chunks
// of 5, then 12 decode steps, on CUDA against the CPU (whose windowed output the relations
// above pin down), every step's logits.
TEST(MlaWindows, CudaMatchesCpuInOneStepAndInChunks) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  const std::string path = windowed_mla_model("cuda", kHybrid, 6, 48);
  LoadedModel cpu = load_model(path, {}, kCpu);
  LoadedModel gpu = load_model(path, {}, parse_device("cuda"));
  const auto prompt = tokens(19);
  const auto want = generate(*cpu.model, prompt, 512).second;
  for (int chunk : {512, 5}) {
    const auto got = generate(*gpu.model, prompt, chunk).second;
    ASSERT_EQ(got.size(), want.size());
    double worst = 0, scale = 0;
    for (size_t s = 0; s < want.size(); ++s)
      for (size_t i = 0; i < want[s].size(); ++i) {
        worst = std::max(worst, double(std::fabs(got[s][i] - want[s][i])));
        scale = std::max(scale, double(std::fabs(want[s][i])));
      }
    EXPECT_LE(worst / scale, 1e-4) << "chunks of " << chunk;
    std::printf("windowed MLA on CUDA, chunks of %d: %.2e of the largest logit\n", chunk,
                worst / scale);
  }
}

// The config's mistakes are load-time errors that name the field.
TEST(MlaWindows, BadWindowOrPaddingIsALoadError) {
  auto error_of = [](const std::string& dir) -> std::string {
    try {
      load_model(dir);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(windowed_mla_model("zero_window", kHybrid, -4, 48)).find("sliding_window"),
            std::string::npos);
  EXPECT_NE(error_of(windowed_mla_model("no_window", kHybrid, 0, 48)).find("sliding_window"),
            std::string::npos);
  const std::string narrow = error_of(windowed_mla_model("narrow_row", {}, 0, 36));
  EXPECT_NE(narrow.find("kv_cache_padded_dim"), std::string::npos) << narrow;
}
