// FP8 weights (model/quantization.h) against fixtures/fp8 (tools/make_fp8_fixtures.py, with
// ml_dtypes' float8_e4m3fn casts as the oracle): the conversions bit for bit, each FP8
// checkpoint layout giving the logits of the same weights dequantized to f32 bit for bit, and
// --quantization fp8 making vLLM's per-tensor recipe of a float checkpoint. Then the e4m3 KV
// cache (--kv-cache-dtype fp8): what it stores, attention over it, and what it costs SmolLM2.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <tuple>
#include <nlohmann/json.hpp>

#include "loader/safetensors.h"
#include "model/generator.h"
#include "model/load.h"
#include "model/quantization.h"
#include "model/weights.h"
#include "runtime/backend.h"
#include "runtime/cpu/quant.h"
#include "runtime/device.h"
#include "runtime/kernel_options.h"
#include "runtime/ops.h"
#include "tiny_fixture.h"
#include "util/check.h"

using namespace vllm;

namespace {

namespace fs = std::filesystem;

const std::string kFp8 = "fixtures/fp8/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

// Every position's logits of prompt + greedy continuation of the tiny fixture `base`.
std::vector<float> all_logits(const LoadedModel& m, const std::string& base) {
  const nlohmann::json ref = read_json(testing_tiny::kDir + base + "/reference.json");
  std::vector<float> out;
  for (const auto& p : ref["prompts"]) {
    auto seq = p["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = p["greedy_ids"].get<std::vector<int32_t>>();
    seq.insert(seq.end(), greedy.begin(), greedy.end());
    const Tensor logits = m.model->score(seq);
    out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel());
  }
  return out;
}

// The logits of incremental decoding: prompts in chunks of 3 tokens, then one token a step
// (the CPU multiplies FP8 rows of so few tokens straight from their bytes, more from a
// dequantized tile: both paths run).
std::vector<float> decode_logits(const LoadedModel& m, const std::string& base) {
  const nlohmann::json ref = read_json(testing_tiny::kDir + base + "/reference.json");
  std::vector<float> out;
  for (const auto& p : ref["prompts"]) {
    Generator gen(*m.model, 256, 4);
    gen.keep_logits = true;
    GenerateOptions opts;
    opts.max_tokens = 8;
    opts.ignore_eos = true;
    opts.prefill_chunk = 3;
    gen.generate(p["prompt_ids"].get<std::vector<int32_t>>(), opts);
    for (const auto& step : gen.step_logits) out.insert(out.end(), step.begin(), step.end());
  }
  return out;
}

// The fraction of positions whose argmax agrees, and the largest |difference|.
struct Agreement {
  double top1 = 0, max_abs = 0;
};
Agreement compare(const std::vector<float>& a, const std::vector<float>& b, int vocab) {
  Agreement g;
  const size_t rows = a.size() / size_t(vocab);
  size_t same = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = a.data() + r * size_t(vocab);
    const float* y = b.data() + r * size_t(vocab);
    same += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
    for (int i = 0; i < vocab; ++i) g.max_abs = std::max(g.max_abs, double(std::fabs(x[i] - y[i])));
  }
  g.top1 = double(same) / double(rows);
  return g;
}

// KL(softmax(ref) || softmax(got)) of two rows of logits, in double.
double kl_divergence(const float* ref, const float* got, int vocab) {
  const double mr = *std::max_element(ref, ref + vocab), mg = *std::max_element(got, got + vocab);
  double zr = 0, zg = 0;
  for (int i = 0; i < vocab; ++i) zr += std::exp(ref[i] - mr), zg += std::exp(got[i] - mg);
  double kl = 0;
  for (int i = 0; i < vocab; ++i) {
    const double lr = ref[i] - mr - std::log(zr), lg = got[i] - mg - std::log(zg);
    kl += std::exp(lr) * (lr - lg);
  }
  return kl;
}

// (fixture, device); on CUDA with --dtype float32, so that the FP8 weights widen to f32 there
// as the dequantized checkpoint's are stored.
class Fp8Checkpoint : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == "cuda" && cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device in this process";
  }
  std::optional<DType> dtype() const {
    return std::get<1>(GetParam()) == "cuda" ? std::optional<DType>(DType::F32) : std::nullopt;
  }
};

std::string base_of(const std::string& fixture) {
  return read_json(kFp8 + "manifest.json")["models"][fixture].get<std::string>();
}

}  // namespace

TEST(Fp8Conversion, MatchesMlDtypes) {
  const nlohmann::json t = read_json(kFp8 + "conversions.json");
  const auto to_f32 = t["to_f32_bits"].get<std::vector<uint32_t>>();
  ASSERT_EQ(to_f32.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    const float got = fp8_e4m3_to_f32(uint8_t(b));
    if (std::isnan(std::bit_cast<float>(to_f32[b]))) {
      EXPECT_TRUE(std::isnan(got)) << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << b;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got), to_f32[b]) << "byte " << b;
    }
  }
  int wrong = 0;
  for (const auto& row : t["from_f32"]) {
    const float x = std::bit_cast<float>(row[0].get<uint32_t>());
    const int want = row[1].get<int>(), got = f32_to_fp8_e4m3(x);
    if (got != want && ++wrong <= 10)
      ADD_FAILURE() << std::hexfloat << x << ": got 0x" << std::hex << got << ", ml_dtypes 0x"
                    << want;
  }
  EXPECT_EQ(wrong, 0) << "of " << t["from_f32"].size();
  EXPECT_GT(t["from_f32"].size(), 5000u);
}

