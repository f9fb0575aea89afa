// Added-token matching: a byte trie per token set, scanned for the leftmost-longest match, then
// tokenizers' single_word / lstrip / rstrip adjustments.
#include "tokenizer/added_vocab.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace vllm::tok {
namespace {

bool is_word_char(char32_t c) {
  if (c < 0x80)
    return c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  static const Regex word(R"(\w)");
  std::string s;
  utf8_append(s, c);
  bool found = false;
  word.for_each_match(s, [&](size_t, size_t) { found = true; });
  return found;
}

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return utf8_next(s, i);
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view key, int32_t token_index) {
  if (key.empty()) return;
  int32_t node = 0;
  for (unsigned char b : key) {
    const uint64_t edge = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges.find(edge);
    if (it == edges.end()) {
      it = edges.emplace(edge, static_cast<int32_t>(terminal.size())).first;
      terminal.push_back(-1);
    }
    node = it->second;
  }
  terminal[node] = token_index;
  first_bytes.set(static_cast<unsigned char>(key[0]));
}

void AddedVocab::add(AddedToken token) {
  if (token.content.empty()) return;
  if (auto it = by_content_.find(token.content); it != by_content_.end()) {
    tokens_[it->second] = token;
  } else {
    by_content_.emplace(token.content, static_cast<int32_t>(tokens_.size()));
    tokens_.push_back(token);
  }
  by_id_[token.id] = static_cast<size_t>(by_content_.at(token.content));
}

void AddedVocab::build(const Normalizer* normalizer) {
  raw_trie_ = Trie{};
  normalized_trie_ = Trie{};
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (!t.normalized) {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
      continue;
    }
    std::string content = t.content;
    if (normalizer) normalizer->normalize(content);
    normalized_trie_.insert(content, static_cast<int32_t>(i));
  }
}

std::vector<Span> AddedVocab::split(std::string_view text, bool normalized) const {
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  std::vector<Span> spans;
  if (text.empty()) return spans;
  if (trie.empty()) return {{0, text.size(), -1}};
  size_t start_offset = 0, pos = 0;
  while (pos < text.size()) {
    // Leftmost-longest match at or after pos.
    size_t m_start = 0, m_end = 0;
    int32_t m_token = -1;
    for (size_t i = pos; i < text.size() && m_token < 0; ++i) {
      if (!trie.first_bytes.test(static_cast<unsigned char>(text[i]))) continue;
      int32_t node = 0;
      for (size_t j = i; j < text.size(); ++j) {
        auto it = trie.edges.find((static_cast<uint64_t>(node) << 8) |
                                  static_cast<unsigned char>(text[j]));
        if (it == trie.edges.end()) break;
        node = it->second;
        if (trie.terminal[node] >= 0) {
          m_start = i;
          m_end = j + 1;
          m_token = trie.terminal[node];
        }
      }
    }
    if (m_token < 0) break;
    pos = m_end;
    const AddedToken& tok = tokens_[m_token];
    size_t start = m_start, stop = m_end;
    if (tok.single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      size_t k = stop;
      const bool stop_ok = stop == text.size() || !is_word_char(utf8_next(text, k));
      if (!start_ok || !stop_ok) continue;
    }
    if (start < start_offset) continue;
    if (tok.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t k = b;
        if (!is_whitespace(utf8_next(text, k))) break;
        s = b;
      }
      start = s;
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t k = stop;
        if (!is_whitespace(utf8_next(text, k))) break;
        stop = k;
      }
    }
    if (start_offset < start) spans.push_back({start_offset, start, -1});
    spans.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) spans.push_back({start_offset, text.size(), -1});
  return spans;
}

const AddedToken* AddedVocab::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocab::id_of(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

bool AddedVocab::is_special_content(std::string_view content) const {
  auto it = by_content_.find(content);
  return it != by_content_.end() && tokens_[it->second].special;
}

}  // namespace vllm::tok
