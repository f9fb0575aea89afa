#include "structured/structural_tag.h"

#include <algorithm>
#include <array>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "util/check.h"

namespace vllm::structured {
namespace {

using ojson = nlohmann::ordered_json;

// UTF-8 decoding states: what the next byte may be.
enum Utf8 : int {
  kBoundary,  // between characters
  kCont1,     // one continuation byte left (80-BF)
  kCont2,     // two left
  kCont3,     // three left
  kAfterE0,   // A0-BF, then one
  kAfterED,   // 80-9F, then one
  kAfterF0,   // 90-BF, then two
  kAfterF4,   // 80-8F, then two
  kNumUtf8
};

// The next state, or -1 where b cannot come next in valid UTF-8.
int utf8_next(int u, uint8_t b) {
  auto cont = [&](uint8_t lo, uint8_t hi, int next) { return b >= lo && b <= hi ? next : -1; };
  switch (u) {
    case kBoundary:
      if (b < 0x80) return kBoundary;
      if (b >= 0xC2 && b <= 0xDF) return kCont1;
      if (b == 0xE0) return kAfterE0;
      if (b == 0xED) return kAfterED;
      if (b >= 0xE1 && b <= 0xEF) return kCont2;
      if (b == 0xF0) return kAfterF0;
      if (b >= 0xF1 && b <= 0xF3) return kCont3;
      if (b == 0xF4) return kAfterF4;
      return -1;
    case kCont1: return cont(0x80, 0xBF, kBoundary);
    case kCont2: return cont(0x80, 0xBF, kCont1);
    case kCont3: return cont(0x80, 0xBF, kCont2);
    case kAfterE0: return cont(0xA0, 0xBF, kCont1);
    case kAfterED: return cont(0x80, 0x9F, kCont1);
    case kAfterF0: return cont(0x90, 0xBF, kCont2);
    case kAfterF4: return cont(0x80, 0x8F, kCont2);
  }
  return -1;
}

// Aho-Corasick automaton over the triggers: node = the longest suffix of the text that is a
// prefix of some trigger; matched[node] = the triggers that end there.
struct TriggerAutomaton {
  std::vector<std::array<int32_t, 256>> next;
  std::vector<std::vector<int>> matched;