TEST_P(Fp8Checkpoint, LogitsEqualTheDequantizedCheckpoint) {
  const std::string fixture = std::get<0>(GetParam());
  const Device device = parse_device(std::get<1>(GetParam()));
  const std::string base = base_of(fixture);
  const LoadedModel fp8 = load_model(kFp8 + fixture, {}, device, 0, 1, dtype());
  const LoadedModel deq = load_model(kFp8 + fixture + "/dequantized", {}, device, 0, 1, dtype());
  const std::vector<float> a = all_logits(fp8, base), b = all_logits(deq, base);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << fixture << ": max |diff| " << compare(a, b, fp8.config().vocab_size).max_abs;
  const std::vector<float> c = decode_logits(fp8, base), d = decode_logits(deq, base);
  ASSERT_EQ(c.size(), d.size());
  EXPECT_EQ(std::memcmp(c.data(), d.data(), c.size() * sizeof(float)), 0)
      << fixture << " decoding: max |diff| " << compare(c, d, fp8.config().vocab_size).max_abs;

  // Control: the fixture is quantized (its logits are not the unquantized model's), and how
  // far FP8 weights move the tiny model from transformers' f32 logits.
  const LoadedModel f32 = load_model(testing_tiny::kDir + base, {}, device, 0, 1, dtype());
  const Agreement g = compare(a, all_logits(f32, base), fp8.config().vocab_size);
  EXPECT_GT(g.max_abs, 0.0) << fixture << " is not quantized";
  std::printf("[ fp8     ] %s: top-1 agreement with the f32 model %.4f, max |logit diff| %.4g\n",
              fixture.c_str(), g.top1, g.max_abs);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Fp8Checkpoint,
    ::testing::Combine(::testing::Values("llama_tensor", "llama_channel", "llama_block",
                                         "deepseek_v3_block"),
                       ::testing::Values("cpu", "cuda")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(Fp8AtLoad, QuantizesAsVllmPerTensorRecipe) {
  const LoadedModel q = load_model(testing_tiny::kDir + "llama", {}, kCpu, 0, 1, std::nullopt,
                                   "fp8");
  const LoadedModel ref = load_model(kFp8 + "llama_tensor/dequantized");
  const std::vector<float> a = all_logits(q, "llama"), b = all_logits(ref, "llama");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << "max |diff| " << compare(a, b, q.config().vocab_size).max_abs;
  // Control: without --quantization the same checkpoint gives other logits.
  const LoadedModel plain = load_model(testing_tiny::kDir + "llama");
  EXPECT_GT(compare(all_logits(plain, "llama"), b, q.config().vocab_size).max_abs, 0.0);
}

// The weights the model receives stay FP8 (one byte an element and a scale a block), where
// the row length allows; everything else keeps its stored type.
TEST(Fp8Source, LinearWeightsStayFp8) {
  const auto source = [](const std::string& dir, const std::string& quantization) {
    return make_quantized_source(SafetensorsModel::open(dir),
                                 parse_quant_config(read_json(dir + "/config.json"),
                                                    quantization));
  };
  const auto ds = source(kFp8 + "deepseek_v3_block", "");
  EXPECT_EQ(ds->require("model.layers.1.mlp.experts.3.up_proj.weight").dtype(), DType::FP8_E4M3);
  EXPECT_EQ(ds->require("model.layers.1.self_attn.kv_a_proj_with_mqa.weight").dtype(),
            DType::FP8_E4M3);
  // q_b_proj's rows are 24 long, not a whole number of 32-blocks: f32 values instead.
  EXPECT_EQ(ds->require("model.layers.1.self_attn.q_b_proj.weight").dtype(), DType::F32);
  EXPECT_EQ(ds->require("model.layers.1.mlp.gate.weight").dtype(), DType::F32);  // the router
  // --quantization fp8 leaves the tensors as stored: the decoder quantizes its projections.
  EXPECT_EQ(source(testing_tiny::kDir + "llama", "fp8")
                ->require("model.layers.0.self_attn.q_proj.weight").dtype(),
            DType::F32);
}

namespace {

// A copy of fixtures/fp8/<fixture> whose config.json has `edit` applied.
std::string edited_copy(const std::string& fixture, const std::string& name,
                        const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() / ("vllm_fp8_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kFp8 + fixture + "/model.safetensors", dir / "model.safetensors");
  nlohmann::json config = read_json(kFp8 + fixture + "/config.json");
  edit(config);
  std::ofstream(dir / "config.json") << config.dump();
  return dir.string();
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << text << "' lacks '" << part << "'";
}

std::string load_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string load_error(const std::string& path, const std::string& quantization = {}) {
  return load_error_of([&] { load_model(path, {}, kCpu, 0, 1, std::nullopt, quantization); });
}

}  // namespace

TEST(Fp8Errors, NameTheField) {
  expect_contains(load_error(edited_copy("llama_tensor", "awq", [](nlohmann::json& c) {
                c["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}};
              })),
              ("quant_method 'awq' is not supported"));
  expect_contains(load_error(edited_copy("llama_tensor", "noconfig", [](nlohmann::json& c) {
                c.erase("quantization_config");
              })),
              ("is F8_E4M3 but config.json has no FP8 quantization_config"));
  // Per-tensor scales read as 128x128 blocks: the scale's shape is refused.
  expect_contains(load_error(edited_copy("llama_tensor", "block", [](nlohmann::json& c) {
                c["quantization_config"]["weight_block_size"] = {128, 128};
              })),
              ("weight_scale_inv"));
  expect_contains(load_error(edited_copy("llama_channel", "int4", [](nlohmann::json& c) {
                c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
              })),
              ("4-bit float weights are not supported"));
  expect_contains(load_error(edited_copy("llama_block", "badblock", [](nlohmann::json& c) {
                c["quantization_config"]["weight_block_size"] = {128, 100};
              })),
              ("multiple of 32"));
  expect_contains(load_error(kFp8 + "llama_tensor", "int8"), ("--quantization int8"));
  if (fs::exists(default_model_path()))  // scripts/setup.sh fetches it; the GPU machine lacks it
    expect_contains(load_error(default_model_path(), "fp8"), ("is a GGUF file"));
}

// --kv-cache-dtype fp8 on SmolLM2 (f16 K/V by default, as llama.cpp): llama.cpp's greedy
// continuations of the first 4 fixture prompts (fixtures/smollm2, 256 steps) scored
// teacher-forced in one step with each cache. Printed, for docs/benchmarks.md: how often the
// e4m3 cache keeps the f16 cache's top-1 token (the FP8-KV bar is 99%, which scale-1
// e4m3 misses on this 135M model), how often each keeps llama.cpp's token, and the mean KL
// divergence from the f16 cache's distributions. Asserted: the e4m3 cache is in use (a
// quarter of the bytes of f32, half of f16's; the logits move).
static void measure_smollm2_kv_agreement(Device device) {
  const std::string gguf = default_model_path();
  if (!fs::exists(gguf)) GTEST_SKIP() << gguf << " absent (run scripts/setup.sh)";
  LoadedModel f16 = load_model(gguf, {}, device), fp8 = load_model(gguf, {}, device);
  fp8.set_kv_cache_dtype("fp8");
  EXPECT_EQ(f16.model->kv_dtype(), DType::F16);
  EXPECT_EQ(fp8.model->kv_dtype(), DType::F8_E4M3);
  EXPECT_EQ(fp8.model->kv_bytes_per_token() * 2, f16.model->kv_bytes_per_token());
  const nlohmann::json ref = read_json("fixtures/smollm2/llamacpp_greedy.json");
  const int vocab = fp8.config().vocab_size;
  int steps = 0, kept = 0, same_top = 0, kept_f16 = 0;
  double kl_sum = 0, max_diff = 0;
  for (int case_index = 0; case_index < 4; ++case_index) {
    const nlohmann::json& c = ref["cases"][case_index];
    auto seq = c["prompt_ids"].get<std::vector<int32_t>>();
    const size_t plen = seq.size();
    const auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    seq.insert(seq.end(), want.begin(), want.end() - 1);
    const Tensor a = fp8.model->score(seq), b = f16.model->score(seq);
    for (size_t s = 0; s < want.size(); ++s) {
      const float* p = a.data<float>() + (plen - 1 + s) * vocab;
      const float* q = b.data<float>() + (plen - 1 + s) * vocab;
      ++steps;
      const int64_t top = std::max_element(p, p + vocab) - p;
      const int64_t top_f16 = std::max_element(q, q + vocab) - q;
      kept += top == want[s];
      kept_f16 += top_f16 == want[s];
      same_top += top == top_f16;
      kl_sum += kl_divergence(q, p, vocab);  // KL(f16 || fp8)
      for (int i = 0; i < vocab; ++i)
        max_diff = std::max(max_diff, double(std::fabs(p[i] - q[i])));
    }
  }
  std::printf("[ fp8 kv  ] SmolLM2 on %s, %d teacher-forced steps: top-1 as the f16 cache's in "
              "%d; llama.cpp's token kept in %d (f16 cache: %d); mean KL from the f16 cache "
              "%.3g nat, max |logit diff| %.3g\n",
              device.str().c_str(), steps, same_top, kept, kept_f16, kl_sum / steps, max_diff);
  EXPECT_EQ(steps, 256);
  EXPECT_GT(max_diff, 0.0) << "the e4m3 cache changed nothing: is it in use?";
}

TEST(Fp8KvCache, SmolLM2AgreementIsMeasured) { measure_smollm2_kv_agreement(kCpu); }

// The same on a GPU, where the e4m3 cache is written by the CUDA kernels and read by the
// tensor-core attention (SmolLM2's heads are 64 wide).
TEST(Fp8KvCache, SmolLM2AgreementIsMeasuredOnCuda) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  measure_smollm2_kv_agreement(Device{DeviceKind::Cuda, 0});
}

TEST(Fp8KvCache, RefusedWhereItDoesNotRun) {
  LoadedModel mla = load_model(testing_tiny::kDir + "deepseek_v3");
  expect_contains(load_error_of([&] { mla.set_kv_cache_dtype("fp8"); }), "latent attention");
  LoadedModel llama = load_model(testing_tiny::kDir + "llama");
  expect_contains(load_error_of([&] { llama.set_kv_cache_dtype("fp8_e5m2"); }),
                  "supported are auto, fp8 and fp8_e4m3");
}

// The e4m3 cache at the op level: each stored byte is the element clamped to +-448 and
// rounded (the conversion checked against ml_dtypes above), and attention over it is, bit for
// bit, attention over an f32 cache holding those values.
TEST(Fp8KvCache, StoresRoundedValuesAndAttendsOverThem) {
  constexpr int64_t T = 6, Hq = 4, Hkv = 2, D = 32, kBlocks = 3, kBlockSize = 4;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const auto random = [&](std::initializer_list<int64_t> shape) {
    Tensor t = Tensor::empty(shape, DType::F32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
    return t;
  };
  Tensor q = random({T, Hq, D}), k = random({T, Hkv, D}), v = random({T, Hkv, D});
  k.data<float>()[5] = 1000.0f;  // past e4m3's range: clamped, as vLLM's saturating cast
  v.data<float>()[7] = -600.0f;
  Tensor slots = Tensor::empty({T}, DType::I32);
  for (int64_t t = 0; t < T; ++t) slots.data<int32_t>()[t] = int32_t(t < 4 ? t + 4 : t - 4);
  Tensor kc = Tensor::empty({kBlocks, kBlockSize, Hkv, D}, DType::F8_E4M3);
  Tensor vc = Tensor::empty({kBlocks, kBlockSize, Hkv, D}, DType::F8_E4M3);
  reshape_and_cache(k, v, kc, vc, slots);
  Tensor kf = Tensor::empty({kBlocks, kBlockSize, Hkv, D}, DType::F32);
  Tensor vf = Tensor::empty({kBlocks, kBlockSize, Hkv, D}, DType::F32);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = slots.data<int32_t>()[t];
    for (int64_t i = 0; i < Hkv * D; ++i)
      for (auto [src, c8, cf] : {std::tuple{&k, &kc, &kf}, std::tuple{&v, &vc, &vf}}) {
        const uint8_t b = reinterpret_cast<const uint8_t*>(c8->raw())[s * Hkv * D + i];
        const float x = src->data<float>()[t * Hkv * D + i];
        ASSERT_EQ(b, f32_to_fp8_e4m3(std::clamp(x, -448.0f, 448.0f))) << "token " << t;
        cf->data<float>()[s * Hkv * D + i] = fp8_e4m3_to_f32(b);
      }
  }
  EXPECT_EQ(fp8_e4m3_to_f32(reinterpret_cast<const uint8_t*>(kc.raw())[5 + 4 * Hkv * D]), 448.0f);
  AttentionMeta meta;  // one sequence of all T tokens: block 1, then block 0
  meta.query_start_loc = {0, int32_t(T)};
  meta.seq_lens = {int32_t(T)};
  meta.block_tables = {1, 0, 2};
  meta.max_blocks_per_seq = 3;
  Tensor a = Tensor::empty({T, Hq, D}, DType::F32), b = Tensor::empty({T, Hq, D}, DType::F32);
  paged_attention(q, kc, vc, meta, 0.125f, 0, a);
  paged_attention(q, kf, vf, meta, 0.125f, 0, b);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), size_t(a.nbytes())), 0);
}

