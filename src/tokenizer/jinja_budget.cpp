#include "tokenizer/jinja_budget.h"

#include <algorithm>
#include <string>

#include "tokenizer/jinja_error.h"

namespace vllm::jinja {
namespace {

thread_local Budget* t_active = nullptr;
constexpr uint64_t kPollEvery = 256;  // steps between reads of the clock and cancel flag

}  // namespace

Budget* active_budget() { return t_active; }

Budget::Budget(const RenderLimits& limits)
    : limits_(limits), deadline_(std::chrono::steady_clock::now() + limits.max_time),
      outer_(t_active) {
  next_poll_ = std::min(kPollEvery, limits_.max_steps + 1);
  t_active = this;
}

Budget::~Budget() { t_active = outer_; }

void Budget::grow(uint64_t total, uint64_t added) {
  if (total > limits_.max_output_bytes) {
    raise(kLimitErrorKind, "chat template rendering exceeded the output size limit (" +
                               std::to_string(limits_.max_output_bytes) + " bytes)");
  }
  step(added / kBytesPerStep);
}

void Budget::poll() {
  if (steps_ > limits_.max_steps) {
    raise(kLimitErrorKind, "chat template rendering exceeded the step limit (" +
                               std::to_string(limits_.max_steps) + " steps)");
  }
  if (std::chrono::steady_clock::now() > deadline_) {
    raise(kLimitErrorKind, "chat template rendering exceeded the time limit (" +
                               std::to_string(limits_.max_time.count()) + " ms)");
  }
  if (limits_.cancelled && limits_.cancelled()) {
    raise(kLimitErrorKind, "chat template rendering was cancelled");
  }
  next_poll_ = std::min(steps_ + kPollEvery, limits_.max_steps + 1);
}

}  // namespace vllm::jinja
