#include "core/block_hash.h"

#include <vector>

#include "util/check.h"

namespace vllm::core {
namespace {

// Two independent 64-bit lanes, each an xxh64-style round (multiply, rotate, multiply) per
// input word followed by a murmur3 finalizer; the lanes differ in seed and prime so a
// collision needs both to collide at once.
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
// Root "parent" of the first block of every sequence (vLLM's NONE_HASH).
constexpr BlockHash kRootHash{0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL};

constexpr uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

constexpr uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

struct Lane {
  uint64_t acc;
  uint64_t prime;
  void add(uint64_t word) {
    acc ^= rotl(word * kPrime2, 31) * prime;
    acc = rotl(acc, 27) * kPrime1 + kPrime4;
  }
  uint64_t finish(uint64_t len) const { return fmix64(acc ^ (len * kPrime3)); }
};

struct Hasher128 {
  Lane a{0x243f6a8885a308d3ULL, kPrime1};
  Lane b{0x13198a2e03707344ULL, kPrime3};
  uint64_t len = 0;
  void add(uint64_t word) {
    a.add(word);
    b.add(word ^ 0xa4093822299f31d0ULL);
    ++len;
  }
  BlockHash finish() const { return {a.finish(len), b.finish(len + 0x5bd1e995)}; }
};

}  // namespace

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent,
                            std::span<const int> token_ids,
                            std::span<const uint64_t> extra_keys) {
  const BlockHash p = parent.value_or(kRootHash);
  Hasher128 h;
  h.add(p.hi);
  h.add(p.lo);
  // Lengths are absorbed so that (tokens, extras) boundaries cannot shift.
  h.add(token_ids.size());
  for (int t : token_ids) h.add(static_cast<uint32_t>(t));
  h.add(extra_keys.size());
  for (uint64_t k : extra_keys) h.add(k);
  return h.finish();
}

uint64_t hash_string(std::span<const char> bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then finalized
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return fmix64(h ^ bytes.size());
}

std::vector<BlockHash> hash_token_blocks(std::span<const int> token_ids, int block_size,
                                         std::span<const uint64_t> first_block_extra_keys) {
  VLLM_CHECK(block_size > 0, "block_size ", block_size);
  std::vector<BlockHash> out;
  std::optional<BlockHash> parent;
  for (size_t start = 0; start + block_size <= token_ids.size(); start += block_size) {
    parent = hash_block_tokens(parent, token_ids.subspan(start, block_size),
                               start == 0 ? first_block_extra_keys : std::span<const uint64_t>{});
    out.push_back(*parent);
  }
  return out;
}

}  // namespace vllm::core