// ---- FP8 weights on a GPU: kept FP8 (one scale a row) ----

namespace {

const Device kGpu{DeviceKind::Cuda, 0};

// A random [n, k] weight as FP8_E4M3 with one scale a row, rows 2^-4..2^4 apart in size (a
// kernel that dropped or misplaced a scale fails), and its exact f32 dequantization.
struct Fp8Rows {
  Tensor q, f32;
};
Fp8Rows gpu_fp8_rows(int64_t n, int64_t k, std::mt19937& rng) {
  Fp8Rows w{Tensor::empty({n, k}, DType::FP8_E4M3), Tensor::empty({n, k}, DType::F32)};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> octave(-4, 4);
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    const float size = std::ldexp(0.05f, octave(rng));
    float amax = 0.0f;
    for (float& v : row) amax = std::max(amax, std::fabs(v = normal(rng) * size));
    const float s = amax / 448.0f;
    auto* b = reinterpret_cast<BlockFp8E4M3*>(w.q.row(r));
    for (int64_t j = 0; j < k; ++j) {
      b[j / kFp8Block].d = s;
      b[j / kFp8Block].qs[j % kFp8Block] = f32_to_fp8_e4m3(row[size_t(j)] / s);
    }
    cpu::dequantize_row(DType::FP8_E4M3, w.q.row(r), w.f32.data<float>() + r * k, k);
  }
  return w;
}

