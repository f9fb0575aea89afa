// Bounds on one chat template render: every render runs under a step budget, a size cap and a
// wall-time budget, and may be cancelled, so no template or request data can run unbounded.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace vllm {

struct RenderLimits {
  // Interpreter steps: one per statement, expression, loop iteration and list item built,
  // plus one per 16 bytes of string built, so copying in loops counts as work too.
  uint64_t max_steps = 10'000'000;
  // The rendered text and any one string or list built on the way (list items counted with
  // the bytes of their strings).
  size_t max_output_bytes = size_t(16) << 20;
  std::chrono::milliseconds max_time{1000};
  // Polled with the clock; returning true ends the render with a "cancelled" error.
  std::function<bool()> cancelled;
};

// What one render used, against RenderLimits.
struct RenderStats {
  uint64_t steps = 0;
  size_t output_bytes = 0;
  std::chrono::microseconds elapsed{0};
};

}  // namespace vllm
