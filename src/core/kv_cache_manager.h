// KvCacheManager: per-request block tables for every KV cache group over one BlockPool, prefix
// cache lookup and sliding-window release. Invariant: a request's block_table in each group
// covers its allocated slots, with kNullBlockId only where no KV is needed.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/block_pool.h"
#include "core/kv_cache_spec.h"
#include "core/request.h"

namespace vllm::core {

// Block ids per KV cache group, [num_groups][n]. Either a prefix-cache hit or newly
// allocated blocks; callers pass it back to the manager and otherwise only read ids.
struct KvBlocks {
  std::vector<std::vector<int>> block_ids;
  bool empty() const;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(KvCacheConfig config);

  // Longest prefix-cache hit for the request's tokens: the blocks and the number of tokens
  // they hold (a multiple of block_size). At least the last token is always left to compute,
  // so the hit never covers the whole request. Counts a query of num_tokens and its hits.
  std::pair<KvBlocks, int> get_computed_blocks(Request& request);

  // Gives the request slots for num_new_tokens more tokens after its num_computed_tokens plus
  // num_new_computed_tokens (the prefix hit in new_computed_blocks, only for a request without
  // blocks yet). Returns the newly allocated blocks, or nullopt when the pool is short (nothing
  // allocated; sliding-window blocks already out of the window are released either way): the
  // scheduler then preempts. Full blocks among the first
  // num_computed_tokens + num_new_computed_tokens + num_new_tokens tokens are cached.
  std::optional<KvBlocks> allocate_slots(Request& request, int num_new_tokens,
                                         int num_new_computed_tokens = 0,
                                         const KvBlocks& new_computed_blocks = {});

  // Caches the full blocks among the first num_tokens tokens (allocate_slots does this).
  void cache_blocks(Request& request, int num_tokens);

  // Forgets the cached hashes of the request's blocks past its first num_tokens tokens: blocks
  // are cached when allocated, so when a scheduled step is dropped (the request is preempted
  // in the step that scheduled it) their KV is never written and must not be hit.
  void uncache_blocks(const Request& request, int num_tokens);

  // Returns the request's blocks to the pool, tail blocks first so they are evicted first.
  // Unknown ids (aborted before any allocation) are ignored.
  void free(const std::string& request_id);

  // Block table per group; empty groups for an unknown request.
  std::vector<std::vector<int>> get_block_ids(const std::string& request_id) const;
  // Per group, how many leading entries of the request's block table are kNullBlockId: a
  // sliding-window group releases blocks behind the window front first, so its table is
  // always nulls then live blocks; other groups report 0. Empty for an unknown request.
  std::span<const int> num_null_blocks(const std::string& request_id) const;
  bool has_sliding_window() const { return has_sliding_window_; }

  bool reset_prefix_cache() { return block_pool_.reset_prefix_cache(); }
  double usage() const { return block_pool_.usage(); }
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }  // tokens
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }        // tokens

  const KvCacheConfig& config() const { return config_; }
  int block_size() const { return config_.block_size; }
  int num_groups() const { return static_cast<int>(config_.groups.size()); }
  const BlockPool& block_pool() const { return block_pool_; }

 private:
  struct RequestBlocks {
    std::vector<std::vector<int>> blocks;  // block_table per group
    std::vector<int> num_cached_blocks;    // per group: leading blocks already cached
    std::vector<int> num_null_blocks;      // per group: leading kNullBlockId entries
  };

  void update_block_hashes(Request& request) const;
  std::vector<int> find_longest_cache_hit(int group, std::span<const BlockHash> hashes,
                                          int max_length) const;
  void remove_skipped_blocks(RequestBlocks& rb, int num_computed_tokens);
  int num_blocks_to_allocate(const RequestBlocks* rb, int group, int num_tokens,
                             std::span<const int> new_computed) const;

  KvCacheConfig config_;
  BlockPool block_pool_;
  std::unordered_map<std::string, RequestBlocks> req_to_blocks_;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  bool has_sliding_window_ = false;
};

// slot_mapping for tokens [start, start + n): slot = block_table[pos / block_size] *
// block_size + pos % block_size. [n]
std::vector<int64_t> compute_slot_mapping(std::span<const int> block_table, int start, int n,
                                          int block_size);

}  // namespace vllm::core
