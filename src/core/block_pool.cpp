#include "core/block_pool.h"

#include <algorithm>

#include "util/check.h"

namespace vllm::core {

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : enable_caching_(enable_caching), blocks_(static_cast<size_t>(std::max(num_blocks, 0))) {
  VLLM_CHECK(num_blocks >= 2, "a BlockPool needs the null block plus at least one block, got ",
             num_blocks);
  for (int id = 1; id < num_blocks; ++id) queue_append(id);
}

void BlockPool::queue_append(int id) {
  Block& b = blocks_[id];
  b.prev = tail_;
  b.next = -1;
  if (tail_ >= 0) blocks_[tail_].next = id;
  else head_ = id;
  tail_ = id;
  ++num_free_;
}

void BlockPool::queue_remove(int id) {
  Block& b = blocks_[id];
  VLLM_CHECK(b.prev >= 0 || head_ == id, "block ", id, " is not in the free queue");
  if (b.prev >= 0) blocks_[b.prev].next = b.next;
  else head_ = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev;
  else tail_ = b.prev;
  b.prev = b.next = -1;
  --num_free_;
}

int BlockPool::queue_pop_front() {
  VLLM_CHECK(head_ >= 0, "free queue is empty");
  const int id = head_;
  queue_remove(id);
  return id;
}

void BlockPool::maybe_evict_cached_block(int id) {
  Block& b = blocks_[id];
  if (!b.hash) return;
  auto it = cached_block_hash_to_block_.find({*b.hash, b.group_id});
  VLLM_CHECK(it != cached_block_hash_to_block_.end(), "cached block ", id, " not in map");
  auto& ids = it->second;
  ids.erase(std::find(ids.begin(), ids.end(), id));
  if (ids.empty()) cached_block_hash_to_block_.erase(it);
  b.hash.reset();
  b.group_id = -1;
  --num_cached_;
  ++num_evicted_;
}

std::vector<int> BlockPool::get_new_blocks(int n) {
  VLLM_CHECK(n >= 0 && n <= num_free_, "cannot get ", n, " blocks, ", num_free_, " free");
  std::vector<int> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    const int id = queue_pop_front();
    maybe_evict_cached_block(id);
    VLLM_CHECK(blocks_[id].ref_cnt == 0, "free block ", id, " has ref_cnt ",
               blocks_[id].ref_cnt);
    blocks_[id].ref_cnt = 1;
    out.push_back(id);
  }
  num_allocated_ += n;
  return out;
}

std::optional<int> BlockPool::get_cached_block(const BlockHash& hash, int group_id) const {
  auto it = cached_block_hash_to_block_.find({hash, group_id});
  if (it == cached_block_hash_to_block_.end()) return std::nullopt;
  return it->second.front();
}

void BlockPool::cache_full_blocks(std::span<const int> block_ids,
                                  std::span<const BlockHash> hashes, int group_id) {
  VLLM_CHECK(block_ids.size() == hashes.size(), block_ids.size(), " blocks but ",
             hashes.size(), " hashes");
  if (!enable_caching_) return;
  for (size_t i = 0; i < block_ids.size(); ++i) {
    const int id = block_ids[i];
    if (id == kNullBlockId) continue;
    Block& b = blocks_.at(id);
    if (b.hash) {
      VLLM_CHECK(*b.hash == hashes[i] && b.group_id == group_id, "block ", id,
                 " is already cached under another hash");
      continue;
    }
    b.hash = hashes[i];
    b.group_id = group_id;
    cached_block_hash_to_block_[{hashes[i], group_id}].push_back(id);
    ++num_cached_;
  }
}

void BlockPool::touch(std::span<const int> block_ids) {
  for (int id : block_ids) {
    if (id == kNullBlockId) continue;
    Block& b = blocks_.at(id);
    if (b.ref_cnt == 0) queue_remove(id);
    ++b.ref_cnt;
  }
}

void BlockPool::free_blocks(std::span<const int> ordered_block_ids) {
  for (int id : ordered_block_ids) {
    if (id == kNullBlockId) continue;
    Block& b = blocks_.at(id);
    VLLM_CHECK(b.ref_cnt > 0, "double free of block ", id);
    if (--b.ref_cnt == 0) queue_append(id);
  }
}

void BlockPool::uncache_block(int block_id) {
  if (block_id == kNullBlockId) return;
  VLLM_CHECK(block_id > 0 && block_id < num_blocks(), "block id ", block_id);
  if (!blocks_[block_id].hash) return;
  maybe_evict_cached_block(block_id);
  --num_evicted_;  // not an eviction for the counters
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_usable_blocks()) return false;
  for (Block& b : blocks_) {
    b.hash.reset();
    b.group_id = -1;
  }
  cached_block_hash_to_block_.clear();
  num_cached_ = 0;
  return true;
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(num_usable_blocks());
}

std::vector<int> BlockPool::free_block_ids() const {
  std::vector<int> out;
  out.reserve(num_free_);
  for (int id = head_; id >= 0; id = blocks_[id].next) out.push_back(id);
  return out;
}

}  // namespace vllm::core
