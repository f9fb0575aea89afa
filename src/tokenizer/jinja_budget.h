// The work budget of the render running on this thread. The evaluator installs it for one
// render; operators, builtins and value constructors charge it without an Evaluator at hand,
// and charging is a no-op on a thread that is not rendering.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/render_limits.h"

namespace vllm::jinja {

// Errors raised for an exceeded limit have this TemplateError kind (kRenderLimitError).
inline constexpr const char* kLimitErrorKind = "RenderLimitError";
inline constexpr uint64_t kBytesPerStep = 16;  // copying this many bytes costs one step

class Budget {
 public:
  explicit Budget(const RenderLimits& limits);
  ~Budget();  // uninstalls itself
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  // `n` units of interpreter work; every few hundred the limits, clock and cancel flag are read.
  void step(uint64_t n = 1) {
    steps_ += n;
    if (steps_ >= next_poll_) poll();
  }
  // Something of `total` bytes exists or is about to: refused past the size cap; `added`
  // bytes of it are new work.
  void grow(uint64_t total, uint64_t added);
  uint64_t steps() const { return steps_; }

 private:
  void poll();

  const RenderLimits& limits_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t steps_ = 0;
  uint64_t next_poll_ = 0;
  Budget* outer_;  // a render nested in a render (never expected) restores it
};

Budget* active_budget();

// Budget::step / grow of the active budget, or nothing outside a render.
inline void charge_steps(uint64_t n) {
  if (Budget* b = active_budget()) b->step(n);
}
inline void charge_bytes(uint64_t total, uint64_t added) {
  if (Budget* b = active_budget()) b->grow(total, added);
}
// A new string, list or dict of `total` bytes about to be built.
inline void reserve_bytes(uint64_t total) { charge_bytes(total, total); }
// out += piece, within the size cap.
inline void append_bounded(std::string& out, std::string_view piece) {
  charge_bytes(out.size() + piece.size(), piece.size());
  out += piece;
}
// A copy of `items` values holding `bytes` in all (work only, no size cap).
inline void charge_copy(uint64_t items, uint64_t bytes) {
  charge_steps(items + bytes / kBytesPerStep);
}

}  // namespace vllm::jinja
