#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace vllm {
namespace {

constexpr float kNegInf = -INFINITY;

// max and log(sum(exp(x - max))) of a row, in double for the sum.
std::pair<float, double> log_sum_exp(std::span<const float> x) {
  const float mx = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float v : x) sum += std::exp(double(v) - mx);
  return {mx, std::log(sum)};
}

void apply_penalties(std::span<float> logits, const SamplingParams& p,
                     const std::unordered_map<int32_t, int>& counts,
                     const std::vector<int32_t>& prompt) {
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      float& l = logits[t];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    std::vector<int32_t> seen = prompt;
    for (const auto& [t, c] : counts)
      if (!std::binary_search(prompt.begin(), prompt.end(), t)) seen.push_back(t);
    for (int32_t t : seen) penalise(t);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    for (const auto& [t, c] : counts) logits[t] -= p.frequency_penalty * c + p.presence_penalty;
}

void apply_bad_words(std::span<float> logits, const SamplingParams& p,
                     const std::vector<int32_t>& output) {
  for (const auto& word : p.bad_words_ids) {
    if (word.empty()) continue;
    const size_t prefix = word.size() - 1;
    if (prefix > output.size()) continue;
    if (std::equal(word.begin(), word.end() - 1, output.end() - static_cast<ptrdiff_t>(prefix)))
      logits[word.back()] = kNegInf;
  }
}

// Disallowed tokens to -inf; when that leaves nothing finite, the first allowed token.
void apply_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  const size_t n = logits.size();
  bool any = false;
  int32_t first = -1;
  for (size_t t = 0; t < n; ++t) {
    const bool ok = (t >> 5) < mask.size() && ((mask[t >> 5] >> (t & 31)) & 1);
    if (!ok) {
      logits[t] = kNegInf;
    } else {
      if (first < 0) first = static_cast<int32_t>(t);
      any |= logits[t] > kNegInf;
    }
  }
  if (!any && first >= 0) logits[first] = 0.0f;
}

}  // namespace

SamplerState::SamplerState(const SamplingParams& params, std::span<const int32_t> prompt,
                           uint64_t seed)
    : rng_(params.seed.value_or(seed)), prompt_(prompt.begin(), prompt.end()) {
  std::sort(prompt_.begin(), prompt_.end());
  prompt_.erase(std::unique(prompt_.begin(), prompt_.end()), prompt_.end());
}

void SamplerState::append(int32_t token) {
  output_.push_back(token);
  ++output_counts_[token];
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TokenLogprob logprob_of(std::span<const float> logits, int32_t token) {
  const auto [mx, lse] = log_sum_exp(logits);
  int rank = 1;
  for (float v : logits) rank += v > logits[token];
  return {token, static_cast<float>(double(logits[token]) - mx - lse), rank};
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k) {
  k = std::min<int>(k, static_cast<int>(logits.size()));
  if (k <= 0) return {};
  const auto [mx, lse] = log_sum_exp(logits);
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (int i = 0; i < k; ++i)
    out.push_back({idx[i], static_cast<float>(double(logits[idx[i]]) - mx - lse), i + 1});
  return out;
}

SampleResult sample(std::span<float> logits, const SamplingParams& p, SamplerState& st,
                    std::span<const int32_t> eos_ids, std::span<const uint32_t> allowed_mask) {
  SampleResult res;
  std::vector<float> raw;
  if (p.logprobs) raw.assign(logits.begin(), logits.end());

  if (!p.allowed_token_ids.empty()) {
    std::vector<float> kept(p.allowed_token_ids.size());
    for (size_t i = 0; i < kept.size(); ++i) kept[i] = logits[p.allowed_token_ids[i]];
    std::fill(logits.begin(), logits.end(), kNegInf);
    for (size_t i = 0; i < kept.size(); ++i) logits[p.allowed_token_ids[i]] = kept[i];
  }
  for (const auto& [t, bias] : p.logit_bias) logits[t] += bias;
  apply_bad_words(logits, p, st.output_);
  if (static_cast<int>(st.output_.size()) < p.min_tokens) {
    for (int32_t t : eos_ids) logits[t] = kNegInf;
    for (int32_t t : p.stop_token_ids) logits[t] = kNegInf;
  }
  apply_penalties(logits, p, st.output_counts_, st.prompt_);
  if (!allowed_mask.empty()) apply_mask(logits, allowed_mask);

  if (p.greedy()) {
    res.token = argmax(logits);
  } else {
    const int n = static_cast<int>(logits.size());
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    const int k = p.top_k > 0 ? std::min(p.top_k, n) : n;
    if (k < n || p.top_p < 1.0f) {
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
      idx.resize(k);
    }
    const float mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> prob(idx.size());
    double sum = 0;
    for (size_t i = 0; i < idx.size(); ++i)
      sum += prob[i] = std::exp(double(logits[idx[i]] - mx) / p.temperature);
    for (double& x : prob) x /= sum;
    size_t keep = idx.size();
    if (p.top_p < 1.0f) {  // idx is sorted here
      double cum = 0;
      for (size_t i = 0; i < idx.size(); ++i) {
        cum += prob[i];
        if (cum >= p.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (p.min_p > 0.0f) {
      const double top = *std::max_element(prob.begin(), prob.begin() + keep);
      for (size_t i = 0; i < keep; ++i)
        if (prob[i] < p.min_p * top) prob[i] = 0;
    }
    const double total = std::accumulate(prob.begin(), prob.begin() + keep, 0.0);
    double r = std::uniform_real_distribution<double>(0.0, total)(st.rng_);
    res.token = idx[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      if (prob[i] == 0) continue;
      r -= prob[i];
      if (r <= 0) {
        res.token = idx[i];
        break;
      }
    }
  }
  if (p.logprobs) {
    res.chosen = logprob_of(raw, res.token);
    res.top = top_logprobs(raw, *p.logprobs);
  }
  st.append(res.token);
  return res;
}

}  // namespace vllm
