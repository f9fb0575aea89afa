#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace vllm {

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int32_t sample_token(std::span<const float> logits, const SamplingOptions& o, std::mt19937_64& rng) {
  if (o.temperature <= 0.0f) return argmax(logits);
  const int n = static_cast<int>(logits.size());
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  const int k = o.top_k > 0 ? std::min(o.top_k, n) : n;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
  idx.resize(k);
  std::vector<double> p(k);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int i = 0; i < k; ++i) sum += p[i] = std::exp((logits[idx[i]] - mx) / o.temperature);
  for (double& x : p) x /= sum;
  int keep = k;
  if (o.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < k; ++i) {
      cum += p[i];
      if (cum >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (o.min_p > 0.0f)
    while (keep > 1 && p[keep - 1] < o.min_p * p[0]) --keep;
  const double total = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  double r = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (int i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace vllm
