#include "structured/charset.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <mutex>

#include "tokenizer/unicode.h"

#include "util/check.h"

namespace vllm::structured {
namespace {

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (one encoded length) until every byte position spans a plain range, then
// emits one sequence of byte classes per piece.
void split(GrammarBuilder& g, uint32_t lo, uint32_t hi, std::vector<Seq>& out) {
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(g, lo, lo | m, out);
        split(g, (lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(g, lo, (hi & ~m) - 1, out);
        split(g, hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo), b = utf8_encode(hi);
  Seq s;
  for (int i = 0; i < n; ++i) {
    ByteSet set;
    set.add_range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
    s.push_back(g.cls(set));
  }
  out.push_back(std::move(s));
}

// The sequences as a trie of rules: those that start with the same byte class share it, so a
// matcher follows one path per lead byte instead of one per sequence.
Symbol merge_prefixes(GrammarBuilder& g, const std::vector<Seq>& seqs, size_t depth) {
  std::vector<Seq> alts;
  std::vector<std::pair<int32_t, std::vector<Seq>>> groups;  // first class -> the rests
  for (const Seq& s : seqs) {
    if (s.size() == depth) {
      alts.push_back({});
      continue;
    }
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& gr) { return gr.first == s[depth].id; });
    if (it == groups.end()) it = groups.insert(groups.end(), {s[depth].id, {}});
    it->second.push_back(s);
  }
  for (auto& [cls, rest] : groups) {
    const bool all_end = std::all_of(rest.begin(), rest.end(),
                                     [&](const Seq& s) { return s.size() == depth + 1; });
    if (all_end) alts.push_back({Symbol::bytes(cls)});
    else alts.push_back({Symbol::bytes(cls), merge_prefixes(g, rest, depth + 1)});
  }
  return g.rule_of("chars", std::move(alts));
}

}  // namespace

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

namespace {

// Code points whose one-character UTF-8 text fully matches `pattern` (a PCRE2 class).
CodepointRanges scan_class(const char* pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                                 &err, &off, nullptr);
  VLLM_CHECK(re, "PCRE2 rejected ", pattern);
  const bool jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  CodepointRanges out;
  for (uint32_t cp = 0; cp <= kMaxCodepoint; ++cp) {
    if (cp == 0xD800) cp = 0xE000;
    const std::string s = utf8_encode(cp);
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    const int rc = jit ? pcre2_jit_match(re, subject, s.size(), 0, 0, md, nullptr)
                       : pcre2_match(re, subject, s.size(), 0, 0, md, nullptr);
    if (rc < 0) continue;
    if (!out.empty() && out.back().second + 1 == cp) out.back().second = cp;
    else out.push_back({cp, cp});
  }
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return out;
}

}  // namespace

const CodepointRanges& unicode_class(char which) {
  static std::once_flag once;
  static CodepointRanges digit, word, space;
  std::call_once(once, [] {
    digit = scan_class("\\p{Nd}");
    // Decimal digits of Unicode 15 and 16, newer than this PCRE2's tables (Rust's regex, which
    // llguidance uses, has them).
    for (auto r : {std::pair<uint32_t, uint32_t>{0x10D40, 0x10D49}, {0x11BF0, 0x11BF9},
                   {0x116D0, 0x116E3}, {0x11F50, 0x11F59}, {0x16130, 0x16139}, {0x16D70, 0x16D79},
                   {0x1CCF0, 0x1CCF9}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}})
      digit.push_back(r);
    digit = normalize(digit);
    word = scan_class("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]");
    // CJK extensions H (Unicode 15.0) and I (15.1), a Lao mark and the newer digits: word
    // characters this PCRE2 does not know yet that the oracle walks met.
    word.push_back({0x31350, 0x323AF});
    word.push_back({0x0ECE, 0x0ECE});  // LAO YAMAKKAN, a mark since Unicode 15
    word.push_back({0x2EBF0, 0x2EE5D});
    word.insert(word.end(), digit.begin(), digit.end());
    word = normalize(word);
    for (uint32_t cp = 0; cp <= 0x3000; ++cp)
      if (tok::is_whitespace(static_cast<char32_t>(cp))) {
        if (!space.empty() && space.back().second + 1 == cp) space.back().second = cp;
        else space.push_back({cp, cp});
      }
  });
  switch (which) {
    case 'd': return digit;
    case 'w': return word;
    default: return space;
  }
}

CodepointRanges normalize(CodepointRanges r) {
  CodepointRanges cut;
  for (auto [lo, hi] : r) {  // drop the surrogates D800-DFFF
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  CodepointRanges out;
  for (auto [lo, hi] : cut) {
    if (!out.empty() && lo <= out.back().second + 1)
      out.back().second = std::max(out.back().second, hi);
    else
      out.push_back({lo, hi});
  }
  return out;
}

CodepointRanges complement(const CodepointRanges& r) {
  CodepointRanges n = normalize(r), out;
  uint32_t next = 0;
  for (auto [lo, hi] : n) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return normalize(out);
}

Symbol codepoints(GrammarBuilder& g, const CodepointRanges& r, const std::string& what) {
  const CodepointRanges n = normalize(r);
  if (n.empty()) throw Error(what + " matches no character");
  std::vector<Seq> alts;
  ByteSet ascii;
  for (auto [lo, hi] : n) {
    // Split by encoded length first.
    for (auto [a, b] : {std::pair<uint32_t, uint32_t>{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF},
                        {0x10000, kMaxCodepoint}}) {
      const uint32_t l = std::max(lo, a), h = std::min(hi, b);
      if (l > h) continue;
      if (b == 0x7F)
        ascii.add_range(static_cast<uint8_t>(l), static_cast<uint8_t>(h));
      else
        split(g, l, h, alts);
    }
  }
  if (!ascii.empty()) alts.insert(alts.begin(), Seq{g.cls(ascii)});
  if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
  return merge_prefixes(g, alts, 0);
}

}  // namespace vllm::structured
