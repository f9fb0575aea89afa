#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/jinja_error.h"
#include "tokenizer/jinja_strings.h"

namespace vllm::jinja {
namespace {

std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Python's unicode-escape decoding of a string literal body.
std::string unescape(std::string_view s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        const char h = i + k < s.size() ? s[i + k] : 'g';
        const int d = is_digit(h) ? h - '0' : (h | 0x20) >= 'a' && (h | 0x20) <= 'f' ? (h | 0x20) - 'a' + 10 : -1;
        if (d < 0) unsupported("'truncated escape in string literal'", line);
        v = v * 16 + static_cast<uint32_t>(d);
      }
      i += n;
      if (v > 0x10ffff) unsupported("'escape beyond U+10FFFF in string literal'", line);
      text::append_utf8(out, v);
    };
    if (static_cast<unsigned char>(c) >= 0x80) {
      // jinja2 backslash-escapes non-ASCII before decoding, so "\é" reads as the text \xe9.
      size_t len = 1;
      while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xc0) == 0x80) ++len;
      const uint32_t cp = text::decode(s.substr(i, len))[0];
      char buf[16];
      std::snprintf(buf, sizeof(buf), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
      i += len - 1;
      continue;
    }
    switch (c) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      case 'N': unsupported("'\\N{...} escape'", line);
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = 0;
          size_t n = 0;
          while (n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7') v = v * 8 + (s[i++] - '0'), ++n;
          --i;
          text::append_utf8(out, v);
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t k = pos_;
      while (true) {
        k = src_.find('{', k);
        if (k == std::string::npos || k + 1 >= src_.size()) break;
        const char c = src_[k + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++k;
      }
      if (k == std::string::npos || k + 1 >= src_.size()) {
        emit_data(src_.substr(pos_));
        break;
      }
      lex_tag(k);
    }
    out_.push_back({TokenKind::Eof, "", line_});
    return std::move(out_);
  }

 private:
  bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  size_t skip_space(size_t p) const {
    return p + text::space_prefix(std::string_view(src_).substr(p));
  }

  void emit_data(std::string text, int newlines_in_source = -1) {
    const int line = line_;
    line_ += newlines_in_source >= 0 ? newlines_in_source
                                     : static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    if (!text.empty()) out_.push_back({TokenKind::Data, std::move(text), line});
  }

  // Applies '-' / lstrip_blocks to the text before a tag, then emits it.
  void emit_text_before(size_t end, char sign, bool is_variable) {
    std::string text = src_.substr(pos_, end - pos_);
    const int newlines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    if (sign == '-') {
      text.resize(text.size() - text::space_suffix(text));
    } else if (sign != '+' && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        const std::string_view tail = std::string_view(text).substr(l_pos);
        if (!tail.empty() && text::space_prefix(tail) == tail.size()) text.resize(l_pos);
      }
    }
    emit_data(std::move(text), newlines);
    pos_ = end;
  }

  void advance_to(size_t p) {
    line_ += static_cast<int>(std::count(src_.begin() + pos_, src_.begin() + p, '\n'));
    pos_ = p;
  }

  // After a block or comment end marker: '-' eats all whitespace, '+' nothing, else one '\n'.
  void finish_tag(size_t p, char sign, bool trim_newline) {
    if (sign == '-') p = skip_space(p);
    else if (sign != '+' && trim_newline && p < src_.size() && src_[p] == '\n') ++p;
    advance_to(p);
    line_starting_ = src_[p - 1] == '\n';
  }

  void lex_tag(size_t k) {
    const char kind = src_[k + 1];
    size_t p = k + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    if (kind == '%' && try_raw(k, p, sign)) return;
    emit_text_before(k, sign, kind == '{');
    advance_to(p);
    if (kind == '#') {
      const size_t q = src_.find("#}", p);
      if (q == std::string::npos) unsupported("'missing end of comment tag'", line_);
      const char end_sign = q > p && (src_[q - 1] == '-' || src_[q - 1] == '+') ? src_[q - 1] : 0;
      finish_tag(q + 2, end_sign, true);
      return;
    }
    out_.push_back({kind == '%' ? TokenKind::BlockBegin : TokenKind::VarBegin, "", line_});
    lex_expression(kind);
  }

  bool try_raw(size_t k, size_t p, char sign) {
    size_t q = skip_space(p);
    if (!at(q, "raw")) return false;
    q = skip_space(q + 3);
    char end_sign = 0;
    if (at(q, "-%}")) end_sign = '-', q += 3;
    else if (at(q, "%}")) q += 2;
    else return false;
    emit_text_before(k, sign, false);
    advance_to(q);
    if (end_sign == '-') advance_to(skip_space(q));
    // Body runs to the first {% endraw %}; the body text obeys the endraw tag's strip sign.
    for (size_t s = pos_;; ++s) {
      s = src_.find("{%", s);
      if (s == std::string::npos) unsupported("'missing end of raw directive'", line_);
      size_t e = s + 2;
      char body_sign = 0;
      if (e < src_.size() && (src_[e] == '-' || src_[e] == '+')) body_sign = src_[e++];
      e = skip_space(e);
      if (!at(e, "endraw")) continue;
      e = skip_space(e + 6);
      char close = 0;
      if (at(e, "+%}")) close = '+', e += 3;
      else if (at(e, "-%}")) close = '-', e += 3;
      else if (at(e, "%}")) e += 2;
      else continue;
      line_starting_ = src_[pos_ - 1] == '\n';
      emit_text_before(s, body_sign, false);
      advance_to(e);
      finish_tag(e, close, true);
      return true;
    }
  }

  void lex_expression(char kind) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) unsupported("'unexpected end of template inside a tag'", line_);
      if (balance.empty()) {
        if (kind == '%') {
          char end_sign = 0;
          size_t e = 0;
          if (at(pos_, "+%}")) end_sign = '+', e = pos_ + 3;
          else if (at(pos_, "-%}")) end_sign = '-', e = pos_ + 3;
          else if (at(pos_, "%}")) e = pos_ + 2;
          if (e) {
            out_.push_back({TokenKind::BlockEnd, "", line_});
            finish_tag(e, end_sign, true);
            return;
          }
        } else {
          size_t e = 0;
          char end_sign = 0;
          if (at(pos_, "-}}")) end_sign = '-', e = pos_ + 3;
          else if (at(pos_, "}}")) e = pos_ + 2;
          if (e) {
            out_.push_back({TokenKind::VarEnd, "", line_});
            finish_tag(e, end_sign, false);
            return;
          }
        }
      }
      const size_t ws = skip_space(pos_);
      if (ws != pos_) {
        advance_to(ws);
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(balance);
    }
  }

  bool lex_number() {
    if (!is_digit(src_[pos_])) return false;
    auto digits = [&](size_t p, bool hex) {  // (\d+_)*\d+
      auto ok = [&](size_t q) {
        return q < src_.size() && (hex ? std::isxdigit(static_cast<unsigned char>(src_[q])) != 0 : is_digit(src_[q]));
      };
      if (!ok(p)) return p;
      while (true) {
        while (ok(p)) ++p;
        if (src_[p] == '_' && ok(p + 1)) ++p;
        else return p;
      }
    };
    auto clean = [&](size_t b, size_t e) {
      std::string num;
      for (size_t i = b; i < e; ++i) {
        if (src_[i] != '_') num.push_back(src_[i]);
      }
      return num;
    };
    // Integers are int64 here (Python's are unbounded): a literal past that is refused, not
    // clamped to a different number.
    auto to_int = [&](const std::string& digits, int base, std::string_view text) {
      errno = 0;
      const long long v = std::strtoll(digits.c_str(), nullptr, base);
      if (errno == ERANGE)
        jinja::unsupported("integer literal " + std::string(text) + " (beyond 64 bits)", line_);
      return static_cast<int64_t>(v);
    };
    const char prefix = pos_ + 1 < src_.size() && src_[pos_] == '0' ? static_cast<char>(src_[pos_ + 1] | 0x20) : 0;
    if (prefix == 'x' || prefix == 'o' || prefix == 'b') {
      const size_t e = digits(pos_ + 2, true);
      Token t{TokenKind::Integer, src_.substr(pos_, e - pos_), line_};
      t.int_value = to_int(clean(pos_ + 2, e), prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2, t.value);
      out_.push_back(std::move(t));
      advance_to(e);
      return true;
    }
    const size_t int_end = digits(pos_, false);
    size_t end = int_end;
    bool is_float = false;
    if (pos_ == 0 || src_[pos_ - 1] != '.') {
      size_t p = int_end;
      if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) p = digits(p + 1, false), is_float = true;
      if (p < src_.size() && (src_[p] | 0x20) == 'e') {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        const size_t e = digits(q, false);
        if (e != q) p = e, is_float = true;
      }
      if (is_float) end = p;
    }
    const std::string num = clean(pos_, end);
    Token t{is_float ? TokenKind::Float : TokenKind::Integer, num, line_};
    if (is_float) t.float_value = std::strtod(num.c_str(), nullptr);
    else t.int_value = to_int(num, 10, num);
    out_.push_back(std::move(t));
    advance_to(end);
    return true;
  }

  bool lex_name() {
    if (!is_name_start(src_[pos_])) return false;
    size_t e = pos_;
    while (e < src_.size() && is_name_char(src_[e])) ++e;
    out_.push_back({TokenKind::Name, src_.substr(pos_, e - pos_), line_});
    advance_to(e);
    return true;
  }

  bool lex_string() {
    const char q = src_[pos_];
    if (q != '\'' && q != '"') return false;
    size_t e = pos_ + 1;
    while (e < src_.size() && src_[e] != q) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) unsupported("'unterminated string literal'", line_);
    const int line = line_;
    out_.push_back({TokenKind::String, unescape(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line), line});
    advance_to(e + 1);
    return true;
  }

  void lex_operator(std::vector<char>& balance) {
    static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                                "*", "%", "~", "[", "]", "(", ")", "{", "}", ">",
                                                "<", "=", ".", ":", "|", ",", ";"};
    for (std::string_view op : kOps) {
      if (!at(pos_, op)) continue;
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty() || balance.back() != op[0]) unsupported("'unexpected " + std::string(op) + "'", line_);
        balance.pop_back();
      }
      out_.push_back({TokenKind::Operator, std::string(op), line_});
      advance_to(pos_ + op.size());
      return;
    }
    unsupported("'unexpected char " + std::string(1, src_[pos_]) + "'", line_);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace vllm::jinja
