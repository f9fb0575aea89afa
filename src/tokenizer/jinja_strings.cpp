#include "tokenizer/jinja_strings.h"

#include <algorithm>

#include "tokenizer/jinja_budget.h"

namespace vllm::jinja::text {

std::vector<uint32_t> decode(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1f) : n == 3 ? (b & 0x0f) : (b & 0x07);
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xc0) == 0x80;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (ok && n > 1) {
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[n] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (!ok) {
      out.push_back(0xdc00 + b);  // surrogateescape: re-encoded as the original byte
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xdc80 && cp <= 0xdcff) {
    out.push_back(static_cast<char>(cp - 0xdc00));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

std::string encode(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  end = std::min(end, cps.size());
  for (size_t i = begin; i < end; ++i) append_utf8(out, cps[i]);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t length(std::string_view s) { return is_ascii(s) ? s.size() : decode(s).size(); }

bool is_space(uint32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20);
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

bool is_printable(uint32_t cp) {
  struct Range { uint32_t lo, hi; };
  static constexpr Range kNonPrintable[] = {
      {0x0, 0x1f},       {0x7f, 0xa0},       {0xad, 0xad},       {0x600, 0x605},
      {0x61c, 0x61c},    {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},
      {0x8e2, 0x8e2},    {0x1680, 0x1680},   {0x180e, 0x180e},   {0x2000, 0x200f},
      {0x2028, 0x202f},  {0x205f, 0x2064},   {0x2066, 0x206f},   {0x3000, 0x3000},
      {0xd800, 0xf8ff},  {0xfeff, 0xfeff},   {0xfff9, 0xfffb},   {0xfffe, 0xffff},
      {0x110bd, 0x110bd}, {0x110cd, 0x110cd}, {0x13430, 0x13438}, {0x1bca0, 0x1bca3},
      {0x1d173, 0x1d17a}, {0xe0000, 0x10ffff}};
  for (const auto& r : kNonPrintable) {
    if (cp >= r.lo && cp <= r.hi) return false;
  }
  return true;
}

uint32_t to_upper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp == 0xb5) return 0x39c;
  if (cp == 0xff) return 0x178;
  if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) return cp - 32;
  if (cp >= 0x100 && cp <= 0x17e && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x178) {
    const bool odd_lower = (cp < 0x138) || (cp > 0x148 && cp < 0x178);
    if (odd_lower ? (cp & 1) : !(cp & 1)) return cp - 1;
    return cp;
  }
  if (cp == 0x3c2) return 0x3a3;
  if (cp >= 0x3b1 && cp <= 0x3c9) return cp - 32;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  return cp;
}

uint32_t to_lower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp == 0x178) return 0xff;
  if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 32;
  if (cp >= 0x100 && cp <= 0x17e && cp != 0x130 && cp != 0x138 && cp != 0x149) {
    const bool odd_lower = (cp < 0x138) || (cp > 0x148 && cp < 0x178);
    if (odd_lower ? !(cp & 1) : (cp & 1)) return cp + 1;
    return cp;
  }
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
  return cp;
}

bool is_alpha(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  if (to_upper(cp) != cp || to_lower(cp) != cp) return true;
  struct Range { uint32_t lo, hi; };
  // Letters of the common scripts without case (an approximation of str.isalpha()).
  static constexpr Range kLetters[] = {
      {0xaa, 0xaa},     {0xba, 0xba},     {0xdf, 0xdf},     {0x138, 0x138},   {0x149, 0x149},
      {0x180, 0x24f},   {0x5d0, 0x5ea},   {0x620, 0x64a},   {0x671, 0x6d3},   {0x904, 0x939},
      {0xe01, 0xe30},   {0x3041, 0x3096}, {0x30a1, 0x30fa}, {0x3400, 0x4dbf}, {0x4e00, 0x9fff},
      {0xac00, 0xd7a3}, {0xf900, 0xfaff}, {0x20000, 0x2fa1f}};
  for (const auto& r : kLetters) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

bool is_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

size_t space_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      if (!is_space(b)) break;
      ++i;
      continue;
    }
    const size_t n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
    const auto cps = decode(s.substr(i, n));
    if (cps.size() != 1 || !is_space(cps[0])) break;
    i += n;
  }
  return i;
}

size_t space_suffix(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80 && end - start < 4) {
      --start;
    }
    const auto cps = decode(s.substr(start, end - start));
    if (cps.size() != 1 || !is_space(cps[0])) break;
    end = start;
  }
  return s.size() - end;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  if (!chars) {
    if (left) s.remove_prefix(space_prefix(s));
    if (right) s.remove_suffix(space_suffix(s));
    return std::string(s);
  }
  const auto cps = decode(s);
  const auto set = decode(*chars);
  auto in_set = [&](uint32_t c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && in_set(cps[b])) ++b;
  if (right) while (e > b && in_set(cps[e - 1])) --e;
  return encode(cps, b, e);
}

static std::string map_chars(std::string_view s, uint32_t (*fn)(uint32_t)) {
  std::string out;
  out.reserve(s.size());
  for (uint32_t cp : decode(s)) append_utf8(out, fn(cp));
  return out;
}

std::string upper(std::string_view s) { return map_chars(s, to_upper); }
std::string lower(std::string_view s) { return map_chars(s, to_lower); }

std::string capitalize(std::string_view s) {
  auto cps = decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_upper(cps[i]) : to_lower(cps[i]);
  return encode(cps);
}

std::string title(std::string_view s) {
  auto cps = decode(s);
  bool prev_cased = false;
  for (auto& cp : cps) {
    const bool cased = to_upper(cp) != cp || to_lower(cp) != cp;
    if (cased) cp = prev_cased ? to_lower(cp) : to_upper(cp);
    prev_cased = cased;
  }
  return encode(cps);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit-- > 0) {
        const size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit-- > 0 && end >= sep->size()) {
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const auto cps = decode(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_space(cps[i])) ++i;
      if (i == cps.size()) break;
      if (maxsplit-- <= 0) {
        size_t e = cps.size();
        while (e > i && is_space(cps[e - 1])) --e;
        parts.push_back(encode(cps, i, e));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_space(cps[j])) ++j;
      parts.push_back(encode(cps, i, j));
      i = j;
    }
    return parts;
  }
  size_t e = cps.size();
  while (true) {
    while (e > 0 && is_space(cps[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit-- <= 0) {
      size_t b = 0;
      while (b < e && is_space(cps[b])) ++b;
      parts.push_back(encode(cps, b, e));
      break;
    }
    size_t b = e;
    while (b > 0 && !is_space(cps[b - 1])) --b;
    parts.push_back(encode(cps, b, e));
    e = b;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  const auto cps = decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c ||
                     c == 0x1d || c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i + 1;
    if (c == '\r' && end < cps.size() && cps[end] == '\n') ++end;
    lines.push_back(encode(cps, start, keepends ? end : i));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) lines.push_back(encode(cps, start, cps.size()));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with,
                    int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    const auto cps = decode(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count-- > 0) append_bounded(out, with);
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  while (count-- > 0) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    append_bounded(out, with);
    pos = hit + old.size();
  }
  out.append(s.substr(pos));
  return out;
}

size_t code_point_index(std::string_view s, size_t byte_offset) {
  return length(s.substr(0, byte_offset));
}

}  // namespace vllm::jinja::text
