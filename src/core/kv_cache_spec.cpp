#include "core/kv_cache_spec.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "util/check.h"

namespace vllm::core {

void validate(const KvCacheConfig& config) {
  if (config.block_size <= 0)
    throw Error(detail::cat("KV cache block_size must be positive, got ", config.block_size));
  if (config.num_blocks < 2)
    throw Error(detail::cat("KV cache needs at least 2 blocks (one is the null block), got ",
                            config.num_blocks));
  if (config.groups.empty()) throw Error("KV cache config has no groups");
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const KvCacheGroupSpec& s = config.groups[g];
    if (s.policy == KvPolicy::kSlidingWindow && s.sliding_window <= 0)
      throw Error(detail::cat("KV cache group ", g, ": sliding_window must be positive, got ",
                              s.sliding_window));
    if (s.num_layers <= 0 || s.layout.bytes_per_token < 0)
      throw Error(detail::cat("KV cache group ", g, ": bad num_layers ", s.num_layers,
                              " or bytes_per_token ", s.layout.bytes_per_token));
    if (s.layout.padded_row_width < s.layout.row_width)
      throw Error(detail::cat("KV cache group ", g, ": padded_row_width ",
                              s.layout.padded_row_width, " is below the row width ",
                              s.layout.row_width));
  }
}

int64_t kv_bytes_per_block(const KvCacheConfig& config) {
  int64_t per_token = 0;
  for (const KvCacheGroupSpec& s : config.groups)
    per_token = std::max(per_token, s.num_layers * s.layout.bytes_per_token);
  return per_token * config.block_size;
}

int num_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_token, int block_size) {
  VLLM_CHECK(bytes_per_token > 0 && block_size > 0, "bytes_per_token ", bytes_per_token,
             ", block_size ", block_size);
  if (budget_bytes <= 0) return 0;
  const int64_t n = budget_bytes / (bytes_per_token * block_size);
  return static_cast<int>(std::min<int64_t>(n, std::numeric_limits<int>::max()));
}

int max_blocks_per_request(const KvCacheConfig& config, int num_tokens,
                           int max_num_batched_tokens) {
  const int bs = config.block_size;
  int total = 0;
  for (const KvCacheGroupSpec& s : config.groups) {
    int blocks = cdiv(num_tokens, bs);
    if (s.policy == KvPolicy::kSlidingWindow) {
      // The window may start mid-block, hence the extra block.
      const int64_t live = std::min<int64_t>(
          static_cast<int64_t>(s.sliding_window) - 1 + max_num_batched_tokens, num_tokens);
      blocks = std::min(blocks, cdiv(live, bs) + 1);
    }
    total += blocks;
  }
  return total;
}

KvCapacity check_kv_capacity(const KvCacheConfig& config, int max_model_len,
                             int max_num_batched_tokens) {
  validate(config);
  VLLM_CHECK(max_model_len > 0, "max_model_len ", max_model_len);
  const int usable = config.num_blocks - 1;
  const int num_groups = static_cast<int>(config.groups.size());
  KvCapacity cap;
  cap.num_tokens = static_cast<int64_t>(usable / num_groups) * config.block_size;
  const int needed = max_blocks_per_request(config, max_model_len, max_num_batched_tokens);
  if (needed > usable) {
    // Largest length whose blocks fit, by bisection (blocks grow with length).
    int lo = 0, hi = max_model_len;
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (max_blocks_per_request(config, mid, max_num_batched_tokens) <= usable) lo = mid;
      else hi = mid - 1;
    }
    throw Error(detail::cat(
        "KV cache size: ", cap.num_tokens, " tokens (", usable, " blocks of ", config.block_size,
        " tokens) cannot hold one request of max_model_len ", max_model_len, ", which needs ",
        needed, " blocks. The estimated maximum model length is ", lo,
        ". Give the KV cache more memory or lower max_model_len."));
  }
  cap.max_concurrency = static_cast<double>(usable) / needed;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "KV cache size: %lld tokens; maximum concurrency for %d tokens per request: "
                "%.2fx",
                static_cast<long long>(cap.num_tokens), max_model_len, cap.max_concurrency);
  cap.summary = buf;
  return cap;
}

}  // namespace vllm::core
