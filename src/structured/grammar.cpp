#include "structured/grammar.h"

#include "util/check.h"

namespace vllm::structured {

void GrammarBuilder::count(size_t symbols) {
  num_symbols_ += symbols;
  if (num_symbols_ > static_cast<size_t>(limits_.max_symbols))
    throw Error("the grammar is too large (more than " + std::to_string(limits_.max_symbols) +
                " symbols)");
}

int GrammarBuilder::new_rule(std::string name) {
  if (static_cast<int>(rules_.size()) >= limits_.max_rules)
    throw Error("the grammar is too large (more than " + std::to_string(limits_.max_rules) +
                " rules)");
  rules_.push_back({std::move(name), {}});
  return static_cast<int>(rules_.size()) - 1;
}

void GrammarBuilder::add_alt(int rule, Seq seq) {
  count(seq.size() + 1);
  rules_[rule].alts.push_back(std::move(seq));
}

Symbol GrammarBuilder::rule_of(std::string name, std::vector<Seq> alts) {
  const int r = new_rule(std::move(name));
  for (Seq& s : alts) add_alt(r, std::move(s));
  return Symbol::rule(r);
}

Symbol GrammarBuilder::cls(const ByteSet& set) {
  auto [it, fresh] = class_ids_.emplace(set, static_cast<int>(classes_.size()));
  if (fresh) classes_.push_back(set);
  return Symbol::bytes(it->second);
}

Symbol GrammarBuilder::byte(uint8_t b) {
  ByteSet s;
  s.add(b);
  return cls(s);
}

Seq GrammarBuilder::literal(std::string_view s) {
  Seq out;
  for (char c : s) out.push_back(byte(static_cast<uint8_t>(c)));
  return out;
}

Symbol GrammarBuilder::lit(std::string_view s) { return rule_of("lit", {literal(s)}); }

Symbol GrammarBuilder::star(Symbol x) {
  const int r = new_rule("star");
  add_alt(r, {x, Symbol::rule(r)});  // right recursion: the matcher's tail call keeps it flat
  add_alt(r, {});
  return Symbol::rule(r);
}

Symbol GrammarBuilder::plus(Symbol x) { return rule_of("plus", {{x, star(x)}}); }

Symbol GrammarBuilder::opt(Symbol x) { return rule_of("opt", {{x}, {}}); }

Symbol GrammarBuilder::repeat(Symbol x, int min, int max) {
  if (min < 0 || (max >= 0 && max < min)) throw Error("bad repetition bounds");
  if (min > limits_.max_repeat || max > limits_.max_repeat)
    throw Error("repetition bound above " + std::to_string(limits_.max_repeat) +
                " is not supported");
  Seq s(static_cast<size_t>(min), x);
  if (max < 0) {
    s.push_back(star(x));
  } else if (max > min) {
    Symbol tail = opt(x);  // x{0,1}
    for (int k = 2; k <= max - min; ++k) tail = rule_of("rep", {{x, tail}, {}});
    s.push_back(tail);
  }
  return rule_of("repeat", {std::move(s)});
}

Program GrammarBuilder::finish(int root) {
  const int n = num_rules();
  VLLM_CHECK(root >= 0 && root < n, "root rule ", root, " of ", n);
  for (const Rule& r : rules_)
    if (r.alts.empty()) throw Error("grammar rule '" + r.name + "' has no alternatives");
  // Nullable rules, by fixpoint.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : rules_[r].alts) {
        bool all = true;
        for (Symbol x : s) all &= x.kind == Symbol::kRule && nullable[x.id];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion (a rule reachable from itself before any byte) would make the matcher's
  // stack grow without input: refuse it. Iterative DFS over the left-edge graph.
  std::vector<std::vector<int>> left(n);
  for (int r = 0; r < n; ++r)
    for (const Seq& s : rules_[r].alts)
      for (Symbol x : s) {
        if (x.kind != Symbol::kRule) break;
        left[r].push_back(x.id);
        if (!nullable[x.id]) break;
      }
  std::vector<uint8_t> colour(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int, size_t>> path;
  for (int start = 0; start < n; ++start) {
    if (colour[start]) continue;
    path.push_back({start, 0});
    colour[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const int next = left[r][i++];
      if (colour[next] == 1)
        throw Error("left recursion in grammar rule '" + rules_[next].name +
                    "' is not supported (a rule must consume input before it refers to itself)");
      if (colour[next] == 0) {
        colour[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
  Program p;
  p.classes = classes_;
  p.root = root;
  p.code.reserve(num_symbols_);
  p.rule_alts.reserve(n + 1);
  for (const Rule& r : rules_) {
    p.rule_alts.push_back(static_cast<int32_t>(p.alt_starts.size()));
    p.rule_names.push_back(r.name);
    for (const Seq& s : r.alts) {
      p.alt_starts.push_back(static_cast<int32_t>(p.code.size()));
      p.code.insert(p.code.end(), s.begin(), s.end());
      p.code.push_back(Symbol{});
    }
  }
  p.rule_alts.push_back(static_cast<int32_t>(p.alt_starts.size()));
  return p;
}

}  // namespace vllm::structured
