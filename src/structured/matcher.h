// GrammarMatcher: one sequence's position in a compiled grammar, as a set of pushdown stacks
// over the grammar's program (a nondeterministic recursive descent with tail calls, so loops
// keep the stack flat). Stacks are hash-consed (pc, parent) nodes, so a state is a sorted list
// of node ids and equal states compare equal. Advances by token bytes, rolls back by tokens,
// and fills the allowed-token bitmask by a walk of the vocabulary's byte trie.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "structured/grammar.h"
#include "structured/vocab.h"

namespace vllm::structured {

// Masks by state shared by every matcher of one grammar (requests, their n completions, and
// steps), keyed by the state's stacks spelled as program positions, so the key does not depend
// on a matcher's own node ids. Bounded; least recently stored out first.
class SharedMaskCache {
 public:
  bool get(const std::vector<int32_t>& key, std::span<uint32_t> mask);
  void put(std::vector<int32_t> key, std::span<const uint32_t> mask);

 private:
  struct Hash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };
  static constexpr size_t kCapacity = 256;
  std::mutex mu_;
  std::unordered_map<std::vector<int32_t>, std::vector<uint32_t>, Hash> masks_;
  std::deque<std::vector<int32_t>> order_;
};

struct CompiledGrammar {
  Program program;
  std::shared_ptr<const TokenVocab> vocab;
  std::string kind;  // "regex", "json_schema", ... (for messages)
  std::unique_ptr<SharedMaskCache> masks = std::make_unique<SharedMaskCache>();
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // False (and no change) when the grammar does not allow the token here. An EOS id is
  // allowed exactly when the grammar accepts; after it the matcher is terminated.
  bool accept_token(int32_t token);
  bool accept_bytes(std::string_view bytes);  // all or nothing
  bool is_accepting() const { return states_.back().accept; }
  // Accepting with nothing but the end left (or an EOS already taken).
  bool is_terminated() const { return states_.back().stacks.empty(); }
  int num_tokens() const { return static_cast<int>(states_.size()) - 1; }
  void rollback(int num_tokens);
  // mask: vocab.mask_words() words, bit t set when token t is allowed next. As llguidance
  // does: when the grammar forces the next bytes, the tokenizer encodes them; the tokens that
  // lie before any tail a longer token could continue past the forced end are fixed, and the
  // first fixed token is then the only one allowed (forced text keeps its own tokenization).
  void fill_mask(std::span<uint32_t> mask);
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct State {
    std::vector<int32_t> stacks;  // sorted node ids; each top is at a byte class
    bool accept = false;
    bool operator==(const State&) const = default;
  };
  struct StackHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 0x9E3779B97F4A7C15ULL ^ v.size();
      for (int32_t x : v) h = (h ^ uint32_t(x)) * 0x100000001B3ULL;
      return static_cast<size_t>(h);
    }
  };
  struct Node {
    int32_t pc, parent;  // parent -1: bottom
  };

  int32_t intern(int32_t pc, int32_t parent);
  void closure(int32_t pc, int32_t parent, State& out);
  void advance(const State& from, uint8_t b, State& out);
  ByteSet allowed_bytes(const State& s) const;
  // The first token of the tokenizer's encoding of the bytes the grammar forces from here,
  // when the rule above applies.
  std::optional<int32_t> forced_token();
  // Marks the tokens below trie `node` whose remaining bytes the walk state `state` accepts.
  void walk(int node, int32_t state, std::span<uint32_t> mask);
  // While filling a mask: states by id, with their allowed bytes, and the transitions taken
  // (a lazily built DFA: a walk through a string's content returns to one state per character).
  int32_t walk_state(const State& s);
  int32_t walk_next(int32_t state, uint8_t b);
  void clear_walk();
  // The current state as program positions: each stack top to bottom, stacks sorted.
  std::vector<int32_t> portable_key() const;
  void begin_temp();
  void end_temp();

  std::shared_ptr<const CompiledGrammar> grammar_;
  const Program* prog_;
  std::vector<Node> nodes_;
  // Open addressing (pc, parent) -> node id. Nodes made while filling a mask are temporary:
  // stamped with the current generation and dropped together afterwards.
  struct Slot {
    uint64_t key;
    int32_t id;
    uint32_t gen;  // 0: permanent; else live only while equal to gen_
  };
  std::vector<Slot> table_;
  uint32_t gen_ = 0;        // nonzero while filling a mask
  uint32_t next_gen_ = 1;
  size_t num_live_ = 0;
  size_t temp_watermark_ = 0;
  void grow();

  std::vector<State> states_;  // states_[i]: after i tokens
  // The (pc, parent) pairs one advance has expanded: a list while short, a set beyond (a
  // grammar of nested repetitions can expand thousands, and a list's search made each byte
  // quadratic in them: found by fuzz_request_json).
  std::vector<uint64_t> visited_;
  std::unordered_set<uint64_t> visited_set_;
  bool first_visit(uint64_t key);
  struct WalkState {
    State state;
    ByteSet allowed;
  };
  std::vector<WalkState> walk_states_;
  std::unordered_map<std::vector<int32_t>, int32_t, StackHash> walk_ids_;
  std::vector<int32_t> walk_next_;  // [state * 256 + byte] -> state; -1 dead, -2 not yet known
  State scratch_;
  std::map<std::vector<int32_t>, std::vector<uint32_t>> mask_cache_;
};

}  // namespace vllm::structured
