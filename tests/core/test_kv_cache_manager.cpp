// KvCacheManager: prefix hits with exact block ids, partial blocks never cached, eviction order,
// sliding-window release and hits, hybrid groups, counters and the KV capacity arithmetic.
#include <gtest/gtest.h>

#include "core/kv_cache_manager.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::core;

namespace {

using Ids = std::vector<int>;
using Tables = std::vector<std::vector<int>>;

std::vector<int> repeat(int value, int n) { return std::vector<int>(n, value); }

std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

KvCacheConfig full_config(int block_size, int num_blocks, bool caching = true) {
  KvCacheConfig c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.enable_prefix_caching = caching;
  return c;
}

KvCacheGroupSpec sliding(int window) {
  KvCacheGroupSpec s;
  s.policy = KvPolicy::kSlidingWindow;
  s.sliding_window = window;
  return s;
}

// What the scheduler does to admit a waiting request: look up, then allocate the rest.
std::optional<KvBlocks> admit(KvCacheManager& m, Request& r, int* hit_tokens = nullptr) {
  auto [hit, n] = m.get_computed_blocks(r);
  if (hit_tokens) *hit_tokens = n;
  auto blocks = m.allocate_slots(r, r.num_tokens() - n, n, hit);
  if (blocks) r.num_computed_tokens = r.num_tokens();
  return blocks;
}

// One decode step: append a sampled token and give it a slot.
std::optional<KvBlocks> decode(KvCacheManager& m, Request& r, int token) {
  r.append_output_token_id(token);
  auto blocks = m.allocate_slots(r, 1);
  if (blocks) r.num_computed_tokens = r.num_tokens();
  return blocks;
}

}  // namespace

// The walk-through of vLLM's test_prefill: block size 16, 10 usable blocks.
TEST(KvCacheManager, PrefixHitsAndEvictionOrder) {
  KvCacheManager m(full_config(16, 11));
  const auto common = cat(cat(repeat(0, 16), repeat(1, 16)), repeat(2, 16));

  Request r0("0", cat(common, repeat(3, 7)));  // 55 tokens: 3 full blocks + 7
  auto [hit0, n0] = m.get_computed_blocks(r0);
  EXPECT_TRUE(hit0.empty());
  EXPECT_EQ(n0, 0);
  EXPECT_EQ(r0.block_hashes.size(), 3u);
  auto b0 = m.allocate_slots(r0, 55, 0, hit0);
  ASSERT_TRUE(b0);
  EXPECT_EQ(b0->block_ids, (Tables{{1, 2, 3, 4}}));
  for (int id : {1, 2, 3}) EXPECT_TRUE(m.block_pool().block_hash(id).has_value()) << id;
  EXPECT_FALSE(m.block_pool().block_hash(4).has_value());  // partial block: not cached
  EXPECT_EQ(*m.block_pool().block_hash(1), r0.block_hashes[0]);

  // Hit while the original blocks are still in use.
  Request r1("1", cat(common, repeat(3, 5)));
  auto [hit1, n1] = m.get_computed_blocks(r1);
  EXPECT_EQ(hit1.block_ids, (Tables{{1, 2, 3}}));
  EXPECT_EQ(n1, 48);
  auto b1 = m.allocate_slots(r1, 5, 48, hit1);
  ASSERT_TRUE(b1);
  EXPECT_EQ(b1->block_ids, (Tables{{5}}));
  for (int id : {1, 2, 3}) EXPECT_EQ(m.block_pool().ref_cnt(id), 2);
  EXPECT_EQ(m.get_block_ids("1"), (Tables{{1, 2, 3, 5}}));
  EXPECT_EQ(m.block_pool().get_num_free_blocks(), 5);

  m.free("0");
  m.free("1");
  // Never-used blocks first, then each request's blocks tail first; shared blocks last.
  EXPECT_EQ(m.block_pool().free_block_ids(), (Ids{6, 7, 8, 9, 10, 4, 5, 3, 2, 1}));

  // Hit on blocks that are already free: they leave the free queue.
  Request r2("2", cat(common, repeat(3, 6)));
  auto [hit2, n2] = m.get_computed_blocks(r2);
  EXPECT_EQ(hit2.block_ids, (Tables{{1, 2, 3}}));
  EXPECT_EQ(n2, 48);
  auto b2 = m.allocate_slots(r2, 6, 48, hit2);
  ASSERT_TRUE(b2);
  EXPECT_EQ(b2->block_ids, (Tables{{6}}));
  EXPECT_EQ(m.block_pool().free_block_ids(), (Ids{7, 8, 9, 10, 4, 5}));
  m.free("2");

  // A miss that needs every block evicts in LRU order.
  Request r3("3", repeat(99, 160));
  auto [hit3, n3] = m.get_computed_blocks(r3);
  EXPECT_EQ(n3, 0);
  auto b3 = m.allocate_slots(r3, 160, 0, hit3);
  ASSERT_TRUE(b3);
  EXPECT_EQ(b3->block_ids, (Tables{{7, 8, 9, 10, 4, 5, 6, 3, 2, 1}}));
  EXPECT_EQ(m.block_pool().get_num_free_blocks(), 0);
  EXPECT_EQ(m.block_pool().get_cached_block(r0.block_hashes[0], 0), std::nullopt);
  EXPECT_EQ(m.block_pool().num_evicted(), 3);
  EXPECT_DOUBLE_EQ(m.usage(), 1.0);

  // Nothing left: allocation fails without side effects.
  Request r4("4", repeat(5, 3));
  EXPECT_FALSE(m.allocate_slots(r4, 3));
  EXPECT_EQ(m.get_block_ids("4"), (Tables{{}}));
  m.free("3");
  EXPECT_EQ(m.block_pool().get_num_free_blocks(), 10);
}

