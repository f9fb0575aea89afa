// BPE merge loop: symbols in a doubly linked list, candidate merges in a min-heap keyed by
// (rank, position); stale heap entries are skipped when popped.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <queue>

#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm::tok {

BpeModel::BpeModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : options_(std::move(options)) {
  int32_t limit = 0;
  for (const auto& [token, id] : vocab) {
    VLLM_CHECK(id >= 0, "negative token id for ", token);
    limit = std::max(limit, id + 1);
  }
  id_to_token_.resize(limit);
  has_id_.assign(limit, false);
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    vocab_.insert_or_assign(token, id);
    id_to_token_[id] = token;
    has_id_[id] = true;
  }
  const size_t prefix_len = options_.continuing_subword_prefix.size();
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    std::string joined =
        a + (prefix_len > 0 && b.compare(0, prefix_len, options_.continuing_subword_prefix) == 0
                 ? b.substr(prefix_len)
                 : b);
    auto in = vocab_.find(joined);
    if (ia == vocab_.end() || ib == vocab_.end() || in == vocab_.end()) continue;
    merges_.insert_or_assign(pair_key(ia->second, ib->second),
                             Merge{static_cast<int32_t>(rank), in->second});
  }
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    if (it != vocab_.end()) unk_id_ = it->second;
  }
  byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto it = vocab_.find(std::string_view(name)); it != vocab_.end())
      byte_ids_[b] = it->second;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kMaxCachedWord;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

// One symbol per character (with continuing-subword prefix / end-of-word suffix), falling back to
// <0xAB> byte tokens, then to unk (consecutive unks fused when fuse_unk).
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  std::optional<int32_t> pending_unk;
  std::string key;
  for (size_t i = 0; i < word.size();) {
    const size_t n =
        std::min(utf8_char_length(static_cast<unsigned char>(word[i])), word.size() - i);
    const std::string_view ch = word.substr(i, n);
    const bool is_first = i == 0, is_last = i + n == word.size();
    i += n;
    key.assign(is_first ? "" : options_.continuing_subword_prefix);
    key.append(ch);
    if (is_last) key.append(options_.end_of_word_suffix);
    if (auto it = vocab_.find(key); it != vocab_.end()) {
      if (pending_unk) ids.push_back(*std::exchange(pending_unk, std::nullopt));
      ids.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : key) all &= byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : key) ids.push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk && !options_.fuse_unk) ids.push_back(*pending_unk);
      pending_unk = unk_id_;
    }
  }
  if (pending_unk) ids.push_back(*pending_unk);
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n <= 1 || merges_.empty()) {
    out = std::move(ids);
    return;
  }
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const {  // max-heap: invert to pop lowest rank, then pos
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t left) {
    const int32_t right = next[left];
    if (right < 0) return;
    auto it = merges_.find(pair_key(ids[left], ids[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    auto it = merges_.find(pair_key(ids[top.pos], ids[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    ids[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0) push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  out.clear();
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

}  // namespace vllm::tok