// x with each row quantized to e4m3 as the GPU does before an FP8 GEMM (scale amax / 448,
// round to nearest even), as f32 values.
Tensor gpu_per_token_fp8(const Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1);
  Tensor y = Tensor::empty({m, k}, DType::F32);
  for (int64_t r = 0; r < m; ++r) {
    const float* xr = x.data<float>() + r * k;
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(xr[i]));
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int64_t i = 0; i < k; ++i)
      y.data<float>()[r * k + i] =
          fp8_e4m3_to_f32(f32_to_fp8_e4m3(std::clamp(xr[i] / s, -448.0f, 448.0f))) * s;
  }
  return y;
}

Tensor gpu_random_f32(std::initializer_list<int64_t> shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

// ||a - b|| / ||b|| of two f32 tensors (a may be on the GPU).
double gpu_rel_err(const Tensor& a, const Tensor& b) {
  const Tensor h = a.device().kind == DeviceKind::Cpu ? a : a.to(kCpu);
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double x = h.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x)) return INFINITY;
    num += (x - y) * (x - y), den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

Tensor gpu_bf16_to_f32(const Tensor& t) {
  const Tensor h = t.to(kCpu);
  Tensor f = Tensor::empty({h.numel()}, DType::F32);
  for (int64_t i = 0; i < h.numel(); ++i)
    f.data<float>()[i] = bf16_to_f32(static_cast<const uint16_t*>(h.raw())[i]);
  return f;
}

// Bounds. GEMV (up to 8 rows, x in f32, weights exact): the order of the sums, as runtime's
// CudaOps tests (1e-6; 1e-5 where the norm scale is applied after the dot). FP8 GEMM against
// the same per-token quantization of x done here: Hopper's FP8 tensor cores accumulate with
// about 14 mantissa bits before cuBLASLt promotes to f32 (DeepSeek-V3 report, sec. 3.3.2), so
// 1e-3. Against unquantized x (where a fused norm's rows differ from ours in the last bit, so
// an element may round the other way): e4m3's rounding of x, 2^-4 / sqrt(3) = 3.6% rms, so 5%.
// The bf16 copy of the weights (where cuBLASLt has no FP8 algorithm): x and weights rounded to
// bf16, 1e-2 as runtime's CudaOps bounds for bf16.
constexpr double kGemvBound = 1e-6, kGemvNormBound = 1e-5, kFp8GemmBound = 1e-3;
constexpr double kFp8RoundingBound = 0.05, kBf16CopyBound = 1e-2;

// Runs body once with each FP8 GEMV: the CUDA cores' (the default) and the tensor cores'
// (--fp8-gemv-tensor-cores), with the kernel's name for messages; the options are restored.
void for_each_fp8_gemv(const std::function<void(const std::string&)>& body) {
  struct Restore {
    KernelOptions saved = kernel_options();
    ~Restore() { set_kernel_options(saved); }
  } restore;
  for (bool tensor_cores : {false, true}) {
    KernelOptions o = restore.saved;
    o.fp8_gemv_tensor_cores = tensor_cores;
    set_kernel_options(o);
    body(tensor_cores ? " (tensor-core GEMV)" : " (CUDA-core GEMV)");
  }
}

}  // namespace

