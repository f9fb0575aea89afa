#include "core/kv_cache_manager.h"

#include <algorithm>

#include "util/check.h"

namespace vllm::core {

bool KvBlocks::empty() const {
  for (const auto& g : block_ids)
    if (!g.empty()) return false;
  return true;
}

KvCacheManager::KvCacheManager(KvCacheConfig config)
    : config_((validate(config), std::move(config))),
      block_pool_(config_.num_blocks, config_.enable_prefix_caching) {
  for (const KvCacheGroupSpec& g : config_.groups)
    has_sliding_window_ |= g.policy == KvPolicy::kSlidingWindow;
}

void KvCacheManager::update_block_hashes(Request& request) const {
  const int bs = config_.block_size;
  const auto tokens = request.all_token_ids();
  auto& hashes = request.block_hashes;
  const uint64_t salt[1] = {request.cache_salt.empty() ? 0 : hash_string(request.cache_salt)};
  while (static_cast<int>(hashes.size() + 1) * bs <= request.num_tokens()) {
    const size_t i = hashes.size();
    std::optional<BlockHash> parent;
    if (i > 0) parent = hashes.back();
    std::span<const uint64_t> extra;
    if (i == 0 && !request.cache_salt.empty()) extra = salt;
    hashes.push_back(hash_block_tokens(parent, tokens.subspan(i * bs, bs), extra));
  }
}

std::vector<int> KvCacheManager::find_longest_cache_hit(int group,
                                                        std::span<const BlockHash> hashes,
                                                        int max_length) const {
  const KvCacheGroupSpec& spec = config_.groups[group];
  const int max_blocks = std::min<int>(max_length / config_.block_size, hashes.size());
  std::vector<int> hit;
  if (spec.policy != KvPolicy::kSlidingWindow) {
    // Hashes chain, so the first miss ends the prefix.
    for (int i = 0; i < max_blocks; ++i) {
      auto id = block_pool_.get_cached_block(hashes[i], group);
      if (!id) break;
      hit.push_back(*id);
    }
    return hit;
  }
  // Sliding window: only the last window - 1 tokens before the hit point must be cached; the
  // blocks before them become null blocks. Search from the right for enough contiguous hits.
  const int needed = cdiv(spec.sliding_window - 1, config_.block_size);
  hit.assign(max_blocks, kNullBlockId);
  int contiguous = 0;
  for (int i = max_blocks - 1; i >= 0; --i) {
    auto id = block_pool_.get_cached_block(hashes[i], group);
    if (!id) {
      contiguous = 0;
      continue;
    }
    hit[i] = *id;
    if (++contiguous >= needed) {
      hit.resize(i + contiguous);
      return hit;
    }
  }
  // No full window anywhere: a hit only when the cached run starts at block 0.
  hit.resize(contiguous);
  return hit;
}

std::pair<KvBlocks, int> KvCacheManager::get_computed_blocks(Request& request) {
  KvBlocks blocks;
  blocks.block_ids.resize(num_groups());
  if (!config_.enable_prefix_caching) return {std::move(blocks), 0};
  update_block_hashes(request);
  if (request.skip_reading_prefix_cache) return {std::move(blocks), 0};
  // Keep the last token to compute: its logits are needed.
  const int max_length = request.num_tokens() - 1;
  // Every group must hit the same length; shorten until they agree.
  int hit_length = max_length;
  for (bool stable = false; !stable;) {
    stable = true;
    for (int g = 0; g < num_groups(); ++g) {
      blocks.block_ids[g] = find_longest_cache_hit(g, request.block_hashes, hit_length);
      const int len = static_cast<int>(blocks.block_ids[g].size()) * config_.block_size;
      if (len != hit_length) {
        stable = num_groups() == 1;
        hit_length = std::min(hit_length, len);
      }
    }
  }
  prefix_cache_queries_ += request.num_tokens();
  prefix_cache_hits_ += hit_length;
  return {std::move(blocks), hit_length};
}

void KvCacheManager::remove_skipped_blocks(RequestBlocks& rb, int num_computed_tokens) {
  for (int g = 0; g < num_groups(); ++g) {
    const KvCacheGroupSpec& spec = config_.groups[g];
    if (spec.policy != KvPolicy::kSlidingWindow) continue;
    const int first_useful_token = num_computed_tokens - spec.sliding_window + 1;
    if (first_useful_token <= 0) continue;
    auto& table = rb.blocks[g];
    const int first_useful_block =
        std::min<int>(first_useful_token / config_.block_size, table.size());
    int& num_null = rb.num_null_blocks[g];
    if (first_useful_block <= num_null) continue;
    // Blocks before num_null were nulled by earlier calls (or came null with a prefix hit).
    std::vector<int> removed;
    for (int i = first_useful_block - 1; i >= num_null; --i) {
      VLLM_CHECK(table[i] != kNullBlockId, "null block inside the live part of a table");
      removed.push_back(table[i]);
      table[i] = kNullBlockId;
    }
    num_null = first_useful_block;
    block_pool_.free_blocks(removed);
  }
}

int KvCacheManager::num_blocks_to_allocate(const RequestBlocks* rb, int group, int num_tokens,
                                           std::span<const int> new_computed) const {
  const int have = rb ? static_cast<int>(rb->blocks[group].size()) : 0;
  int n = cdiv(num_tokens, config_.block_size) - have - static_cast<int>(new_computed.size());
  // A hit on a free (evictable) block takes it out of the free queue, so it counts too.
  for (int id : new_computed)
    if (id != kNullBlockId && block_pool_.ref_cnt(id) == 0) ++n;
  return std::max(n, 0);
}

std::optional<KvBlocks> KvCacheManager::allocate_slots(Request& request, int num_new_tokens,
                                                       int num_new_computed_tokens,
                                                       const KvBlocks& new_computed_blocks) {
  VLLM_CHECK(num_new_tokens > 0, "num_new_tokens must be positive, got ", num_new_tokens);
  const bool has_hit = !new_computed_blocks.block_ids.empty();
  VLLM_CHECK(!has_hit || static_cast<int>(new_computed_blocks.block_ids.size()) == num_groups(),
             "computed blocks for ", new_computed_blocks.block_ids.size(), " groups, expected ",
             num_groups());
  auto computed = [&](int g) {
    return has_hit ? std::span<const int>(new_computed_blocks.block_ids[g])
                   : std::span<const int>();
  };
  auto it = req_to_blocks_.find(request.request_id());
  RequestBlocks* rb = it == req_to_blocks_.end() ? nullptr : &it->second;
  VLLM_CHECK(!rb || !has_hit || new_computed_blocks.empty(), "request ",
             request.request_id(), " already has blocks and cannot take a prefix hit");
  // Blocks that slid out of the window go back first, so they count as free below.
  if (rb) remove_skipped_blocks(*rb, request.num_computed_tokens);

  const int num_computed_tokens = request.num_computed_tokens + num_new_computed_tokens;
  const int num_tokens_need_slot = num_computed_tokens + num_new_tokens;
  int needed = 0;
  for (int g = 0; g < num_groups(); ++g)
    needed += num_blocks_to_allocate(rb, g, num_tokens_need_slot, computed(g));
  if (needed > block_pool_.get_num_free_blocks()) return std::nullopt;

  if (!rb) {
    rb = &req_to_blocks_[request.request_id()];
    rb->blocks.resize(num_groups());
    rb->num_cached_blocks.assign(num_groups(), 0);
    rb->num_null_blocks.assign(num_groups(), 0);
  }
  KvBlocks out;
  out.block_ids.resize(num_groups());
  for (int g = 0; g < num_groups(); ++g) {
    auto hit = computed(g);
    if (!hit.empty()) {
      VLLM_CHECK(config_.enable_prefix_caching, "prefix hit with prefix caching disabled");
      block_pool_.touch(hit);
      rb->blocks[g].assign(hit.begin(), hit.end());
      rb->num_cached_blocks[g] = static_cast<int>(hit.size());
      // A sliding-window hit starts with nulls where the window does not reach.
      rb->num_null_blocks[g] = static_cast<int>(
          std::find_if(hit.begin(), hit.end(), [](int id) { return id != kNullBlockId; }) -
          hit.begin());
    }
    const int n = cdiv(num_tokens_need_slot, config_.block_size) -
                  static_cast<int>(rb->blocks[g].size());
    if (n > 0) {
      out.block_ids[g] = block_pool_.get_new_blocks(n);
      rb->blocks[g].insert(rb->blocks[g].end(), out.block_ids[g].begin(), out.block_ids[g].end());
    }
  }
  if (config_.enable_prefix_caching)
    cache_blocks(request, std::min(num_tokens_need_slot, request.num_tokens()));
  return out;
}

void KvCacheManager::cache_blocks(Request& request, int num_tokens) {
  if (!config_.enable_prefix_caching) return;
  auto it = req_to_blocks_.find(request.request_id());
  VLLM_CHECK(it != req_to_blocks_.end(), "request ", request.request_id(), " has no blocks");
  RequestBlocks& rb = it->second;
  update_block_hashes(request);
  const int num_full = std::min<int>(num_tokens / config_.block_size, request.block_hashes.size());
  for (int g = 0; g < num_groups(); ++g) {
    const int from = rb.num_cached_blocks[g];
    if (num_full <= from) continue;
    VLLM_CHECK(num_full <= static_cast<int>(rb.blocks[g].size()), "caching ", num_full,
               " blocks but only ", rb.blocks[g].size(), " allocated");
    block_pool_.cache_full_blocks(
        std::span<const int>(rb.blocks[g]).subspan(from, num_full - from),
        std::span<const BlockHash>(request.block_hashes).subspan(from, num_full - from), g);
    rb.num_cached_blocks[g] = num_full;
  }
}

void KvCacheManager::uncache_blocks(const Request& request, int num_tokens) {
  auto it = req_to_blocks_.find(request.request_id());
  if (it == req_to_blocks_.end()) return;
  RequestBlocks& rb = it->second;
  const int keep = num_tokens / config_.block_size;
  for (int g = 0; g < num_groups(); ++g) {
    for (int i = keep; i < rb.num_cached_blocks[g]; ++i) block_pool_.uncache_block(rb.blocks[g][i]);
    rb.num_cached_blocks[g] = std::min(rb.num_cached_blocks[g], keep);
  }
}

void KvCacheManager::free(const std::string& request_id) {
  auto it = req_to_blocks_.find(request_id);
  if (it == req_to_blocks_.end()) return;
  for (auto& table : it->second.blocks) {
    std::reverse(table.begin(), table.end());
    block_pool_.free_blocks(table);
  }
  req_to_blocks_.erase(it);
}

std::vector<std::vector<int>> KvCacheManager::get_block_ids(const std::string& request_id) const {
  auto it = req_to_blocks_.find(request_id);
  if (it == req_to_blocks_.end()) return std::vector<std::vector<int>>(num_groups());
  return it->second.blocks;
}

std::span<const int> KvCacheManager::num_null_blocks(const std::string& request_id) const {
  auto it = req_to_blocks_.find(request_id);
  if (it == req_to_blocks_.end()) return {};
  return it->second.num_null_blocks;
}

std::vector<int64_t> compute_slot_mapping(std::span<const int> block_table, int start, int n,
                                          int block_size) {
  std::vector<int64_t> slots(n);
  for (int i = 0; i < n; ++i) {
    const int pos = start + i;
    const int block = pos / block_size;
    VLLM_CHECK(block < static_cast<int>(block_table.size()), "position ", pos,
               " past the block table (", block_table.size(), " blocks)");
    slots[i] = static_cast<int64_t>(block_table[block]) * block_size + pos % block_size;
  }
  return slots;
}

}  // namespace vllm::core
