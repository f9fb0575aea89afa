// BlockPool: every KV block's ref_cnt and cached hash, plus the free queue in eviction order.
// Invariant: a block is in the free queue iff ref_cnt == 0 (block 0, the null block, never is);
// a block is in cached_block_hash_to_block iff it has a hash.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/block_hash.h"

namespace vllm::core {

// Block 0 is reserved as the null block: a placeholder in block tables for positions that need
// no KV (sliding-window blocks that fell out of the window). Its ref_cnt is not maintained and
// it is never allocated, freed or cached, so usable blocks are 1 .. num_blocks-1.
inline constexpr int kNullBlockId = 0;

// A cached block is looked up by its hash and its KV cache group: the same tokens in two
// groups (e.g. full and sliding-window layers) live in two different blocks.
struct BlockHashWithGroup {
  BlockHash hash;
  int group_id = 0;
  friend bool operator==(const BlockHashWithGroup&, const BlockHashWithGroup&) = default;
};

struct BlockHashWithGroupHasher {
  size_t operator()(const BlockHashWithGroup& k) const noexcept {
    return std::hash<BlockHash>{}(k.hash) ^ (static_cast<size_t>(k.group_id) * 0x9e3779b1u);
  }
};

class BlockPool {
 public:
  BlockPool(int num_blocks, bool enable_caching);

  // Pops `n` blocks from the head of the free queue (least recently freed first), evicting
  // their cached hashes; each comes back with ref_cnt 1. Needs n <= num_free_blocks().
  std::vector<int> get_new_blocks(int n);

  // The cached block for `hash` in `group_id`, or nullopt. Does not change ref counts.
  std::optional<int> get_cached_block(const BlockHash& hash, int group_id) const;

  // Marks full blocks as cached under their hashes (ids and hashes pair up one to one).
  // A block already cached, or a duplicate of a cached hash, is kept as it is: block tables
  // are append-only, so a duplicate is not swapped for the cached copy.
  void cache_full_blocks(std::span<const int> block_ids, std::span<const BlockHash> hashes,
                         int group_id);

  // Cache hit: ref_cnt++ and, for a block at ref_cnt 0, removal from the free queue.
  void touch(std::span<const int> block_ids);

  // ref_cnt-- for each block in order; blocks reaching 0 are appended to the free queue tail
  // in that order, so the first one given is the first evicted. Null blocks are skipped.
  void free_blocks(std::span<const int> ordered_block_ids);

  // Forgets one block's cached hash (its KV will not be written after all).
  void uncache_block(int block_id);

  // Drops every cached hash; refused (false) while any block is in use.
  bool reset_prefix_cache();

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_usable_blocks() const { return num_blocks() - 1; }
  int get_num_free_blocks() const { return num_free_; }
  // Fraction of usable blocks in use, 0.0 .. 1.0.
  double usage() const;

  int ref_cnt(int block_id) const { return blocks_.at(block_id).ref_cnt; }
  const std::optional<BlockHash>& block_hash(int block_id) const {
    return blocks_.at(block_id).hash;
  }
  // Free queue from head (next evicted) to tail, for tests and debugging.
  std::vector<int> free_block_ids() const;
  int num_cached_blocks() const { return static_cast<int>(num_cached_); }

  // Counters since construction.
  int64_t num_allocated() const { return num_allocated_; }
  int64_t num_evicted() const { return num_evicted_; }

 private:
  struct Block {
    int ref_cnt = 0;
    int group_id = -1;
    std::optional<BlockHash> hash;
    int prev = -1;  // free queue links; -1 when not in the queue
    int next = -1;
  };

  void queue_append(int id);
  void queue_remove(int id);
  int queue_pop_front();
  void maybe_evict_cached_block(int id);

  bool enable_caching_;
  std::vector<Block> blocks_;
  // Free queue as an intrusive doubly linked list; head_ and tail_ are -1 when empty.
  int head_ = -1;
  int tail_ = -1;
  int num_free_ = 0;
  // Several blocks may hold the same hash (a duplicate computed before the first was
  // cached); lookups return the first.
  std::unordered_map<BlockHashWithGroup, std::vector<int>, BlockHashWithGroupHasher>
      cached_block_hash_to_block_;
  size_t num_cached_ = 0;
  int64_t num_allocated_ = 0;
  int64_t num_evicted_ = 0;
};

}  // namespace vllm::core
