// Unicode NFC (canonical decomposition, canonical ordering, canonical composition) over tables
// generated from the Unicode Character Database; Hangul syllables are handled algorithmically.
#include <algorithm>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode.h"

namespace vllm::tok {
namespace {

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;
  uint8_t excluded;
};
#include "tokenizer/unicode_nfc_data.inc"

struct Tables {
  std::unordered_map<char32_t, const Decomposition*> decomposition;
  std::unordered_map<uint64_t, char32_t> composition;  // (first << 21 | second) -> composite
  Tables() {
    for (const auto& d : kDecomposition) {
      decomposition.emplace(d.cp, &d);
      if (d.second != 0 && !d.excluded)
        composition.emplace((static_cast<uint64_t>(d.first) << 21) | d.second, d.cp);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto* end = std::end(kCombiningClass);
  const auto* it = std::upper_bound(std::begin(kCombiningClass), end, c,
                                    [](char32_t v, const CccRange& r) { return v < r.first; });
  if (it == std::begin(kCombiningClass)) return 0;
  --it;
  return c <= it->last ? it->ccc : 0;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  char32_t jamo[3];
  if (const int n = hangul::decompose(c, jamo)) {
    out.insert(out.end(), jamo, jamo + n);
    return;
  }
  const auto& map = tables().decomposition;
  const auto it = c < 0xC0 ? map.end() : map.find(c);
  if (it == map.end()) {
    out.push_back(c);
    return;
  }
  decompose(it->second->first, out);
  if (it->second->second != 0) decompose(it->second->second, out);
}

std::optional<char32_t> compose_pair(char32_t a, char32_t b) {
  if (const char32_t syllable = hangul::compose(a, b)) return syllable;
  const auto& map = tables().composition;
  const auto it = map.find((static_cast<uint64_t>(a) << 21) | b);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::string nfc(std::string_view s) {
  bool ascii = true;
  for (char ch : s) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(s);

  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) decompose(utf8_next(s, i), cps);
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = combining_class(cps[i]);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint8_t, char32_t>> run;
      for (size_t k = i; k < j; ++k) run.emplace_back(ccc[k], cps[k]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) std::tie(ccc[k], cps[k]) = run[k - i];
    }
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out_cps;
  std::vector<uint8_t> out_ccc;
  out_cps.reserve(cps.size());
  std::optional<size_t> starter;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const uint8_t cc = ccc[i];
    if (starter) {
      const uint8_t last = out_ccc.back();
      const bool blocked = out_cps.size() - 1 != *starter && (last == 0 || last >= cc);
      if (!blocked) {
        if (auto composite = compose_pair(out_cps[*starter], c)) {
          out_cps[*starter] = *composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = out_cps.size();
    out_cps.push_back(c);
    out_ccc.push_back(cc);
  }
  std::string out;
  out.reserve(s.size());
  for (char32_t c : out_cps) utf8_append(out, c);
  return out;
}

}  // namespace vllm::tok