TEST(KvCacheManager, NeverHitsTheWholePromptAndNeverCachesPartialBlocks) {
  KvCacheManager m(full_config(16, 11));
  Request a("a", repeat(1, 32));
  ASSERT_TRUE(admit(m, a));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{1, 2}}));

  // Identical prompt: the last token is recomputed, so only block 1 hits.
  Request b("b", repeat(1, 32));
  int hit = -1;
  ASSERT_TRUE(admit(m, b, &hit));
  EXPECT_EQ(hit, 16);
  EXPECT_EQ(m.get_block_ids("b"), (Tables{{1, 3}}));

  // A 20-token prompt fills block 4 and 4 tokens of block 5; block 5 is not cached.
  Request c("c", repeat(2, 20));
  ASSERT_TRUE(admit(m, c));
  EXPECT_TRUE(m.block_pool().block_hash(4).has_value());
  EXPECT_FALSE(m.block_pool().block_hash(5).has_value());
  Request d("d", cat(repeat(2, 20), repeat(9, 30)));
  ASSERT_TRUE(admit(m, d, &hit));
  EXPECT_EQ(hit, 16);
  EXPECT_EQ(m.get_block_ids("d"), (Tables{{4, 6, 7, 8}}));
}

TEST(KvCacheManager, DecodeCachesABlockOnceItFills) {
  KvCacheManager m(full_config(4, 8));
  Request a("a", {1, 2, 3});
  ASSERT_TRUE(admit(m, a));
  EXPECT_FALSE(m.block_pool().block_hash(1).has_value());
  ASSERT_TRUE(decode(m, a, 4));  // token 4 completes block 1
  EXPECT_EQ(m.block_pool().block_hash(1), hash_block_tokens(std::nullopt, Ids{1, 2, 3, 4}));
  auto b = decode(m, a, 5);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->block_ids, (Tables{{2}}));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{1, 2}}));
  Request c("c", {1, 2, 3, 4, 5, 6});
  int hit = -1;
  ASSERT_TRUE(admit(m, c, &hit));
  EXPECT_EQ(hit, 4);
}

TEST(KvCacheManager, CacheSaltAndDisabledCachingPreventHits) {
  KvCacheManager m(full_config(4, 8));
  Request a("a", repeat(1, 9));
  ASSERT_TRUE(admit(m, a));
  Request b("b", repeat(1, 9));
  b.cache_salt = "tenant-2";
  int hit = -1;
  ASSERT_TRUE(admit(m, b, &hit));
  EXPECT_EQ(hit, 0);

  KvCacheManager off(full_config(4, 8, false));
  Request c("c", repeat(1, 9)), d("d", repeat(1, 9));
  ASSERT_TRUE(admit(off, c));
  ASSERT_TRUE(admit(off, d, &hit));
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(off.get_block_ids("d"), (Tables{{4, 5, 6}}));
  EXPECT_EQ(off.block_pool().num_cached_blocks(), 0);
}

TEST(KvCacheManager, CountsPrefixCacheQueriesAndHitsInTokens) {
  const auto prefix = repeat(7, 512);
  for (int bs : {16, 48}) {
    KvCacheManager m(full_config(bs, 64));
    Request a("a", cat(prefix, repeat(1, 10)));
    ASSERT_TRUE(admit(m, a));
    Request b("b", cat(prefix, repeat(2, 20)));
    int hit = -1;
    ASSERT_TRUE(admit(m, b, &hit));
    EXPECT_EQ(hit, 512 - 512 % bs) << bs;  // 512 for 16, 480 for 48
    EXPECT_EQ(m.prefix_cache_queries(), 522 + 532);
    EXPECT_EQ(m.prefix_cache_hits(), hit);
  }
}

TEST(KvCacheManager, SlidingWindowReleasesBlocksOutOfTheWindow) {
  KvCacheConfig c = full_config(4, 20);
  c.groups = {sliding(8)};
  KvCacheManager m(c);
  Request a("a", repeat(1, 20));
  ASSERT_TRUE(admit(m, a));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{1, 2, 3, 4, 5}}));
  // Computing token 20 attends to tokens 13..20: blocks 0..2 (tokens 0..11) are dropped,
  // freed latest first, and become null blocks in the block_table.
  auto b = decode(m, a, 2);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->block_ids, (Tables{{6}}));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{0, 0, 0, 4, 5, 6}}));
  EXPECT_EQ(m.block_pool().free_block_ids(),
            (Ids{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 3, 2, 1}));

  // A hit needs only the blocks inside the window before the hit point: [null x3, 4, 5].
  Request d("d", cat(repeat(1, 20), repeat(3, 5)));
  auto [hit, n] = m.get_computed_blocks(d);
  EXPECT_EQ(hit.block_ids, (Tables{{0, 0, 0, 4, 5}}));
  EXPECT_EQ(n, 20);
  auto bd = m.allocate_slots(d, 5, 20, hit);
  ASSERT_TRUE(bd);
  EXPECT_EQ(bd->block_ids, (Tables{{7, 8}}));
  EXPECT_EQ(m.block_pool().ref_cnt(4), 2);
  m.free("a");
  m.free("d");
  EXPECT_EQ(m.block_pool().get_num_free_blocks(), 19);
}

