#include "structured/gbnf.h"

#include <map>
#include <string>

#include "structured/charset.h"
#include "util/check.h"

namespace vllm::structured {
namespace {

class GbnfParser {
 public:
  GbnfParser(GrammarBuilder& g, std::string_view t) : g_(g), t_(t) {}

  Symbol parse() {
    skip_space(true);
    while (i_ < t_.size()) {
      const std::string name = ident();
      if (name.empty()) fail("expected a rule name");
      skip_space(false);
      if (t_.substr(i_, 3) != "::=") fail("expected '::=' after '" + name + "'");
      i_ += 3;
      const int r = rule_id(name);
      if (defined_.count(name)) fail("rule '" + name + "' defined twice");
      defined_[name] = true;
      for (Seq& s : alternatives(false)) g_.add_alt(r, std::move(s));
      skip_space(true);
    }
    for (const auto& [name, id] : ids_)
      if (!defined_.count(name)) throw Error("grammar: rule '" + name + "' is used but not defined");
    auto it = ids_.find("root");
    if (it == ids_.end()) throw Error("grammar: no 'root' rule");
    return Symbol::rule(it->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    int line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    throw Error("grammar: " + what + " (line " + std::to_string(line) + ")");
  }

  int rule_id(const std::string& name) {
    auto [it, fresh] = ids_.emplace(name, 0);
    if (fresh) it->second = g_.new_rule(name);
    return it->second;
  }

  // Spaces and comments; newlines only when allowed (a newline ends a rule unless the next
  // line continues it, which the caller decides by looking for `name ::=`).
  void skip_space(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
  }
  std::string ident() {
    const size_t start = i_;
    while (i_ < t_.size() && ident_char(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  // True when the text from i_ (after spaces/newlines) starts a new rule definition.
  bool at_rule_start() {
    size_t k = i_;
    while (k < t_.size() && ident_char(t_[k])) ++k;
    if (k == i_) return false;
    while (k < t_.size() && (t_[k] == ' ' || t_[k] == '\t')) ++k;
    return t_.substr(k, 3) == "::=";
  }

  std::vector<Seq> alternatives(bool nested) {
    std::vector<Seq> alts{sequence(nested)};
    while (i_ < t_.size() && t_[i_] == '|') {
      ++i_;
      alts.push_back(sequence(nested));
    }
    return alts;
  }

  Seq sequence(bool nested) {
    Seq s;
    for (;;) {
      skip_space(true);
      if (i_ >= t_.size()) break;
      const char c = t_[i_];
      if (c == '|' || c == ')') break;
      if (!nested && at_rule_start()) break;
      Symbol a = atom();
      s.push_back(quantified(a));
    }
    return s;
  }

  int number() {
    const size_t start = i_;
    long v = 0;
    while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
      v = v * 10 + (t_[i_++] - '0');
      if (v > 100000) fail("a repetition bound this large");
    }
    return i_ == start ? -1 : static_cast<int>(v);
  }

  Symbol quantified(Symbol x) {
    for (;;) {
      if (i_ >= t_.size()) return x;
      const char c = t_[i_];
      if (c == '*' || c == '+' || c == '?') {
        ++i_;
        x = c == '*' ? g_.star(x) : c == '+' ? g_.plus(x) : g_.opt(x);
      } else if (c == '{') {
        ++i_;
        skip_space(false);
        const int lo = number();
        int hi = lo;
        skip_space(false);
        if (i_ < t_.size() && t_[i_] == ',') {
          ++i_;
          skip_space(false);
          hi = number();
        }
        skip_space(false);
        if (lo < 0 || i_ >= t_.size() || t_[i_] != '}') fail("a malformed {m,n}");
        ++i_;
        x = g_.repeat(x, lo, hi);
      } else {
        return x;
      }
    }
  }

  uint32_t next_cp() {
    const unsigned char c = static_cast<unsigned char>(t_[i_++]);
    if (c < 0x80) return c;
    const int len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = c & (0xFF >> (len + 1));
    for (int k = 1; k < len && i_ < t_.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(t_[i_++]) & 0x3F);
    return cp;
  }

  uint32_t char_or_escape() {
    if (i_ >= t_.size()) fail("unexpected end of text");
    if (t_[i_] != '\\') return next_cp();
    ++i_;
    if (i_ >= t_.size()) fail("a trailing backslash");
    const char c = t_[i_++];
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case '\\': return '\\';
      case '"': return '"';
      case '\'': return '\'';
      case '[': return '[';
      case ']': return ']';
      case '-': return '-';
      case '^': return '^';
      case 'x':
      case 'u':
      case 'U': {
        const int len = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < len; ++k) {
          if (i_ >= t_.size()) fail("a short escape");
          const char h = t_[i_++];
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) fail("a bad hex digit");
          v = v * 16 + d;
        }
        return v;
      }
      default: fail(std::string("the escape \\") + c + " is not supported");
    }
  }

  Symbol atom() {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      Seq s;
      while (i_ < t_.size() && t_[i_] != '"') {
        if (t_[i_] == '\n') fail("a newline inside a string");
        const std::string bytes = utf8_encode(char_or_escape());
        for (char b : bytes) s.push_back(g_.byte(static_cast<uint8_t>(b)));
      }
      if (i_ >= t_.size()) fail("an unterminated string");
      ++i_;
      return g_.rule_of("lit", {std::move(s)});
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (i_ < t_.size() && t_[i_] == '^') {
        negate = true;
        ++i_;
      }
      CodepointRanges r;
      while (i_ < t_.size() && t_[i_] != ']') {
        const uint32_t lo = char_or_escape();
        uint32_t hi = lo;
        if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
          ++i_;
          hi = char_or_escape();
        }
        if (hi < lo) fail("a class range with its ends reversed");
        r.push_back({lo, hi});
      }
      if (i_ >= t_.size()) fail("an unterminated '['");
      ++i_;
      return codepoints(g_, negate ? complement(r) : r, "grammar class");
    }
    if (c == '.') {
      ++i_;
      return codepoints(g_, {{0, kMaxCodepoint}}, "'.'");
    }
    if (c == '(') {
      ++i_;
      if (++depth_ > kMaxGroupDepth)
        fail("groups nested deeper than " + std::to_string(kMaxGroupDepth));
      std::vector<Seq> alts = alternatives(true);
      --depth_;
      skip_space(true);
      if (i_ >= t_.size() || t_[i_] != ')') fail("an unclosed '('");
      ++i_;
      return g_.rule_of("group", std::move(alts));
    }
    const std::string name = ident();
    if (name.empty()) fail(std::string("unexpected '") + c + "'");
    return Symbol::rule(rule_id(name));
  }

  GrammarBuilder& g_;
  std::string_view t_;
  size_t i_ = 0;
  int depth_ = 0;  // groups open around the parse position
  std::map<std::string, int> ids_;
  std::map<std::string, bool> defined_;
};

}  // namespace

Symbol gbnf_to_grammar(GrammarBuilder& g, std::string_view text) {
  return GbnfParser(g, text).parse();
}

}  // namespace vllm::structured
