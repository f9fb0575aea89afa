// Dequantisation oracle: tensors of every supported GGUF type written by the `gguf` Python
// package (tools/make_quant_fixtures.py) are read with GgufFile, dequantised with
// cpu::dequantize_row and compared with gguf.quants.dequantize's values. Plus the real model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "loader/gguf.h"
#include "runtime/cpu/quant.h"

namespace vllm::test {
namespace {

const std::string kDir = "fixtures/quant/";

std::vector<float> read_f32(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  EXPECT_EQ(size_t(in.gcount()), n * sizeof(float)) << path;
  return v;
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q5_0}) {
    std::string n(dtype_name(t));
    for (char& c : n) c = char(std::toupper(c));
    if (n == name) return t;
  }
  ADD_FAILURE() << "unknown dtype in manifest: " << name;
  return DType::F32;
}

TEST(QuantOracle, DequantizeMatchesGgufPython) {
  std::ifstream mf(kDir + "manifest.json");
  ASSERT_TRUE(mf) << "run from the repo root; missing " << kDir << "manifest.json";
  const nlohmann::json manifest = nlohmann::json::parse(mf);
  const auto f = GgufFile::open(kDir + manifest["gguf_file"].get<std::string>());
  ASSERT_EQ(f->tensors().size(), manifest["tensors"].size());
  std::set<DType> covered;
  for (const auto& e : manifest["tensors"]) {
    const std::string name = e["name"];
    SCOPED_TRACE(name);
    const DType dtype = dtype_from_name(e["dtype"]);
    const auto shape = e["shape"].get<std::vector<int64_t>>();
    ASSERT_EQ(e["tolerance"]["kind"], "max_abs_diff_over_max_abs_ref");
    const double tol = e["tolerance"]["value"];

    const Tensor t = f->tensor(name);
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(t.shape(), shape);
    covered.insert(t.dtype());
    const int64_t n = t.numel(), cols = t.size(-1), rows = n / cols;
    const std::vector<float> ref = read_f32(kDir + e["reference"].get<std::string>(), size_t(n));
    std::vector<float> got(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      const char* src = static_cast<const char*>(t.raw()) + r * row_bytes(dtype, cols);
      cpu::dequantize_row(dtype, src, got.data() + r * cols, cols);
    }
    double max_ref = 0, max_diff = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(ref[i])) << i;
      max_ref = std::max(max_ref, std::fabs(double(ref[i])));
      max_diff = std::max(max_diff, std::fabs(double(got[i]) - double(ref[i])));
    }
    EXPECT_GT(max_ref, 0.0);
    EXPECT_LE(max_diff, tol * max_ref) << "max |diff| " << max_diff << ", max |ref| " << max_ref;
  }
  EXPECT_EQ(covered.size(), 10u);  // every supported type
}

// The real model, when scripts have downloaded it.
TEST(QuantOracle, SmolLM2Q4_1) {
  const std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f->get_int("llama.block_count"), 30);
  EXPECT_EQ(f->get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f->tensors().size(), 272u);
  const auto* emb = f->find("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::Q8_0);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{49152, 576}));
  // Every tensor of a real file is viewable and dequantises to finite values.
  for (const auto& info : f->tensors()) {
    const Tensor t = f->tensor(info.name);
    std::vector<float> row(static_cast<size_t>(t.size(-1)));
    cpu::dequantize_row(t.dtype(), t.raw(), row.data(), t.size(-1));
    for (float x : row) ASSERT_TRUE(std::isfinite(x)) << info.name;
  }
}

}  // namespace
}  // namespace vllm::test