TEST(KvCacheManager, HybridGroupsAgreeOnOneHitLength) {
  KvCacheConfig c = full_config(4, 11);  // 10 usable blocks
  c.groups = {KvCacheGroupSpec{}, sliding(8)};
  KvCacheManager m(c);
  Request a("a", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  ASSERT_TRUE(admit(m, a));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{1, 2, 3}, {4, 5, 6}}));

  Request b("b", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 99});
  auto [hb, nb] = m.get_computed_blocks(b);
  EXPECT_EQ(hb.block_ids, (Tables{{1, 2, 3}, {0, 5, 6}}));
  EXPECT_EQ(nb, 12);

  // Decode "a" to 17 tokens: the sliding group drops blocks 4 and 5.
  ASSERT_TRUE(decode(m, a, 13));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{1, 2, 3, 7}, {0, 5, 6, 8}}));
  a.append_output_token_id(14);
  a.append_output_token_id(15);
  a.append_output_token_id(16);
  ASSERT_TRUE(m.allocate_slots(a, 3));
  a.num_computed_tokens = 16;
  ASSERT_TRUE(decode(m, a, 17));
  EXPECT_EQ(m.get_block_ids("a"), (Tables{{1, 2, 3, 7, 9}, {0, 0, 6, 8, 10}}));
  EXPECT_EQ(m.block_pool().free_block_ids(), (Ids{4, 5}));
  // A one-token request takes blocks 4 and 5, evicting the sliding group's first two blocks.
  Request y("y", {50});
  ASSERT_TRUE(admit(m, y));
  EXPECT_EQ(m.get_block_ids("y"), (Tables{{4}, {5}}));
  // Full attention still hits 12 tokens, but the sliding group has no window's worth of
  // blocks at any length <= 12, so the common hit is 0.
  Request b2("b2", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 99});
  auto [h2, n2] = m.get_computed_blocks(b2);
  EXPECT_EQ(n2, 0);
  EXPECT_EQ(h2.block_ids, (Tables{{}, {}}));
}

TEST(KvCacheManager, SlotMapping) {
  const Ids table{7, 3, 9};
  EXPECT_EQ(compute_slot_mapping(table, 3, 3, 4), (std::vector<int64_t>{31, 12, 13}));
  EXPECT_THROW(compute_slot_mapping(table, 11, 2, 4), Error);
}

TEST(KvCapacity, BlocksForBudgetAndMaxConcurrency) {
  // 32 layers x (K+V) x 8 kv heads x 128 x 2 bytes = 131072 bytes per token.
  const int64_t per_token = 32LL * 2 * 8 * 128 * 2;
  EXPECT_EQ(num_blocks_for_budget(1LL << 30, per_token, 16), 512);
  EXPECT_EQ(num_blocks_for_budget(0, per_token, 16), 0);

  KvCacheConfig c = full_config(16, 513);
  c.groups[0].num_layers = 32;
  c.groups[0].layout.bytes_per_token = 2 * 8 * 128 * 2;
  EXPECT_EQ(kv_bytes_per_block(c), per_token * 16);
  KvCapacity cap = check_kv_capacity(c, 4096, 2048);
  EXPECT_EQ(cap.num_tokens, 8192);
  EXPECT_DOUBLE_EQ(cap.max_concurrency, 2.0);
  EXPECT_EQ(cap.summary,
            "KV cache size: 8192 tokens; maximum concurrency for 4096 tokens per request: 2.00x");
  try {
    check_kv_capacity(c, 16384, 2048);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("KV cache size: 8192 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("max_model_len 16384"), std::string::npos) << msg;
    EXPECT_NE(msg.find("estimated maximum model length is 8192"), std::string::npos) << msg;
  }
}

TEST(KvCapacity, SlidingWindowHoldsOnlyTheWindow) {
  KvCacheConfig c = full_config(16, 1000);
  c.groups = {sliding(1024)};
  // cdiv(1023 + 2048, 16) + 1 blocks at most, however long the request.
  EXPECT_EQ(max_blocks_per_request(c, 32768, 2048), 193);
  EXPECT_EQ(max_blocks_per_request(c, 100, 2048), 7);
  c.groups.push_back(KvCacheGroupSpec{});
  EXPECT_EQ(max_blocks_per_request(c, 1600, 2048), 100 + 100);
  EXPECT_THROW(validate(KvCacheConfig{16, 1, true, {}}), Error);
}
