// Grammar IR: a context-free grammar over bytes. A rule is a list of alternatives, each a
// sequence of symbols (a byte class or another rule). Front ends (regex, JSON Schema, GBNF)
// build one with GrammarBuilder; finish() checks it (size limits, no left recursion) and lays
// it out as a flat program for the matcher.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::structured {

// Groups nest at most this deep in the regex and GBNF front ends: their parsers recurse per
// group, and a request's text of thousands of '(' would otherwise overflow the stack (found by
// fuzz_request_json, in each parser).
constexpr int kMaxGroupDepth = 32;

// A set of bytes, 256 bits.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t(1) << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add_all(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
  }
  ByteSet complement() const {
    ByteSet r;
    for (int i = 0; i < 4; ++i) r.bits[i] = ~bits[i];
    return r;
  }
  bool empty() const { return !(bits[0] | bits[1] | bits[2] | bits[3]); }
  bool operator==(const ByteSet&) const = default;
  auto operator<=>(const ByteSet&) const = default;
};

struct Symbol {
  enum Kind : uint8_t { kEnd, kBytes, kRule } kind = kEnd;
  int32_t id = 0;  // kBytes: class index; kRule: rule index
  static Symbol bytes(int id) { return {kBytes, id}; }
  static Symbol rule(int id) { return {kRule, id}; }
};
using Seq = std::vector<Symbol>;

// Limits that keep one request's grammar bounded (compile time and matcher memory).
struct GrammarLimits {
  int max_rules = 200000;
  int max_symbols = 2000000;
  int max_repeat = 10000;  // the largest finite bound of x{m,n}
};

// The matcher's form: code[pc] is a symbol, alternatives end with kEnd; rule r's alternatives
// start at alt_starts[rule_alts[r] .. rule_alts[r + 1]).
struct Program {
  std::vector<Symbol> code;
  std::vector<ByteSet> classes;
  std::vector<int32_t> rule_alts;
  std::vector<int32_t> alt_starts;
  std::vector<std::string> rule_names;
  int root = 0;
};

class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  int new_rule(std::string name);                 // a rule with no alternatives yet
  void add_alt(int rule, Seq seq);                // appends an alternative
  Symbol rule_of(std::string name, std::vector<Seq> alts);  // new rule with these alternatives
  Symbol cls(const ByteSet& set);                 // one byte from the set
  Symbol byte(uint8_t b);
  Seq literal(std::string_view s);                // the bytes of s, in order
  Symbol lit(std::string_view s);                 // a rule matching exactly s
  Symbol star(Symbol x);                          // x*
  Symbol plus(Symbol x);                          // x+
  Symbol opt(Symbol x);                           // x?
  Symbol repeat(Symbol x, int min, int max);      // x{min,max}; max < 0: unbounded
  Symbol alt(std::vector<Seq> alts) { return rule_of("alt", std::move(alts)); }
  Symbol seq(Seq s) { return rule_of("seq", {std::move(s)}); }
  Symbol empty() { return rule_of("empty", {Seq{}}); }
  int num_rules() const { return static_cast<int>(rules_.size()); }
  const std::string& rule_name(int r) const { return rules_[r].name; }
  bool has_alts(int r) const { return !rules_[r].alts.empty(); }

  // Checks and flattens; throws vllm::Error naming the problem (a rule without alternatives,
  // left recursion, a size limit).
  Program finish(int root);

 private:
  struct Rule {
    std::string name;
    std::vector<Seq> alts;
  };
  void count(size_t symbols);
  GrammarLimits limits_;
  std::vector<Rule> rules_;
  std::vector<ByteSet> classes_;
  std::map<ByteSet, int> class_ids_;
  size_t num_symbols_ = 0;
};

}  // namespace vllm::structured
