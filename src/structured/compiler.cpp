#include "structured/compiler.h"

#include "structured/charset.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/structural_tag.h"
#include "util/check.h"

namespace vllm::structured {

std::string OutputConstraint::key() const {
  std::string k = std::to_string(static_cast<int>(kind)) + ":";
  if (kind == Kind::kChoice)
    for (const auto& c : choices) k += std::to_string(c.size()) + ":" + c;
  else
    k += text;
  if (kind == Kind::kJsonSchema || kind == Kind::kJsonObject ||
      kind == Kind::kStructuralTag) {
    k.push_back('\n');
    k.push_back(json.any_whitespace ? '1' : '0');
    k.push_back(json.additional_properties ? '1' : '0');
    k.append(json.whitespace_pattern);
  }
  return k;
}

std::shared_ptr<const CompiledGrammar> compile(const OutputConstraint& c,
                                               std::shared_ptr<const TokenVocab> vocab) {
  GrammarBuilder g;
  Symbol root;
  std::string kind;
  switch (c.kind) {
    case OutputConstraint::Kind::kJsonSchema:
      kind = "json_schema";
      root = json_schema_to_grammar(g, c.text, c.json);
      break;
    case OutputConstraint::Kind::kJsonObject:
      kind = "json_object";
      root = json_object_grammar(g, c.json);
      break;
    case OutputConstraint::Kind::kRegex:
      kind = "regex";
      root = regex_to_grammar(g, c.text);
      break;
    case OutputConstraint::Kind::kChoice: {
      kind = "choice";
      if (c.choices.empty()) throw Error("choice: the list of choices is empty");
      std::vector<Seq> alts;
      for (const auto& s : c.choices) alts.push_back(g.literal(s));
      root = g.rule_of("choice", std::move(alts));
      break;
    }
    case OutputConstraint::Kind::kGrammar:
      kind = "grammar";
      root = gbnf_to_grammar(g, c.text);
      break;
    case OutputConstraint::Kind::kStructuralTag:
      kind = "structural_tag";
      root = structural_tag_to_grammar(g, c.text, c.json);
      break;
  }
  // The root must be a rule: wrap a bare byte class.
  if (root.kind != Symbol::kRule) root = g.seq({root});
  auto out = std::make_shared<CompiledGrammar>();
  out->program = g.finish(root.id);
  out->vocab = std::move(vocab);
  out->kind = kind;
  // A grammar with no complete text at all would only ever produce dead ends: check that the
  // start state has somewhere to go.
  GrammarMatcher probe(out);
  if (probe.is_terminated() && !probe.is_accepting())
    throw Error(kind + ": the grammar matches nothing");
  // The first mask, here on the compiling thread: a grammar that is past the matcher's limits
  // from its start is refused before any request runs it, and the mask lands in the shared
  // cache that every sequence's first step reads.
  if (out->vocab) {
    std::vector<uint32_t> mask(out->vocab->mask_words());
    probe.fill_mask(mask);
  }
  return out;
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {
  unicode_class('d');
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const OutputConstraint& c) {
  const std::string key = c.key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto compiled = compile(c, vocab_);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, compiled);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace vllm::structured
