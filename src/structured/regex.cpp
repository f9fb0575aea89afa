#include "structured/regex.h"

#include <string>

#include "structured/charset.h"
#include "util/check.h"

namespace vllm::structured {
namespace {

class RegexParser {
 public:
  RegexParser(GrammarBuilder& g, std::string_view p) : g_(g), p_(p) {}

  Symbol parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    Symbol s = alternation();
    if (i_ < p_.size()) fail("unbalanced ')'");
    return s;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("regex: " + what + " at offset " + std::to_string(i_) + " is not supported");
  }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  // One UTF-8 code point of the pattern.
  uint32_t next_cp() {
    const unsigned char c = static_cast<unsigned char>(p_[i_++]);
    if (c < 0x80) return c;
    const int len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = c & (0xFF >> (len + 1));
    for (int k = 1; k < len; ++k) {
      if (i_ >= p_.size()) fail("truncated UTF-8");
      cp = (cp << 6) | (static_cast<unsigned char>(p_[i_++]) & 0x3F);
    }
    return cp;
  }

  Symbol alternation() {
    std::vector<Seq> alts{sequence()};
    while (more() && peek() == '|') {
      ++i_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return g_.rule_of("regex_alt", std::move(alts));
  }

  Seq sequence() {
    Seq s;
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      Symbol atom_sym = atom();
      s.push_back(quantified(atom_sym));
    }
    return s;
  }

  int number() {
    const size_t start = i_;
    long v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > 1000000) fail("a repetition bound this large");
      ++i_;
    }
    if (i_ == start) return -1;
    return static_cast<int>(v);
  }

  // One quantifier and its lazy '?': a second one right after it (`a*{3}`, `a{0,}??{9}`) is
  // "multiple repeat" to Python's re, and ECMAScript refuses it too (found by
  // fuzz_request_json: stacked quantifiers over a nullable item made the matcher's parses
  // explode).
  Symbol quantified(Symbol x) {
    if (!more()) return x;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      x = c == '*' ? g_.star(x) : c == '+' ? g_.plus(x) : g_.opt(x);
    } else if (c == '{') {
      const size_t save = i_++;
      const int lo = number();
      int hi = lo;
      if (more() && peek() == ',') {
        ++i_;
        hi = number();  // -1: unbounded
      }
      if (lo < 0 || !more() || peek() != '}') {
        i_ = save;
        fail("'{' that is not a repetition {m}, {m,} or {m,n}");
      }
      ++i_;
      if (hi >= 0 && hi < lo) fail("a repetition {m,n} with n < m");
      x = g_.repeat(x, lo, hi);
    } else {
      return x;
    }
    if (more() && peek() == '?') ++i_;  // lazy: the same language
    if (more() && peek() == '+') fail("a possessive quantifier");
    if (more() && (peek() == '*' || peek() == '?' || peek() == '{'))
      fail("a quantifier right after another (multiple repeat)");
    return x;
  }

  CodepointRanges escape_class(char c, bool& is_class) {
    is_class = true;
    const CodepointRanges& digit = unicode_class('d');
    const CodepointRanges& word = unicode_class('w');
    const CodepointRanges& space = unicode_class('s');
    switch (c) {
      case 'd': return digit;
      case 'D': return complement(digit);
      case 'w': return word;
      case 'W': return complement(word);
      case 's': return space;
      case 'S': return complement(space);
      default: is_class = false; return {};
    }
  }

  // After a backslash: one code point (is_class false) or a class.
  CodepointRanges escape(bool in_class) {
    if (!more()) fail("a trailing backslash");
    const char c = p_[i_++];
    bool is_class;
    CodepointRanges r = escape_class(c, is_class);
    if (is_class) return r;
    auto one = [](uint32_t cp) { return CodepointRanges{{cp, cp}}; };
    switch (c) {
      case 'n': return one('\n');
      case 't': return one('\t');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'x':
      case 'u': {
        const int len = c == 'x' ? 2 : 4;
        if (i_ + len > p_.size()) fail("a short \\x or \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < len; ++k) {
          const char h = p_[i_++];
          int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) fail("a bad hex digit");
          v = v * 16 + d;
        }
        return one(v);
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
          --i_;
          fail(std::string("the escape \\") + c + (in_class ? " in a class" : ""));
        }
        --i_;
        return one(next_cp());
    }
  }

  CodepointRanges char_class() {  // after '['
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++i_;
    }
    CodepointRanges r;
    bool first = true;
    for (;;) {
      if (!more()) fail("an unterminated '['");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (peek() == '[') fail("a nested class or [: :] inside a class");
      CodepointRanges lo_set;
      uint32_t lo;
      if (peek() == '\\') {
        ++i_;
        lo_set = escape(true);
        if (lo_set.size() != 1 || lo_set[0].first != lo_set[0].second) {
          r.insert(r.end(), lo_set.begin(), lo_set.end());
          continue;
        }
        lo = lo_set[0].first;
      } else {
        lo = next_cp();
      }
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        if (peek() == '\\') {
          ++i_;
          CodepointRanges h = escape(true);
          if (h.size() != 1 || h[0].first != h[0].second) fail("a class as a range end");
          hi = h[0].first;
        } else {
          hi = next_cp();
        }
        if (hi < lo) fail("a range with its ends reversed");
        r.push_back({lo, hi});
      } else {
        r.push_back({lo, lo});
      }
    }
    return negate ? complement(r) : r;
  }

  Symbol atom() {
    const char c = peek();
    switch (c) {
      case '(': {
        ++i_;
        if (more() && peek() == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else if (i_ + 2 < p_.size() && p_[i_ + 1] == 'P' && p_[i_ + 2] == '<') {
            const size_t close = p_.find('>', i_);
            if (close == std::string_view::npos) fail("an unterminated group name");
            i_ = close + 1;
          } else if (i_ + 1 < p_.size() && p_[i_ + 1] == '<' ) {
            const size_t close = p_.find('>', i_);
            if (close == std::string_view::npos) fail("an unterminated group name");
            i_ = close + 1;
          } else {
            fail("the group form (?");
          }
        }
        if (++depth_ > kMaxGroupDepth)
          fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
        Symbol s = alternation();
        --depth_;
        if (!more() || peek() != ')') fail("an unclosed '('");
        ++i_;
        return s;
      }
      case '[': {
        ++i_;
        return codepoints(g_, char_class(), "the regex class");
      }
      case '.': {
        ++i_;
        return codepoints(g_, complement({{'\n', '\n'}}), "'.'");
      }
      case '\\': {
        ++i_;
        if (more() && (peek() == 'b' || peek() == 'B' || peek() == 'A' || peek() == 'z' ||
                       peek() == 'Z'))
          fail(std::string("the anchor \\") + peek());
        return codepoints(g_, escape(false), "the escape");
      }
      case '*':
      case '+':
      case '?':
      case '{':
        fail(std::string("a quantifier '") + c + "' with nothing before it");
      case '^':
      case '$':
        fail("an anchor inside the pattern");
      default: {
        const uint32_t cp = next_cp();
        if (cp < 0x80) return g_.byte(static_cast<uint8_t>(cp));
        return g_.lit(utf8_encode(cp));
      }
    }
  }

  GrammarBuilder& g_;
  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;  // groups open around the parse position
};

}  // namespace

Symbol regex_to_grammar(GrammarBuilder& g, std::string_view pattern) {
  return RegexParser(g, pattern).parse();
}

}  // namespace vllm::structured
