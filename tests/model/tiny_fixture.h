// Reading the tiny checkpoints' reference logits (fixtures/tiny, from transformers) and the
// error measure their bar is stated in.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace vllm::testing_tiny {

inline const std::string kDir = "fixtures/tiny/";
constexpr double kBar = 1e-4;  // max |logit diff| / max |logit|, from the fixture manifest

inline std::vector<float> read_f32(const std::string& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_TRUE(in.good()) << path;
  return v;
}

// Worst ratio over rows of max|ours - ref| / max|ref|.
inline double rel_error(const float* ours, const float* ref, int64_t rows, int64_t vocab) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      diff = std::max(diff, double(std::fabs(ours[r * vocab + i] - ref[r * vocab + i])));
      mag = std::max(mag, double(std::fabs(ref[r * vocab + i])));
    }
    worst = std::max(worst, diff / mag);
  }
  return worst;
}

}  // namespace vllm::testing_tiny
