// BertNormalizer and BertPreTokenizer. Each normalizer step maps one code point to zero or more
// code points, so the steps run as passes over the text in tokenizers' order.
#include "tokenizer/bert_text.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <span>

#include "tokenizer/unicode.h"

namespace vllm::tok {
namespace {

struct CharMap {
  char32_t cp;
  char32_t out[3];  // 0-padded
};
#include "tokenizer/unicode_bert_data.inc"

bool in_ranges(std::span<const CodeRange> ranges, char32_t c) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), c,
                                   [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != ranges.begin() && c <= std::prev(it)->last;
}

const CharMap* find_map(std::span<const CharMap> map, char32_t c) {
  const auto it = std::lower_bound(map.begin(), map.end(), c,
                                   [](const CharMap& m, char32_t v) { return m.cp < v; });
  return it != map.end() && it->cp == c ? &*it : nullptr;
}

void append_map(std::string& out, const CharMap& m) {
  for (char32_t c : m.out)
    if (c != 0) utf8_append(out, c);
}

// Calls fn(code point, out) for each code point of valid UTF-8 `text`; the result replaces it.
template <typename Fn>
void rewrite(std::string& text, Fn fn) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const char32_t c = utf8_next(text, i);
    if (!fn(c, out)) out.append(text, start, i - start);  // false: kept as is
  }
  text = std::move(out);
}

class BertNormalizer final : public Normalizer {
 public:
  explicit BertNormalizer(const BertNormalizerOptions& o)
      : clean_(o.clean_text),
        chinese_(o.handle_chinese_chars),
        strip_(o.strip_accents.value_or(o.lowercase)),
        lower_(o.lowercase) {}

  void normalize(std::string& text) const override {
    if (clean_)
      rewrite(text, [](char32_t c, std::string& out) {
        if (in_ranges(kBertRemoved, c)) return true;
        if (!in_ranges(kBertSpace, c)) return false;
        out += ' ';
        return true;
      });
    if (chinese_)
      rewrite(text, [](char32_t c, std::string& out) {
        if (c < 0x3400 || !in_ranges(kBertCjk, c)) return false;
        out += ' ';
        utf8_append(out, c);
        out += ' ';
        return true;
      });
    if (strip_)
      rewrite(text, [](char32_t c, std::string& out) {
        if (c < 0x80) return false;
        char32_t jamo[3];
        if (const int n = hangul::decompose(c, jamo)) {
          for (int k = 0; k < n; ++k) utf8_append(out, jamo[k]);
          return true;
        }
        if (in_ranges(kBertMarks, c)) return true;
        const CharMap* m = find_map(kBertStrip, c);
        if (m == nullptr) return false;
        append_map(out, *m);
        return true;
      });
    if (lower_)
      rewrite(text, [](char32_t c, std::string& out) {
        if (c < 0x80) {
          if (c < 'A' || c > 'Z') return false;
          out += static_cast<char>(c - 'A' + 'a');
          return true;
        }
        const CharMap* m = find_map(kBertLower, c);
        if (m == nullptr) return false;
        append_map(out, *m);
        return true;
      });
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

// Splits on whitespace (dropped) and isolates each punctuation character.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) {
      const std::string& s = p.text;
      size_t word = 0;  // start of the word being built
      auto flush = [&](size_t end) {
        if (end > word) out.push_back({s.substr(word, end - word), p.first && word == 0});
      };
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        const char32_t c = utf8_next(s, i);
        if (in_ranges(kBertSplitSpace, c)) {
          flush(start);
          word = i;
        } else if (in_ranges(kBertPunct, c)) {
          flush(start);
          out.push_back({s.substr(start, i - start), p.first && start == 0});
          word = i;
        }
      }
      flush(s.size());
    }
    pieces = std::move(out);
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_bert_normalizer(const BertNormalizerOptions& options) {
  return std::make_unique<BertNormalizer>(options);
}

std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer() {
  return std::make_unique<BertPreTokenizer>();
}

}  // namespace vllm::tok