// Up to 8 rows the GEMV reads the FP8 bytes and row scales with x in f32; more rows are W8A8
// (x quantized per token, cuBLASLt's FP8 GEMM, both scales in the epilogue). cuBLASLt has no
// FP8 algorithm for weights of 71 rows (not a multiple of 16: measured on the H200), which
// take a bf16 copy of the weights instead (x rounded to bf16: 1e-2, as runtime's CudaOps bf16
// bounds). References: the CPU's f32 product of the exactly dequantized weights (and of x
// quantized as the GPU does, for W8A8). Gate and up are two FP8 parts with their own scales.
TEST(Fp8Gpu, LinearMatchesDequantizedWeights) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  for_each_fp8_gemv([&](const std::string& kernel) {
    std::mt19937 rng(5);
    for (int64_t F : {80, 71})
    for (int64_t k : {64, 160, 2080, 5024, 14336}) {
      const Fp8Rows w = gpu_fp8_rows(F, k, rng), gate = gpu_fp8_rows(F, k, rng);
      const Fp8Rows up = gpu_fp8_rows(F, k, rng);
      const Linear q = Linear::fused({w.q}, {}, kGpu), q2 = Linear::fused({gate.q, up.q}, {}, kGpu);
      ASSERT_EQ(q.parts[0].dtype(), DType::FP8_E4M3);
      ASSERT_EQ(q2.parts[0].dtype(), DType::FP8_E4M3);
      const Linear c = Linear::fused({w.f32}, {}), c2 = Linear::fused({gate.f32, up.f32}, {});
      for (int64_t m : {1, 3, 8, 37}) {
        const bool gemv = m <= 8, w8a8 = !gemv && F % 16 == 0;
        const std::string what = "F=" + std::to_string(F) + " k=" + std::to_string(k) +
                                 " m=" + std::to_string(m) + kernel;
        const Tensor x = gpu_random_f32({m, k}, rng), g = gpu_random_f32({k}, rng);
        const Tensor xq = w8a8 ? gpu_per_token_fp8(x) : x, res = gpu_random_f32({m, F}, rng);
        const Tensor xg = x.to(kGpu), gg = g.to(kGpu);
        const auto gpu = [&](int64_t cols) { return Tensor::empty({m, cols}, DType::F32, kGpu); };
        const auto cpu = [&](int64_t cols) { return Tensor::empty({m, cols}, DType::F32); };
        Tensor normed = cpu(k), normed_g = gpu(k), ref = cpu(F), out = gpu(F);
        Tensor gu = cpu(2 * F), gu_g = gpu(2 * F);
        const double plain_bound = gemv ? kGemvBound : w8a8 ? kFp8GemmBound : kBf16CopyBound;
        const double norm_bound = gemv ? kGemvNormBound : w8a8 ? kFp8RoundingBound : kBf16CopyBound;

        c(xq, ref), q(xg, out);
        EXPECT_LT(gpu_rel_err(out, ref), plain_bound) << "plain " << what;
        if (w8a8) {  // control: the GEMM's x is quantized (e4m3: ~2.5% off the f32 product)
          Tensor exact = cpu(F);
          c(x, exact);
          EXPECT_GT(gpu_rel_err(out, exact), 10 * kFp8GemmBound) << "plain " << what;
          EXPECT_LT(gpu_rel_err(out, exact), kFp8RoundingBound) << "plain " << what;
        }

        c.normed(x, g, 1e-5f, normed, ref), q.normed(xg, gg, 1e-5f, normed_g, out);
        EXPECT_LT(gpu_rel_err(out, ref), norm_bound) << "norm " << what;

        c2.normed_silu(x, g, 1e-5f, normed, gu, ref);
        q2.normed_silu(xg, gg, 1e-5f, normed_g, gu_g, out);
        EXPECT_LT(gpu_rel_err(out, ref), norm_bound) << "norm+silu " << what;

        Tensor acc = cpu(F), acc_g = res.to(kGpu), product = cpu(F), product_g = gpu(F);
        std::memcpy(acc.raw(), res.raw(), size_t(res.nbytes()));
        c.accumulate(xq, product, acc), q.accumulate(xg, product_g, acc_g);
        EXPECT_LT(gpu_rel_err(acc_g, acc), plain_bound) << "accumulate " << what;
      }
    }
  });
}

// The GEMV with x in f32: rows of x far apart in magnitude (1e-30, 1e30), one with an outlier
// 10^6 times its other values, one of values below f16's subnormals, each within the GEMV's
// bound of the CPU's f32 product on its own. (The FP8 tensor-core GEMV stages x as two f16
// terms of x times a power of two per row and chunk of 64: without that scale the 1e30 row is
// infinite and the 1e-30 row zero; without the second term every row is off by f16's 2^-11.)
TEST(Fp8Gpu, GemvKeepsTheRangeAndPrecisionOfF32) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  for_each_fp8_gemv([&](const std::string& kernel) {
    std::mt19937 rng(7);
    const int64_t F = 96;
    for (int64_t k : {160, 2080, 14336}) {
      const Fp8Rows w = gpu_fp8_rows(F, k, rng);
      const Linear q = Linear::fused({w.q}, {}, kGpu), c = Linear::fused({w.f32}, {});
      for (int64_t m : {1, 4}) {
        Tensor x = gpu_random_f32({m, k}, rng);
        float* xr = x.data<float>();
        const float row_size[4] = {1e-30f, 1e30f, 1.0f, 1e-9f};
        for (int64_t r = 0; r < m; ++r)
          for (int64_t i = 0; i < k; ++i) xr[r * k + i] *= row_size[m == 1 ? 1 : r];
        if (m == 4) xr[2 * k + k / 3] = 1e6f;  // row 2's outlier
        Tensor ref = Tensor::empty({m, F}, DType::F32);
        Tensor out = Tensor::empty({m, F}, DType::F32, kGpu);
        c(x, ref), q(x.to(kGpu), out);
        const Tensor got = out.to(kCpu);
        for (int64_t r = 0; r < m; ++r) {
          double num = 0, den = 0;
          for (int64_t j = 0; j < F; ++j) {
            const double a = got.data<float>()[r * F + j], b = ref.data<float>()[r * F + j];
            num += (a - b) * (a - b), den += b * b;
          }
          EXPECT_GT(den, 0.0);
          EXPECT_LT(std::sqrt(num / den), kGemvBound)
              << "k=" << k << " m=" << m << " row " << r << " (size " << row_size[m == 1 ? 1 : r]
              << ")" << kernel;
        }
      }
    }
  });
}

