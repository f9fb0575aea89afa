// Random requests for the fuzz tests (scheduler, input batch): a prefix of one of a few shared
// prompts most of the time (so the prefix cache hits), then tokens from {1..4}; EOS is 0.
#pragma once
#include <iterator>
#include <optional>
#include <set>
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

// The churn both fuzzers drive, one call each per step. maybe_add: one call in three adds a
// random request "q<next_id>" to the scheduler and to `live`. pick_abort: one call in twenty
// (none while `live` is empty) takes a live request out of `live` and returns it for the
// caller to abort.
template <typename Uni, typename Scheduler>
void maybe_add(Uni& uni, Scheduler& s, std::set<std::string>& live, int& next_id,
               int max_tokens_hi, bool salted) {
  if (uni(0, 2) != 0) return;
  const std::string id = "q" + std::to_string(next_id++);
  s.add_request(random_request(uni, id, max_tokens_hi, salted));
  live.insert(id);
}

template <typename Uni>
std::optional<std::string> pick_abort(Uni& uni, std::set<std::string>& live) {
  if (live.empty() || uni(0, 19) != 0) return std::nullopt;
  auto it = live.begin();
  std::advance(it, uni(0, static_cast<int>(live.size()) - 1));
  std::string id = *it;
  live.erase(it);
  return id;
}

}  // namespace vllm::core::fuzz
