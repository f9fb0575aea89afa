// What a request asks its output to follow, compiled against a tokenizer's vocabulary, and a
// thread-safe cache of compiled grammars keyed by kind and text (compile once, share between
// requests; matchers are per sequence).
#pragma once
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/json_schema.h"
#include "structured/matcher.h"

namespace vllm::structured {

struct OutputConstraint {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kStructuralTag };
  Kind kind = Kind::kJsonObject;
  std::string text;                  // schema JSON, regex, grammar or structural tag JSON
  std::vector<std::string> choices;  // kChoice
  JsonOptions json;                  // kJsonSchema, kJsonObject, kStructuralTag
  std::string key() const;           // identifies the grammar in the cache
};

// Throws vllm::Error naming what cannot be compiled.
std::shared_ptr<const CompiledGrammar> compile(const OutputConstraint& c,
                                               std::shared_ptr<const TokenVocab> vocab);

class GrammarCache {
 public:
  // Also computes the Unicode class tables up front, so that no request waits for them.
  GrammarCache(std::shared_ptr<const TokenVocab> vocab, size_t capacity = 64);
  // Compiles outside the lock; errors are not cached.
  std::shared_ptr<const CompiledGrammar> get(const OutputConstraint& c);
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }

 private:
  std::shared_ptr<const TokenVocab> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // newest first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

}  // namespace vllm::structured