// q/k/v projected, rotated and cached in one GEMV for up to 8 rows (a bf16 cache beside FP8
// weights), W8A8 then rope for 12, against the CPU's plain ops on the dequantized weights into
// f32 caches; the caches add bf16's rounding (2^-8).
TEST(Fp8Gpu, NormedQkvRopeCacheMatchesDequantizedWeights) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  for_each_fp8_gemv([&](const std::string& kernel) {
    std::mt19937 rng(6);
    const int Hq = 4, Hkv = 2, D = 64;
    const int64_t width = (Hq + 2 * Hkv) * D, blocks = 4, bs = 4;
    RopeParams p;
    p.head_dim = p.rotary_dim = D;
    p.mscale = 1.05f;
    for (int i = 0; i < D / 2; ++i) p.inv_freq.push_back(std::pow(10000.0f, -2.0f * i / D));
    for (int64_t k : {160, 2080, 5024}) {  // 8 rows of 5024 take the CUDA-core GEMV
      const Fp8Rows w = gpu_fp8_rows(width, k, rng);
      const Linear q = Linear::fused({w.q}, {}, kGpu), c = Linear::fused({w.f32}, {});
      ASSERT_EQ(q.parts[0].dtype(), DType::FP8_E4M3);
      for (int64_t m : {1, 3, 8, 12}) {
        const std::string what = "k=" + std::to_string(k) + " m=" + std::to_string(m) + kernel;
        const double bound = m <= 8 ? kGemvNormBound : kFp8RoundingBound;
        const Tensor x = gpu_random_f32({m, k}, rng), g = gpu_random_f32({k}, rng);
        Tensor pos = Tensor::empty({m}, DType::I32), slots = Tensor::empty({m}, DType::I32);
        for (int64_t t = 0; t < m; ++t) {
          pos.data<int32_t>()[t] = int32_t(7 * t + 3);
          slots.data<int32_t>()[t] = t == 1 ? -1 : int32_t(t);  // one padding row
        }
        Tensor normed = Tensor::empty({m, k}, DType::F32);
        Tensor qkv = Tensor::empty({m, width}, DType::F32);
        Tensor kc = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32);
        Tensor vc = Tensor::zeros({blocks, bs, Hkv, D}, DType::F32);
        c.normed_rope_cache(x, g, 1e-5f, normed, qkv, Hq, pos, p, kc, vc, slots);
        Tensor normed_g = Tensor::empty({m, k}, DType::F32, kGpu);
        Tensor qkv_g = Tensor::empty({m, width}, DType::F32, kGpu);
        Tensor kc_g = Tensor::zeros({blocks, bs, Hkv, D}, DType::BF16).to(kGpu);
        Tensor vc_g = Tensor::zeros({blocks, bs, Hkv, D}, DType::BF16).to(kGpu);
        q.normed_rope_cache(x.to(kGpu), g.to(kGpu), 1e-5f, normed_g, qkv_g, Hq, pos.to(kGpu), p,
                            kc_g, vc_g, slots.to(kGpu));
        EXPECT_LT(gpu_rel_err(qkv_g, qkv), bound) << what;
        EXPECT_LT(gpu_rel_err(gpu_bf16_to_f32(kc_g), kc), bound + 0x1p-8) << "k cache " << what;
        EXPECT_LT(gpu_rel_err(gpu_bf16_to_f32(vc_g), vc), bound + 0x1p-8) << "v cache " << what;
      }
    }
  });
}

namespace {

// Mean over positions of KL(p_ref || p) between the softmaxes of two logit rows.
double gpu_mean_kl(const std::vector<float>& ref, const std::vector<float>& got, int vocab) {
  const size_t rows = ref.size() / size_t(vocab);
  double total = 0;
  for (size_t r = 0; r < rows; ++r)
    total += kl_divergence(ref.data() + r * size_t(vocab), got.data() + r * size_t(vocab), vocab);
  return total / double(rows);
}

}  // namespace

// --quantization fp8 on a GPU quantizes there (quantize_fp8_weight): the bytes and the
// scale of the host's quantize_fp8_per_tensor, for each float type, at any row offset of the
// fused weight, leaving the other rows alone; an all-zero tensor gets scale 1.
TEST(Fp8Gpu, WeightQuantizedOnTheDeviceAsOnTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  std::mt19937 rng(11);
  const int64_t k = 96, total = 40;
  for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto& [row0, n, size] :
         {std::tuple<int64_t, int64_t, float>{0, 40, 0.02f}, {5, 17, 3.0f}, {30, 10, 0.0f}}) {
      const Tensor w32 = gpu_random_f32({n, k}, rng);
      for (int64_t i = 0; i < w32.numel(); ++i) w32.data<float>()[i] *= size;
      Tensor w = dt == DType::F32 ? w32 : Tensor::empty({n, k}, dt);  // w32 rounded to dt
      for (int64_t i = 0; dt != DType::F32 && i < w.numel(); ++i)
        static_cast<uint16_t*>(w.raw())[i] = dt == DType::BF16 ? f32_to_bf16(w32.data<float>()[i])
                                                                : f32_to_f16(w32.data<float>()[i]);
      const Tensor want = quantize_fp8_per_tensor(w);
      Tensor dst = Tensor::empty({total, k}, DType::FP8_E4M3, kGpu);
      std::vector<uint8_t> bytes(static_cast<size_t>(dst.nbytes()), 0x5a);  // canary
      backend_for(kGpu).copy(dst.raw(), kGpu, bytes.data(), kCpu, bytes.size());
      quantize_fp8_weight(w.to(kGpu), dst, row0);
      backend_for(kGpu).copy(bytes.data(), kCpu, dst.raw(), kGpu, bytes.size());
      const auto* scales = reinterpret_cast<const float*>(bytes.data() + total * k);
      const std::string what = std::string(dtype_name(dt)) + " rows " +
                               std::to_string(row0) + "+" + std::to_string(n);
      int wrong = 0;
      for (int64_t r = 0; r < total; ++r) {
        const bool mine = r >= row0 && r < row0 + n;
        const auto* b = mine ? reinterpret_cast<const BlockFp8E4M3*>(want.row(r - row0)) : nullptr;
        float scale;
        std::memcpy(&scale, &scales[r], sizeof scale);
        if (mine) {
          EXPECT_EQ(scale, b[0].d) << what << " row " << r;
          if (size == 0.0f) {
            EXPECT_EQ(scale, 1.0f) << what;
          }
        } else {
          EXPECT_EQ(std::bit_cast<uint32_t>(scale), 0x5a5a5a5au) << what << " row " << r;
        }
        for (int64_t j = 0; j < k; ++j) {
          const uint8_t got = bytes[size_t(r * k + j)];
          const uint8_t expect = mine ? b[j / kFp8Block].qs[j % kFp8Block] : uint8_t(0x5a);
          if (got != expect && ++wrong <= 5)
            ADD_FAILURE() << what << " [" << r << ", " << j << "]: 0x" << std::hex << int(got)
                          << ", want 0x" << int(expect);
        }
      }
      EXPECT_EQ(wrong, 0) << what;
    }
  }
}

