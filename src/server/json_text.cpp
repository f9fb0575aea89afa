// JSON text in Python's json.dumps(ensure_ascii=False) form, from complete or cut-off text:
// what vLLM's tool parsers write as a call's arguments. A cut-off value yields the form of the
// tokens it finishes, so the output for a prefix is a prefix of the output for the whole.
#include <cstring>

#include "server/tool_parser.h"

namespace vllm::server {
namespace {

class Normalizer {
 public:
  Normalizer(std::string_view t, size_t pos) : t_(t), p_(pos) {}

  NormalizedJson run() {
    NormalizedJson r;
    const Status s = value();
    r.out = std::move(out_);
    if (s == kDone) r.end = p_;
    r.error = s == kError;
    return r;
  }

 private:
  enum Status { kDone, kCut, kError };

  void ws() {
    while (p_ < t_.size() && std::strchr(" \t\r\n", t_[p_]) && t_[p_] != 0) ++p_;
  }
  bool at_end() const { return p_ >= t_.size(); }

  Status value() {
    ws();
    if (at_end()) return kCut;
    const char c = t_[p_];
    if (c == '{') return container('}', true);
    if (c == '[') return container(']', false);
    if (c == '"') return string();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    for (const char* lit : {"true", "false", "null"}) {
      const std::string_view l(lit);
      const std::string_view rest = t_.substr(p_, l.size());
      if (l.substr(0, rest.size()) != rest) continue;
      if (rest.size() < l.size()) return kCut;
      out_ += l;
      p_ += l.size();
      return kDone;
    }
    return kError;
  }

  Status container(char close, bool object) {
    // Model output is untrusted: nesting deeper than any real arguments is an error, not a
    // deep recursion.
    if (++depth_ > kMaxDepth) return kError;
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    out_ += t_[p_++];
    ws();
    if (at_end()) return kCut;
    if (t_[p_] == close) {
      out_ += close;
      ++p_;
      return kDone;
    }
    for (;;) {
      if (object) {
        ws();
        if (at_end()) return kCut;
        if (t_[p_] != '"') return kError;
        if (Status s = string(); s != kDone) return s;
        ws();
        if (at_end()) return kCut;
        if (t_[p_] != ':') return kError;
        ++p_;
        out_ += ": ";
      }
      if (Status s = value(); s != kDone) return s;
      ws();
      if (at_end()) return kCut;
      if (t_[p_] == ',') {
        ++p_;
        out_ += ", ";
        continue;
      }
      if (t_[p_] == close) {
        out_ += close;
        ++p_;
        return kDone;
      }
      return kError;
    }
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Four hex digits at `at`: the code unit, -1 when cut off, -2 when not hex.
  int unit(size_t at) const {
    if (at + 4 > t_.size()) return -1;
    int v = 0;
    for (size_t i = 0; i < 4; ++i) {
      const int h = hex(t_[at + i]);
      if (h < 0) return -2;
      v = v * 16 + h;
    }
    return v;
  }

  void put_code_point(uint32_t cp) {
    if (cp < 0x20 || cp == '"' || cp == '\\') {
      static const char* names[] = {"\\b", "\\t", "\\n", nullptr, "\\f", "\\r"};
      if (cp == '"') out_ += "\\\"";
      else if (cp == '\\') out_ += "\\\\";
      else if (cp >= 8 && cp <= 13 && names[cp - 8]) out_ += names[cp - 8];
      else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
        out_ += buf;
      }
      return;
    }
    if (cp < 0x80) {
      out_ += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out_ += static_cast<char>(0xC0 | (cp >> 6));
      out_ += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out_ += static_cast<char>(0xE0 | (cp >> 12));
      out_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out_ += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out_ += static_cast<char>(0xF0 | (cp >> 18));
      out_ += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out_ += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  Status string() {
    out_ += '"';
    ++p_;
    while (!at_end()) {
      const char c = t_[p_];
      if (c == '"') {
        out_ += '"';
        ++p_;
        return kDone;
      }
      if (static_cast<unsigned char>(c) < 0x20) return kError;
      if (c != '\\') {
        out_ += c;
        ++p_;
        continue;
      }
      if (p_ + 1 >= t_.size()) return kCut;
      const char e = t_[p_ + 1];
      if (e == 'u') {
        int u = unit(p_ + 2);
        if (u == -1) return kCut;
        if (u < 0) return kError;
        size_t used = 6;
        uint32_t cp = static_cast<uint32_t>(u);
        if (u >= 0xD800 && u <= 0xDBFF) {  // a surrogate pair needs its second half
          if (p_ + 8 > t_.size()) return kCut;
          if (t_[p_ + 6] != '\\' || t_[p_ + 7] != 'u') return kError;
          const int lo = unit(p_ + 8);
          if (lo == -1) return kCut;
          if (lo < 0xDC00 || lo > 0xDFFF) return kError;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (static_cast<uint32_t>(lo) - 0xDC00);
          used = 12;
        }
        put_code_point(cp);
        p_ += used;
        continue;
      }
      const char* from = "\"\\/bfnrt";
      const char* to = "\"\\/\b\f\n\r\t";
      const char* hit = std::strchr(from, e);
      if (!hit || e == 0) return kError;
      put_code_point(static_cast<unsigned char>(to[hit - from]));
      p_ += 2;
    }
    return kCut;
  }

  // Ints keep their digits; other numbers are written as Python writes the float.
  Status number() {
    size_t q = p_;
    if (t_[q] == '-') ++q;
    bool is_float = false;
    while (q < t_.size() && std::strchr("0123456789.eE+-", t_[q]) && t_[q] != 0) {
      is_float = is_float || t_[q] == '.' || t_[q] == 'e' || t_[q] == 'E';
      ++q;
    }
    if (q >= t_.size()) return kCut;  // more digits may follow
    const std::string_view lit = t_.substr(p_, q - p_);
    try {
      const ojson v = ojson::parse(lit);
      if (!v.is_number()) return kError;
      if (!is_float) {
        out_ += lit == "-0" ? "0" : std::string(lit);
      } else {
        out_ += ojson(v.get<double>()).dump();
      }
    } catch (const ojson::exception&) {
      return kError;
    }
    p_ = q;
    return kDone;
  }

  static constexpr int kMaxDepth = 128;
  std::string_view t_;
  size_t p_;
  std::string out_;
  int depth_ = 0;
};

}  // namespace

NormalizedJson normalize_json(std::string_view text, size_t pos) {
  return Normalizer(text, pos).run();
}

}  // namespace vllm::server
