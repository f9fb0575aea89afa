// Random requests for the fuzz tests (scheduler, input batch): a prefix of one of a few shared
// prompts most of the time (so the prefix cache hits), then tokens from {1..4}; EOS is 0.
#pragma once
#include <string>
#include <vector>

#include "core/request.h"

namespace vllm::core::fuzz {

// uni(lo, hi): a uniform int in [lo, hi] from the test's generator. salted: one in six gets a
// cache salt (that draw is made only then, so unsalted tests keep their sequences).
template <typename Uni>
Request random_request(Uni& uni, const std::string& id, int max_tokens_hi, bool salted) {
  static const std::vector<std::vector<int>> prefixes = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 3, 3, 3, 3, 3, 3, 3}, {9, 8, 7, 6, 5}};
  std::vector<int> prompt;
  if (uni(0, 3) > 0) {
    const auto& p = prefixes[uni(0, 2)];
    prompt.assign(p.begin(), p.begin() + uni(1, static_cast<int>(p.size())));
  }
  for (int n = uni(prompt.empty() ? 1 : 0, 12); n > 0; --n) prompt.push_back(uni(1, 4));
  Request r(id, prompt);
  r.max_tokens = uni(1, max_tokens_hi);
  r.eos_token_ids = {0};
  r.priority = uni(0, 3);
  if (salted && uni(0, 5) == 0) r.cache_salt = "s";
  return r;
}

}  // namespace vllm::core::fuzz