// The stacked MoE experts on a GPU take their FP8 values in their own type there
// (ops::round_fp8_per_tensor): the host's quantize_fp8_per_tensor widened to that type, bit for
// bit, for each float type, rows of whole 32-blocks or not, and an all-zero tensor.
TEST(Fp8Gpu, WeightRoundedOnTheDeviceAsOnTheHost) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  std::mt19937 rng(12);
  for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (const auto& [n, k, size] : {std::tuple<int64_t, int64_t, float>{33, 96, 0.02f},
                                     {7, 40, 3.0f}, {4, 64, 0.0f}}) {
      const Tensor w32 = gpu_random_f32({n, k}, rng);
      for (int64_t i = 0; i < w32.numel(); ++i) w32.data<float>()[i] *= size;
      const auto to_dt = [&](float v) {
        return dt == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
      };
      Tensor w = dt == DType::F32 ? w32 : Tensor::empty({n, k}, dt);  // w32 rounded to dt
      for (int64_t i = 0; dt != DType::F32 && i < w.numel(); ++i)
        static_cast<uint16_t*>(w.raw())[i] = to_dt(w32.data<float>()[i]);
      const Tensor want = to_f32(quantize_fp8_per_tensor(w));
      Tensor g = w.to(kGpu);
      round_fp8_per_tensor(g);
      const Tensor got = g.to(kCpu);
      const std::string what = std::string(dtype_name(dt)) + " [" + std::to_string(n) + ", " +
                               std::to_string(k) + "] x " + std::to_string(size);
      int wrong = 0;
      for (int64_t i = 0; i < w.numel(); ++i) {
        const float v = want.data<float>()[i];
        const bool same = dt == DType::F32
                              ? std::bit_cast<uint32_t>(got.data<float>()[i]) ==
                                    std::bit_cast<uint32_t>(v)
                              : static_cast<const uint16_t*>(got.raw())[i] == to_dt(v);
        if (!same && ++wrong <= 5) ADD_FAILURE() << what << " element " << i << ": want " << v;
      }
      EXPECT_EQ(wrong, 0) << what;
      if (size == 0.0f) continue;
      // Control: the rounding moved some values (the test would see a kernel that did nothing).
      int moved = 0;
      for (int64_t i = 0; i < w.numel(); ++i)
        moved += std::memcmp(static_cast<const char*>(w.raw()) + i * dtype_info(dt).block_bytes,
                             static_cast<const char*>(got.raw()) + i * dtype_info(dt).block_bytes,
                             size_t(dtype_info(dt).block_bytes)) != 0;
      EXPECT_GT(moved, 0) << what;
    }
  }
}

// --quantization fp8 on a GPU gives the logits of the same weights quantized by the fixture
// script (fixtures/fp8/llama_tensor, ml_dtypes' casts), loaded as an FP8 checkpoint there: the
// same FP8 weights, bit for bit. Control: the unquantized model's logits differ.
TEST(Fp8Gpu, QuantizedAtLoadAsTheFixtureCheckpoint) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  const LoadedModel q = load_model(testing_tiny::kDir + "llama", {}, kGpu, 0, 1, std::nullopt,
                                   "fp8");
  const LoadedModel ref = load_model(kFp8 + "llama_tensor", {}, kGpu, 0, 1, std::nullopt);
  const int vocab = q.config().vocab_size;
  for (const auto& logits : {&all_logits, &decode_logits}) {
    const std::vector<float> a = logits(q, "llama"), b = logits(ref, "llama");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "max |diff| " << compare(a, b, vocab).max_abs;
  }
  const LoadedModel plain = load_model(testing_tiny::kDir + "llama", {}, kGpu, 0, 1);
  EXPECT_GT(compare(all_logits(plain, "llama"), all_logits(ref, "llama"), vocab).max_abs, 0.0);
}

namespace {

// The tiny qwen3_moe, deepseek_v2 and deepseek_v3 models with --quantization fp8 on the GPU
// (under `dtype`) give the CPU's --quantization fp8 logits (by `logits`) within the fixtures'
// bar; control: the unquantized model on the GPU is farther than the bar.
void expect_fp8_moe_models_as_on_the_cpu(
    std::optional<DType> dtype,
    std::vector<float> (*logits)(const LoadedModel&, const std::string&), const char* what) {
  for (const std::string base : {"qwen3_moe", "deepseek_v2", "deepseek_v3"}) {
    const std::string dir = testing_tiny::kDir + base;
    const LoadedModel cpu = load_model(dir, {}, kCpu, 0, 1, std::nullopt, "fp8");
    const LoadedModel gpu = load_model(dir, {}, kGpu, 0, 1, dtype, "fp8");
    const LoadedModel plain = load_model(dir, {}, kGpu, 0, 1, dtype);
    const std::vector<float> a = logits(gpu, base), b = logits(cpu, base), c = logits(plain, base);
    ASSERT_EQ(a.size(), b.size());
    const int vocab = cpu.config().vocab_size;
    const int64_t rows = int64_t(a.size()) / vocab;
    const double err = testing_tiny::rel_error(a.data(), b.data(), rows, vocab);
    const double control = testing_tiny::rel_error(c.data(), b.data(), rows, vocab);
    EXPECT_LE(err, testing_tiny::kBar) << base << " " << what;
    EXPECT_GT(control, testing_tiny::kBar) << base << ": FP8 does not move this model";
    std::printf("[ fp8 gpu ] %s %s against the CPU %.2e (bar %.0e; unquantized %.2e)\n",
                base.c_str(), what, err, testing_tiny::kBar, control);
  }
}

}  // namespace

// --quantization fp8 on MoE and MLA models: the GPU in f32 (FP8 values widened exactly, so
// only the order of sums differs) gives the CPU's logits within the fixtures' bar. On the GPU
// the experts are stacked for the grouped kernels (the shared ones too, DeepSeek) and the MLA
// kv_b_proj is split into absorbed halves: each quantized as the CPU's. Control: the
// unquantized model is farther than the bar from the quantized one.
TEST(Fp8Gpu, MoeAndMlaQuantizedAtLoadAsOnTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  expect_fp8_moe_models_as_on_the_cpu(DType::F32, all_logits, "--quantization fp8, CUDA f32");
}