  explicit TriggerAutomaton(const std::vector<std::string>& triggers) {
    next.push_back({});
    next[0].fill(-1);
    matched.emplace_back();
    for (size_t t = 0; t < triggers.size(); ++t) {
      int node = 0;
      for (unsigned char c : triggers[t]) {
        if (next[node][c] < 0) {
          next[node][c] = static_cast<int32_t>(next.size());
          next.push_back({});
          next.back().fill(-1);
          matched.emplace_back();
        }
        node = next[node][c];
      }
      matched[node].push_back(static_cast<int>(t));
    }
    // Breadth first: complete the goto function with failure links, and inherit matches.
    std::vector<int32_t> fail(next.size(), 0), queue;
    for (int c = 0; c < 256; ++c) {
      if (next[0][c] < 0) next[0][c] = 0;
      else queue.push_back(next[0][c]);
    }
    for (size_t i = 0; i < queue.size(); ++i) {
      const int node = queue[i];
      for (int t : matched[fail[node]]) matched[node].push_back(t);
      for (int c = 0; c < 256; ++c) {
        const int child = next[node][c];
        if (child < 0) {
          next[node][c] = next[fail[node]][c];
        } else {
          fail[child] = next[fail[node]][c];
          queue.push_back(child);
        }
      }
    }
  }
};

std::vector<std::string> string_list(const ojson& v, const std::string& what) {
  std::vector<std::string> out;
  if (!v.is_array()) throw Error("structural_tag: " + what + " must be a list of strings");
  for (const auto& t : v) {
    if (!t.is_string()) throw Error("structural_tag: " + what + " must be a list of strings");
    out.push_back(t.get<std::string>());
  }
  return out;
}

}  // namespace

// xgrammar's newer form, the subset that is the legacy form: {"type": "structural_tag",
// "format": {"type": "triggered_tags", "triggers": [...], "tags": [{"type": "tag", "begin",
// "content": {"type": "json_schema", "json_schema": {...}}, "end"}]}} with at_least_one and
// stop_after_first false. Anything else is an Error naming it.
static Symbol format_to_grammar(GrammarBuilder& g, const ojson& tag,
                                const JsonOptions& options) {
  for (const auto& [k, v] : tag.items())
    if (k != "type" && k != "format")
      throw Error("structural_tag: the field '" + k + "' is not supported next to 'format'");
  const ojson& f = tag["format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    throw Error("structural_tag: 'format' must be an object with a 'type'");
  const std::string type = f["type"].get<std::string>();
  if (type != "triggered_tags")
    throw Error("structural_tag: format type '" + type +
                "' is not supported (only 'triggered_tags', or 'structures' and 'triggers')");
  for (const auto& [k, v] : f.items()) {
    if (k == "at_least_one" || k == "stop_after_first") {
      if (!v.is_boolean()) throw Error("structural_tag: format." + k + " must be a boolean");
      if (v.get<bool>()) throw Error("structural_tag: format." + k + " true is not supported");
    } else if (k != "type" && k != "triggers" && k != "tags") {
      throw Error("structural_tag: format." + k + " is not supported");
    }
  }
  if (!f.contains("tags") || !f["tags"].is_array())
    throw Error("structural_tag: format.tags must be a list");
  const auto triggers =
      string_list(f.contains("triggers") ? f["triggers"] : ojson(), "format.triggers");
  std::vector<TagStructure> structures;
  for (size_t i = 0; i < f["tags"].size(); ++i) {
    const ojson& t = f["tags"][i];
    const std::string where = "structural_tag: format.tags[" + std::to_string(i) + "]";
    if (!t.is_object()) throw Error(where + " must be an object");
    for (const auto& [k, v] : t.items()) {
      if (k == "type") {
        if (v != "tag") throw Error(where + ".type must be 'tag'");
      } else if (k != "begin" && k != "content" && k != "end") {
        throw Error(where + "." + k + " is not supported");
      }
    }
    if (!t.contains("begin") || !t["begin"].is_string())
      throw Error(where + ".begin must be a string");
    if (!t.contains("end") || !t["end"].is_string())
      throw Error(where + ".end must be a string (lists of ends are not supported)");
    const ojson* content = t.contains("content") ? &t["content"] : nullptr;
    const std::string ctype = content && content->is_object() && content->contains("type") &&
                                      (*content)["type"].is_string()
                                  ? (*content)["type"].get<std::string>()
                                  : "";
    if (ctype != "json_schema")
      throw Error(where + ".content: " +
                  (ctype.empty() ? std::string("must be an object with a 'type'")
                                 : "type '" + ctype + "' is not supported (only 'json_schema')"));
    for (const auto& [k, v] : content->items())
      if (k != "type" && k != "json_schema")
        throw Error(where + ".content." + k + " is not supported");
    if (!content->contains("json_schema") ||
        !((*content)["json_schema"].is_object() || (*content)["json_schema"].is_boolean()))
      throw Error(where + ".content.json_schema must be a JSON schema (an object)");
    structures.push_back({t["begin"].get<std::string>(), (*content)["json_schema"].dump(),
                          t["end"].get<std::string>()});
  }
  return structural_tag_grammar(g, structures, triggers, options);
}

Symbol structural_tag_grammar(GrammarBuilder& g, const std::vector<TagStructure>& structures,
                              const std::vector<std::string>& triggers,
                              const JsonOptions& options) {
  if (triggers.empty()) throw Error("structural_tag: 'triggers' is empty");
  if (structures.empty()) throw Error("structural_tag: 'structures' is empty");
  for (const auto& t : triggers)
    if (t.empty()) throw Error("structural_tag: a trigger is the empty string");
  for (size_t s = 0; s < structures.size(); ++s) {
    bool found = false;
    for (const auto& t : triggers) found = found || structures[s].begin.starts_with(t);
    if (!found)
      throw Error("structural_tag: structures[" + std::to_string(s) + "].begin '" +
                  structures[s].begin + "' does not start with any trigger");
  }
  const TriggerAutomaton ac(triggers);

  // Free text from automaton node n in UTF-8 state u: rule text[n][u], made on first use.
  const int text_start = g.new_rule("tag_text");
  std::map<std::pair<int, int>, int> text_rules{{{0, kBoundary}, text_start}};
  std::vector<std::pair<int, int>> todo{{0, kBoundary}};

  // What follows a whole trigger (automaton node n): one of the structures, then text again.
  std::map<int, int> commit_rules;
  std::vector<Symbol> bodies;  // per structure: JSON of its schema
  for (size_t s = 0; s < structures.size(); ++s) {
    try {
      bodies.push_back(json_schema_to_grammar(g, structures[s].schema, options));
    } catch (const Error& e) {
      throw Error("structural_tag: structures[" + std::to_string(s) + "].schema: " + e.what());
    }
  }
  auto commit_rule = [&](int node) {
    if (auto it = commit_rules.find(node); it != commit_rules.end()) return it->second;
    std::vector<Seq> alts;
    for (int t : ac.matched[node]) {
      for (size_t s = 0; s < structures.size(); ++s) {
        const auto& st = structures[s];
        if (!st.begin.starts_with(triggers[t])) continue;
        Seq seq = g.literal(std::string_view(st.begin).substr(triggers[t].size()));
        seq.push_back(bodies[s]);
        for (Symbol x : g.literal(st.end)) seq.push_back(x);
        seq.push_back(Symbol::rule(text_start));
        alts.push_back(std::move(seq));
      }
    }
    // A trigger that no structure begins with cannot appear at all.
    const int r = alts.empty() ? -1 : g.rule_of("tag_structure", std::move(alts)).id;
    commit_rules[node] = r;
    return r;
  };
  auto text_rule = [&](int node, int u) {
    auto [it, added] = text_rules.try_emplace({node, u}, 0);
    if (added) {
      it->second = g.new_rule("tag_text");
      todo.emplace_back(node, u);
    }
    return it->second;
  };

  while (!todo.empty()) {
    const auto [node, u] = todo.back();
    todo.pop_back();
    const int rule = text_rules.at({node, u});
    // Bytes grouped by the rule they lead to, in byte order of first appearance.
    std::vector<std::pair<int, ByteSet>> targets;
    for (int b = 0; b < 256; ++b) {
      const int nu = utf8_next(u, static_cast<uint8_t>(b));
      if (nu < 0) continue;
      const int nn = ac.next[node][b];
      const int target = ac.matched[nn].empty() ? text_rule(nn, nu) : commit_rule(nn);
      if (target < 0) continue;
      auto it = std::find_if(targets.begin(), targets.end(),
                             [&](const auto& p) { return p.first == target; });
      if (it == targets.end()) {
        targets.emplace_back(target, ByteSet{});
        it = targets.end() - 1;
      }
      it->second.add(static_cast<uint8_t>(b));
    }
    for (const auto& [target, set] : targets)
      g.add_alt(rule, {g.cls(set), Symbol::rule(target)});
    if (u == kBoundary) g.add_alt(rule, {});
  }
  return Symbol::rule(text_start);
}

Symbol structural_tag_to_grammar(GrammarBuilder& g, std::string_view tag_json,
                                 const JsonOptions& options) {
  ojson tag;
  try {
    tag = ojson::parse(tag_json);
  } catch (const ojson::exception&) {
    throw Error("structural_tag: not valid JSON");
  }
  if (!tag.is_object()) throw Error("structural_tag: must be a JSON object");
  if (tag.contains("format")) return format_to_grammar(g, tag, options);
  for (const auto& [k, v] : tag.items())
    if (k != "type" && k != "structures" && k != "triggers")
      throw Error("structural_tag: the field '" + k + "' is not supported");
  if (!tag.contains("structures") || !tag["structures"].is_array())
    throw Error("structural_tag: 'structures' must be a list");
  if (!tag.contains("triggers") || !tag["triggers"].is_array())
    throw Error("structural_tag: 'triggers' must be a list of strings");
  std::vector<std::string> triggers;
  for (const auto& t : tag["triggers"]) {
    if (!t.is_string()) throw Error("structural_tag: 'triggers' must be a list of strings");
    triggers.push_back(t.get<std::string>());
  }
  std::vector<TagStructure> structures;
  for (size_t i = 0; i < tag["structures"].size(); ++i) {
    const ojson& s = tag["structures"][i];
    const std::string where = "structural_tag: structures[" + std::to_string(i) + "]";
    if (!s.is_object()) throw Error(where + " must be an object");
    for (const auto& [k, v] : s.items())
      if (k != "begin" && k != "schema" && k != "end")
        throw Error(where + ": the field '" + k + "' is not supported");
    if (!s.contains("begin") || !s["begin"].is_string())
      throw Error(where + ".begin must be a string");
    if (!s.contains("end") || !s["end"].is_string()) throw Error(where + ".end must be a string");
    TagStructure st{s["begin"].get<std::string>(), "{}", s["end"].get<std::string>()};
    if (s.contains("schema") && !s["schema"].is_null()) {
      if (!s["schema"].is_object() && !s["schema"].is_boolean())
        throw Error(where + ".schema must be a JSON schema (an object)");
      st.schema = s["schema"].dump();
    }
    structures.push_back(std::move(st));
  }
  return structural_tag_grammar(g, structures, triggers, options);
}

}  // namespace vllm::structured
