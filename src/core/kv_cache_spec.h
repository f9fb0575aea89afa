// KV cache layout as the bookkeeping sees it: block size, block count and one spec per KV
// cache group (layers sharing a block table), plus the KV capacity arithmetic.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vllm::core {

// Blocks of size b that hold a tokens (a >= 0, b > 0).
inline int cdiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Which blocks a group keeps (the allocation policy), whatever is stored in them.
enum class KvPolicy {
  kFull,           // every token's KV is kept
  kSlidingWindow,  // only the last `sliding_window` tokens are attended to
  // Room here for chunked-local attention and recurrent state.
};

// How one layer's cache lays out a token (the page layout), whatever the policy: K and V
// heads for attention, one latent row for MLA. Rows may be stored wider than they are read
// (padded for alignment); only row_width of each padded_row_width elements holds data.
struct KvPageLayout {
  int64_t bytes_per_token = 0;  // per layer, padding included
  int row_width = 0;            // elements read per row (0: not described)
  int padded_row_width = 0;     // elements stored per row (>= row_width)
};

struct KvCacheGroupSpec {
  KvPolicy policy = KvPolicy::kFull;
  int sliding_window = 0;  // tokens; kSlidingWindow only
  int num_layers = 1;      // layers in this group
  KvPageLayout layout;
};

struct KvCacheConfig {
  int block_size = 16;  // tokens per block, the same for every group
  int num_blocks = 0;   // including the null block 0
  bool enable_prefix_caching = true;
  std::vector<KvCacheGroupSpec> groups{KvCacheGroupSpec{}};
};

// Checks block_size, num_blocks and the group specs; throws vllm::Error naming the field.
void validate(const KvCacheConfig& config);

// Bytes behind one block id. Groups share one block pool, and layer i of every group shares a
// buffer (vLLM's hybrid layout), so a block costs block_size * max over groups of
// (num_layers * bytes_per_token).
int64_t kv_bytes_per_block(const KvCacheConfig& config);

// Blocks that fit in `budget_bytes`, for `bytes_per_token` summed over the layers of a slot.
int num_blocks_for_budget(int64_t budget_bytes, int64_t bytes_per_token, int block_size);

// The most blocks one request of `num_tokens` tokens holds at once, over all groups; a
// sliding-window group holds at most the window plus one step's tokens.
int max_blocks_per_request(const KvCacheConfig& config, int num_tokens,
                           int max_num_batched_tokens);

struct KvCapacity {
  int64_t num_tokens = 0;        // tokens the cache holds per group (vLLM's "KV cache size")
  double max_concurrency = 0.0;  // requests of max_model_len tokens that fit at once
  std::string summary;  // "KV cache size: N tokens; maximum concurrency for L tokens per
                        // request: X"
};

// Capacity of `config`; throws vllm::Error when one request of max_model_len tokens does not
// fit, giving the cache size in tokens and the largest max_model_len that would.
KvCapacity check_kv_capacity(const KvCacheConfig& config, int max_model_len,
                             int max_num_batched_tokens);

}  // namespace vllm::core