// On a GPU that keeps FP8 weights the MoE experts stack as FP8 (stack_experts): each expert
// in the GPU layout (its N x K e4m3 bytes, then its N row scales), float parts quantized on
// the device with one scale a part, FP8 parts (a checkpoint's, or the shared experts the host
// quantized whole) as they are: the bytes and scales of quantize_fp8_per_tensor of each part.
// Control: under --dtype float32 the same parts stack as f32.
TEST(Fp8Gpu, ExpertsStackAsFp8) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  std::mt19937 rng(13);
  const int64_t F = 24, K = 64;
  std::vector<std::vector<Tensor>> floats, parts;
  for (int e = 0; e < 3; ++e) {
    std::vector<Tensor> gu;
    for (float size : {0.01f * float(e + 1), 2.0f}) {
      Tensor t = gpu_random_f32({F, K}, rng);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= size;
      gu.push_back(t);
    }
    floats.push_back(gu);
  }
  parts = floats;
  parts.push_back({quantize_fp8_per_tensor(floats[0][1]), quantize_fp8_per_tensor(floats[1][0])});
  WeightPlacement where(kGpu, std::nullopt);
  where.quantize_fp8 = true;
  const Tensor stacked = stack_experts(parts, where);
  ASSERT_EQ(stacked.dtype(), DType::FP8_E4M3);
  ASSERT_EQ(stacked.shape(), (std::vector<int64_t>{4, 2 * F, K}));
  std::vector<uint8_t> bytes(static_cast<size_t>(stacked.nbytes()));
  backend_for(kGpu).copy(bytes.data(), kCpu, stacked.raw(), kGpu, bytes.size());
  const int64_t expert_bytes = 2 * F * row_bytes(DType::FP8_E4M3, K);
  int wrong = 0;
  for (size_t e = 0; e < parts.size(); ++e) {
    const uint8_t* base = bytes.data() + e * expert_bytes;
    for (int64_t j = 0; j < 2; ++j) {
      const Tensor& part = parts[e][j];
      const Tensor want = part.dtype() == DType::FP8_E4M3 ? part : quantize_fp8_per_tensor(part);
      for (int64_t r = 0; r < F; ++r) {
        const auto* b = reinterpret_cast<const BlockFp8E4M3*>(want.row(r));
        float scale;
        std::memcpy(&scale, base + 2 * F * K + (j * F + r) * 4, sizeof scale);
        wrong += scale != b[0].d;
        for (int64_t i = 0; i < K; ++i)
          wrong += base[(j * F + r) * K + i] != b[i / kFp8Block].qs[i % kFp8Block];
      }
    }
  }
  EXPECT_EQ(wrong, 0);
  WeightPlacement f32(kGpu, DType::F32);
  f32.quantize_fp8 = true;
  EXPECT_EQ(stack_experts(floats, f32).dtype(), DType::F32);
}

// --quantization fp8 with the MoE experts kept FP8 on the GPU (--dtype auto: the rest of these
// f32 models stays f32): decoding (prompt chunks of 3, then a token a step: the experts'
// grouped GEMV, x in f32) gives the CPU's --quantization fp8 logits within the fixtures' bar,
// DeepSeek's shared experts sliced after one quantization of the whole tensor. Control: the
// unquantized model is farther than the bar.
TEST(Fp8Gpu, MoeExpertsKeptFp8DecodeAsOnTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  expect_fp8_moe_models_as_on_the_cpu(std::nullopt, decode_logits, "FP8 experts, CUDA decode");
}

// The fixtures' FP8 checkpoints on a GPU with their weights kept FP8 (--dtype auto: the rest of
// these f32 models stays f32), against the dequantized checkpoint computed in f32 (--dtype
// float32, which widens). Decoding (prompt chunks of 3, then one token: all GEMV) gives its
// logits up to the order of the sums (weights widened to bf16 instead would miss 1e-4).
// Whole-sequence prefills (W8A8, e4m3 activations) are measured, not bounded: top-1 agreement
// over the teacher-forced positions and the mean KL are printed (issue 19's bar is 99%; on the
// H200 these random tiny models gave 80-86%, docs/benchmarks.md). llama_block's 128 x 128
// scales vary along down_proj's rows of 160: those are widened to bf16, so it takes only the
// prefill part.
TEST(Fp8Gpu, CheckpointsKeepFp8Weights) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device in this process";
  for (const std::string fixture : {"llama_tensor", "llama_channel", "llama_block"}) {
    const std::string base = base_of(fixture);
    const LoadedModel fp8 = load_model(kFp8 + fixture, {}, kGpu, 0, 1, std::nullopt);
    const LoadedModel deq =
        load_model(kFp8 + fixture + "/dequantized", {}, kGpu, 0, 1, DType::F32);
    const int vocab = fp8.config().vocab_size;
    const std::vector<float> c = all_logits(fp8, base), d = all_logits(deq, base);
    ASSERT_EQ(c.size(), d.size());
    const Agreement p = compare(c, d, vocab);
    std::printf("[ fp8 gpu ] %s prefill (W8A8): top-1 agreement %.4f over %zu positions (bar "
                "0.99), mean KL %.3g nat, max |logit diff| %.3g\n", fixture.c_str(), p.top1,
                c.size() / size_t(vocab), gpu_mean_kl(d, c, vocab), p.max_abs);
    EXPECT_TRUE(std::isfinite(p.max_abs)) << fixture;
    EXPECT_GT(p.max_abs, 0.0) << fixture << ": the prefill's activations are not quantized";
    if (fixture == "llama_block") continue;
    const std::vector<float> b = decode_logits(deq, base);
    for_each_fp8_gemv([&](const std::string& kernel) {
      const std::vector<float> a = decode_logits(fp8, base);
      ASSERT_EQ(a.size(), b.size());
      const Agreement g = compare(a, b, vocab);
      double scale = 0;
      for (float v : b) scale = std::max(scale, double(std::fabs(v)));
      EXPECT_EQ(g.top1, 1.0) << fixture << kernel;
      EXPECT_LE(g.max_abs, 1e-4 * scale) << fixture << kernel;
      std::printf("[ fp8 gpu ] %s decode%s: max |logit diff| %.3g of max |logit| %.3g\n",
                  fixture.c_str(), kernel.c_str(), g.max_abs, scale);
    });
  }
}
