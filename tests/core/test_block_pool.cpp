// BlockPool and prefix hashing: exact block ids, eviction order (LRU, tail of a sequence
// first), touch/free ref counting, reset, and the chained 128-bit block hash.
#include <gtest/gtest.h>

#include <set>

#include "core/block_hash.h"
#include "core/block_pool.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::core;

namespace {

std::vector<int> iota(int from, int to) {
  std::vector<int> v;
  for (int i = from; i <= to; ++i) v.push_back(i);
  return v;
}

BlockHash h(int x) { return hash_block_tokens(std::nullopt, std::vector<int>{x, x, x, x}); }

}  // namespace

TEST(BlockPool, NullBlockIsReservedAndAllocationPopsTheHead) {
  BlockPool pool(6, true);
  EXPECT_EQ(pool.num_usable_blocks(), 5);
  EXPECT_EQ(pool.get_num_free_blocks(), 5);
  EXPECT_EQ(pool.free_block_ids(), iota(1, 5));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.get_new_blocks(2), (std::vector<int>{1, 2}));
  EXPECT_EQ(pool.ref_cnt(1), 1);
  EXPECT_EQ(pool.get_num_free_blocks(), 3);
  EXPECT_DOUBLE_EQ(pool.usage(), 2.0 / 5.0);
  EXPECT_THROW(pool.get_new_blocks(4), Error);
  EXPECT_EQ(pool.num_allocated(), 2);
}

TEST(BlockPool, FreedBlocksGoToTheTailInTheGivenOrder) {
  BlockPool pool(6, true);
  auto a = pool.get_new_blocks(3);  // 1 2 3
  // A request frees its blocks reversed so its tail block is evicted first.
  std::vector<int> rev(a.rbegin(), a.rend());
  pool.free_blocks(rev);
  EXPECT_EQ(pool.free_block_ids(), (std::vector<int>{4, 5, 3, 2, 1}));
  EXPECT_EQ(pool.get_new_blocks(3), (std::vector<int>{4, 5, 3}));
  EXPECT_THROW(pool.free_blocks(std::vector<int>{4, 4}), Error);  // double free
}

TEST(BlockPool, NullBlockIsNeverFreedOrQueued) {
  BlockPool pool(4, true);
  pool.free_blocks(std::vector<int>{kNullBlockId});
  pool.touch(std::vector<int>{kNullBlockId});
  EXPECT_EQ(pool.free_block_ids(), (std::vector<int>{1, 2, 3}));
}

TEST(BlockPool, CachedBlocksSurviveFreeAndAreEvictedOnReuse) {
  BlockPool pool(5, true);
  auto b = pool.get_new_blocks(2);  // 1 2
  pool.cache_full_blocks(b, std::vector<BlockHash>{h(1), h(2)}, 0);
  EXPECT_EQ(pool.get_cached_block(h(1), 0), 1);
  EXPECT_EQ(pool.get_cached_block(h(1), 1), std::nullopt);  // another group
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  pool.free_blocks(std::vector<int>{2, 1});
  // Still a cache hit while it waits in the free queue.
  EXPECT_EQ(pool.get_cached_block(h(2), 0), 2);
  EXPECT_EQ(pool.free_block_ids(), (std::vector<int>{3, 4, 2, 1}));
  // touch() takes a hit out of the free queue.
  pool.touch(std::vector<int>{1});
  EXPECT_EQ(pool.ref_cnt(1), 1);
  EXPECT_EQ(pool.free_block_ids(), (std::vector<int>{3, 4, 2}));
  // Reusing block 2 evicts its hash.
  EXPECT_EQ(pool.get_new_blocks(3), (std::vector<int>{3, 4, 2}));
  EXPECT_EQ(pool.get_cached_block(h(2), 0), std::nullopt);
  EXPECT_FALSE(pool.block_hash(2).has_value());
  EXPECT_EQ(pool.num_evicted(), 1);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
}

TEST(BlockPool, DuplicateHashesKeepTheFirstBlockForLookups) {
  BlockPool pool(4, true);
  auto b = pool.get_new_blocks(2);
  pool.cache_full_blocks(std::vector<int>{b[0]}, std::vector<BlockHash>{h(7)}, 0);
  pool.cache_full_blocks(std::vector<int>{b[1]}, std::vector<BlockHash>{h(7)}, 0);
  EXPECT_EQ(pool.get_cached_block(h(7), 0), 1);
  pool.free_blocks(std::vector<int>{1});
  pool.get_new_blocks(2);  // 3, then 1 (evicted)
  EXPECT_EQ(pool.get_cached_block(h(7), 0), 2);
}

TEST(BlockPool, CachingDisabledCachesNothing) {
  BlockPool pool(4, false);
  auto b = pool.get_new_blocks(1);
  pool.cache_full_blocks(b, std::vector<BlockHash>{h(1)}, 0);
  EXPECT_EQ(pool.get_cached_block(h(1), 0), std::nullopt);
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenIdle) {
  BlockPool pool(4, true);
  auto b = pool.get_new_blocks(1);
  pool.cache_full_blocks(b, std::vector<BlockHash>{h(1)}, 0);
  EXPECT_FALSE(pool.reset_prefix_cache());
  pool.free_blocks(b);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.get_cached_block(h(1), 0), std::nullopt);
  EXPECT_EQ(pool.free_block_ids(), (std::vector<int>{2, 3, 1}));
}

TEST(BlockHash, ChainsParentTokensAndExtraKeys) {
  const std::vector<int> t{1, 2, 3, 4};
  const BlockHash a = hash_block_tokens(std::nullopt, t);
  EXPECT_EQ(a, hash_block_tokens(std::nullopt, t));
  EXPECT_NE(a, hash_block_tokens(a, t));
  EXPECT_NE(a, hash_block_tokens(std::nullopt, std::vector<int>{1, 2, 3, 5}));
  EXPECT_NE(a, hash_block_tokens(std::nullopt, std::vector<int>{4, 3, 2, 1}));
  const uint64_t salt[1] = {hash_string(std::string_view("salt"))};
  EXPECT_NE(a, hash_block_tokens(std::nullopt, t, salt));
  EXPECT_NE(a.hi, a.lo);

  const std::vector<int> seq{1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto hashes = hash_token_blocks(seq, 4);
  ASSERT_EQ(hashes.size(), 2u);  // only full blocks
  EXPECT_EQ(hashes[0], a);
  EXPECT_EQ(hashes[1], hash_block_tokens(a, std::vector<int>{5, 6, 7, 8}));
}

TEST(BlockHash, NoCollisionsOverManySmallBlocks) {
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (int a = 0; a < 64; ++a)
    for (int b = 0; b < 64; ++b)
      for (int c = 0; c < 16; ++c) {
        BlockHash x = hash_block_tokens(std::nullopt, std::vector<int>{a, b, c});
        EXPECT_TRUE(seen.insert({x.hi, x.lo}).second);
      }
}
