#include "structured/matcher.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm::structured {
namespace {

constexpr size_t kMaxCachedMasks = 64;
constexpr size_t kMaxStacks = 4096;  // per state: an ambiguous grammar is refused past this

uint64_t key_of(int32_t pc, int32_t parent) {
  return (uint64_t(uint32_t(pc)) << 32) | uint32_t(parent + 1);
}
uint64_t hash_of(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

size_t SharedMaskCache::Hash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ v.size();
  for (int32_t x : v) h = (h ^ uint32_t(x)) * 0x100000001B3ULL;
  return static_cast<size_t>(h);
}

bool SharedMaskCache::get(const std::vector<int32_t>& key, std::span<uint32_t> mask) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(key);
  if (it == masks_.end() || it->second.size() != mask.size()) return false;
  std::copy(it->second.begin(), it->second.end(), mask.begin());
  return true;
}

void SharedMaskCache::put(std::vector<int32_t> key, std::span<const uint32_t> mask) {
  std::lock_guard<std::mutex> lock(mu_);
  if (masks_.count(key)) return;
  while (masks_.size() >= kCapacity && !order_.empty()) {
    masks_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  masks_.emplace(std::move(key), std::vector<uint32_t>(mask.begin(), mask.end()));
}

std::vector<int32_t> GrammarMatcher::portable_key() const {
  const State& s = states_.back();
  std::vector<std::vector<int32_t>> stacks;
  for (int32_t id : s.stacks) {
    std::vector<int32_t>& st = stacks.emplace_back();
    for (int32_t n = id; n >= 0; n = nodes_[n].parent) st.push_back(nodes_[n].pc);
  }
  std::sort(stacks.begin(), stacks.end());
  std::vector<int32_t> key;
  for (const auto& st : stacks) {
    key.insert(key.end(), st.begin(), st.end());
    key.push_back(-1);
  }
  key.push_back(s.accept ? -2 : -3);
  return key;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), prog_(&grammar_->program) {
  table_.assign(1024, Slot{0, -1, 0});
  State start;
  const Program& p = *prog_;
  for (int a = p.rule_alts[p.root]; a < p.rule_alts[p.root + 1]; ++a)
    closure(p.alt_starts[a], -1, start);
  std::sort(start.stacks.begin(), start.stacks.end());
  start.stacks.erase(std::unique(start.stacks.begin(), start.stacks.end()), start.stacks.end());
  states_.push_back(std::move(start));
}

void GrammarMatcher::grow() {
  std::vector<Slot> old = std::move(table_);
  table_.assign(old.size() * 2, Slot{0, -1, 0});
  const size_t m = table_.size() - 1;
  for (const Slot& s : old) {
    if (s.id < 0 || (s.gen != 0 && s.gen != gen_)) continue;
    size_t i = hash_of(s.key) & m;
    while (table_[i].id >= 0) i = (i + 1) & m;
    table_[i] = s;
  }
}

int32_t GrammarMatcher::intern(int32_t pc, int32_t parent) {
  const uint64_t key = key_of(pc, parent);
  size_t m = table_.size() - 1;
  size_t i = hash_of(key) & m;
  for (;; i = (i + 1) & m) {
    Slot& s = table_[i];
    const bool live = s.id >= 0 && (s.gen == 0 || s.gen == gen_);
    if (!live) break;
    if (s.key == key) return s.id;
  }
  if ((num_live_ + 1) * 2 > table_.size()) {
    grow();
    m = table_.size() - 1;
    i = hash_of(key) & m;
    while (table_[i].id >= 0 && (table_[i].gen == 0 || table_[i].gen == gen_)) i = (i + 1) & m;
  }
  const int32_t id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back({pc, parent});
  table_[i] = Slot{key, id, gen_};
  ++num_live_;
  return id;
}

void GrammarMatcher::begin_temp() {
  gen_ = next_gen_++;
  if (next_gen_ == 0) next_gen_ = 1;
  temp_watermark_ = nodes_.size();
}

void GrammarMatcher::end_temp() {
  num_live_ -= nodes_.size() - temp_watermark_;
  nodes_.resize(temp_watermark_);
  gen_ = 0;
  // A generation counter that wrapped could revive stale slots: rebuild then.
  if (next_gen_ == 1) grow();
}

// Whether this advance sees key for the first time (and records it).
bool GrammarMatcher::first_visit(uint64_t key) {
  constexpr size_t kListMost = 64;
  if (visited_.size() < kListMost) {
    if (std::find(visited_.begin(), visited_.end(), key) != visited_.end()) return false;
    visited_.push_back(key);
    if (visited_.size() == kListMost) visited_set_.insert(visited_.begin(), visited_.end());
    return true;
  }
  return visited_set_.insert(key).second;
}

// Follows pc until every path stands at a byte class (added to out) or has returned past the
// bottom (out.accept). visited_ breaks cycles of empty matches.
void GrammarMatcher::closure(int32_t pc, int32_t parent, State& out) {
  const Program& p = *prog_;
  for (;;) {
    const Symbol s = p.code[pc];
    if (s.kind == Symbol::kBytes) {
      out.stacks.push_back(intern(pc, parent));
      if (out.stacks.size() > kMaxStacks)
        throw Error("the grammar is too ambiguous (more than " + std::to_string(kMaxStacks) +
                    " parses at once)");
      return;
    }
    const uint64_t key = key_of(pc, parent);
    if (!first_visit(key)) return;
    if (s.kind == Symbol::kEnd) {
      if (parent < 0) {
        out.accept = true;
        return;
      }
      const Node n = nodes_[parent];
      pc = n.pc;
      parent = n.parent;
      continue;
    }
    // A call: the return address goes on the stack unless the call is in tail position.
    const int32_t ret = pc + 1;
    const int32_t callee_parent = p.code[ret].kind == Symbol::kEnd ? parent : intern(ret, parent);
    const int32_t a0 = p.rule_alts[s.id], a1 = p.rule_alts[s.id + 1];
    for (int32_t a = a0; a + 1 < a1; ++a) closure(p.alt_starts[a], callee_parent, out);
    pc = p.alt_starts[a1 - 1];
    parent = callee_parent;
  }
}

void GrammarMatcher::advance(const State& from, uint8_t b, State& out) {
  out.stacks.clear();
  out.accept = false;
  visited_.clear();
  if (!visited_set_.empty()) visited_set_.clear();
  const Program& p = *prog_;
  for (int32_t id : from.stacks) {
    const Node n = nodes_[id];
    if (p.classes[p.code[n.pc].id].has(b)) closure(n.pc + 1, n.parent, out);
  }
  if (out.stacks.size() > 1) {
    std::sort(out.stacks.begin(), out.stacks.end());
    out.stacks.erase(std::unique(out.stacks.begin(), out.stacks.end()), out.stacks.end());
  }
}

ByteSet GrammarMatcher::allowed_bytes(const State& s) const {
  ByteSet r;
  for (int32_t id : s.stacks) r.add_all(prog_->classes[prog_->code[nodes_[id].pc].id]);
  return r;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  State cur = states_.back(), next;
  for (char c : bytes) {
    advance(cur, static_cast<uint8_t>(c), next);
    if (next.stacks.empty() && !next.accept) return false;
    std::swap(cur, next);
  }
  states_.push_back(std::move(cur));
  return true;
}

bool GrammarMatcher::accept_token(int32_t token) {
  const TokenVocab& v = *grammar_->vocab;
  if (v.is_eos(token)) {
    if (!is_accepting()) return false;
    states_.push_back(State{{}, true});
    return true;
  }
  const std::string* bytes = v.token_bytes(token);
  if (!bytes || bytes->empty()) return false;
  return accept_bytes(*bytes);
}

void GrammarMatcher::rollback(int num_tokens) {
  VLLM_CHECK(num_tokens >= 0 && num_tokens <= this->num_tokens(), "rollback of ", num_tokens,
             " tokens after ", this->num_tokens());
  states_.resize(states_.size() - num_tokens);
}

int32_t GrammarMatcher::walk_state(const State& s) {
  std::vector<int32_t> key = s.stacks;
  key.push_back(s.accept ? -1 : -2);
  auto [it, fresh] = walk_ids_.emplace(std::move(key), static_cast<int32_t>(walk_states_.size()));
  if (fresh) {
    walk_states_.push_back({s, allowed_bytes(s)});
    walk_next_.resize(walk_states_.size() * 256, -2);
  }
  return it->second;
}

int32_t GrammarMatcher::walk_next(int32_t state, uint8_t b) {
  const size_t slot = size_t(state) * 256 + b;
  if (walk_next_[slot] != -2) return walk_next_[slot];
  advance(walk_states_[state].state, b, scratch_);
  const int32_t next =
      scratch_.stacks.empty() && !scratch_.accept ? -1 : walk_state(scratch_);
  walk_next_[slot] = next;  // walk_state may have grown the table: index again
  return next;
}

void GrammarMatcher::clear_walk() {
  walk_states_.clear();
  walk_ids_.clear();
  walk_next_.clear();
}

void GrammarMatcher::walk(int node, int32_t state, std::span<uint32_t> mask) {
  const TokenVocab& v = *grammar_->vocab;
  const ByteSet ok = walk_states_[state].allowed;
  const int first = v.first_child(node), last = first + v.num_children(node);
  for (int c = first; c < last; ++c) {
    const uint8_t b = v.node_byte(c);
    if (!ok.has(b)) continue;
    const int32_t next = walk_next(state, b);
    if (next < 0) continue;
    for (int32_t t : v.tokens_at(c)) mask[t >> 5] |= uint32_t(1) << (t & 31);
    if (v.num_children(c) > 0 && !walk_states_[next].state.stacks.empty()) walk(c, next, mask);
  }
}

// Called in temp mode (fill_mask).
std::optional<int32_t> GrammarMatcher::forced_token() {
  const TokenVocab& v = *grammar_->vocab;
  if (!v.encoder()) return std::nullopt;
  constexpr size_t kMaxForced = 256;
  std::string forced;
  State cur = states_.back(), next;
  while (forced.size() < kMaxForced && !cur.accept) {
    const ByteSet ok = allowed_bytes(cur);
    int only = -1, count = 0;
    for (int b = 0; b < 256 && count < 2; ++b)
      if (ok.has(static_cast<uint8_t>(b))) only = b, ++count;
    if (count != 1) break;
    forced.push_back(static_cast<char>(only));
    advance(cur, static_cast<uint8_t>(only), next);
    std::swap(cur, next);
  }
  if (forced.empty() || !tok::utf8_is_valid(forced)) return std::nullopt;
  const std::vector<int32_t> ids = v.encoder()(forced);
  // The longest tail of the forced bytes that some token continues past the forced end (in a
  // way the grammar allows) may yet be tokenized differently: the tokens over it are not fixed.
  size_t fixed_bytes = forced.size();
  const size_t from = forced.size() > static_cast<size_t>(v.max_token_bytes())
                          ? forced.size() - v.max_token_bytes() : 0;
  std::vector<uint32_t> probe(v.mask_words());
  for (size_t i = from; i < forced.size(); ++i) {
    int node = 0;
    for (size_t k = i; k < forced.size() && node >= 0; ++k) {
      const int first = v.first_child(node), last = first + v.num_children(node);
      int found = -1;
      for (int c = first; c < last; ++c)
        if (v.node_byte(c) == static_cast<uint8_t>(forced[k])) found = c;
      node = found;
    }
    if (node < 0 || cur.stacks.empty() || v.num_children(node) == 0) continue;
    std::fill(probe.begin(), probe.end(), 0u);
    walk(node, walk_state(cur), probe);
    if (std::any_of(probe.begin(), probe.end(), [](uint32_t w) { return w != 0; })) {
      fixed_bytes = i;
      break;
    }
  }
  size_t covered = 0;
  for (int32_t id : ids) {
    const std::string* b = v.token_bytes(id);
    if (!b || forced.compare(covered, b->size(), *b) != 0) return std::nullopt;
    covered += b->size();
    if (covered > fixed_bytes) return std::nullopt;
    return id;  // the first token lies within the fixed bytes
  }
  return std::nullopt;
}

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) {
  const TokenVocab& v = *grammar_->vocab;
  VLLM_CHECK(static_cast<int>(mask.size()) == v.mask_words(), "mask of ", mask.size(),
             " words for ", v.mask_words());
  const State& s = states_.back();
  std::vector<int32_t> key = s.stacks;
  key.push_back(s.accept ? -1 : -2);
  if (auto it = mask_cache_.find(key); it != mask_cache_.end()) {
    std::copy(it->second.begin(), it->second.end(), mask.begin());
    return;
  }
  std::vector<int32_t> shared_key = portable_key();
  if (grammar_->masks->get(shared_key, mask)) {
    if (mask_cache_.size() >= kMaxCachedMasks) mask_cache_.clear();
    mask_cache_.emplace(std::move(key), std::vector<uint32_t>(mask.begin(), mask.end()));
    return;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  if (!s.stacks.empty()) {
    begin_temp();
    try {
      if (const std::optional<int32_t> forced = forced_token())
        mask[*forced >> 5] |= uint32_t(1) << (*forced & 31);
      else
        walk(0, walk_state(s), mask);
    } catch (...) {
      clear_walk();
      end_temp();
      throw;
    }
    clear_walk();  // its states hold temporary nodes
    end_temp();
  }
  if (s.accept)
    for (int32_t t : v.eos_ids())
      if (t >= 0 && t < v.vocab_size()) mask[t >> 5] |= uint32_t(1) << (t & 31);
  if (mask_cache_.size() >= kMaxCachedMasks) mask_cache_.clear();
  mask_cache_.emplace(std::move(key), std::vector<uint32_t>(mask.begin(), mask.end()));
  grammar_->masks->put(std::move(shared_key), mask);
}

}  // namespace vllm::structured
