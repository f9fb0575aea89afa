// PCRE2 wrapper: compile with UTF|UCP and JIT, iterate matches with a per-thread match block.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cstdio>
#include <iterator>
#include <vector>

#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm::tok {
namespace {

struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

#include "tokenizer/unicode_class_data.inc"

std::string format_ranges(const CodeRange* begin, const CodeRange* end) {
  std::string out;
  char buf[32];
  for (const CodeRange* r = begin; r != end; ++r) {
    if (r->first == r->last)
      std::snprintf(buf, sizeof(buf), "\\x{%X}", unsigned(r->first));
    else
      std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", unsigned(r->first), unsigned(r->last));
    out += buf;
  }
  return out;
}

// The members of a class escape, for use inside [...]: PCRE2's property plus the code points
// tokenizers' newer Unicode adds. Empty when the class is not one we adjust.
std::string class_members(std::string_view name) {
  auto with = [](const char* prop, const auto& extra) {
    return std::string(prop) + format_ranges(std::begin(extra), std::end(extra));
  };
  if (name == "s") return format_ranges(std::begin(kSpace), std::end(kSpace));
  if (name == "L") return with("\\p{L}", kLExtra);
  if (name == "N") return with("\\p{N}", kNExtra);
  if (name == "P") return with("\\p{P}", kPExtra);
  if (name == "S") return with("\\p{S}", kSExtra);
  if (name == "M") return with("\\p{M}", kMExtra);
  if (name == "RustNumeric") return with("\\p{N}", kRustNumericExtra);
  return {};
}

// The complement of \s, for \S inside [...].
std::string not_space_members() {
  std::vector<CodeRange> gaps;
  char32_t next = 0;
  for (const auto& r : kSpace) {
    if (r.first > next) gaps.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  gaps.push_back({next, 0x10FFFF});
  return format_ranges(gaps.data(), gaps.data() + gaps.size());
}

}  // namespace

// Rewrites \s, \S, \p{L|N|P|S|M} and \P{...} (and our \p{RustNumeric}) into explicit classes, so
// that PCRE2 matches the Unicode sets of tokenizers' Oniguruma; everything else is copied.
std::string oniguruma_compatible(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // literal ]
      continue;
    }
    if (c == '[' && in_class && pattern.compare(i, 2, "[:") == 0) {  // POSIX class
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (c == ']' && in_class) {
      in_class = false;
      out += c;
      continue;
    }
    if (c != '\\' || i + 1 >= pattern.size()) {
      out += c;
      continue;
    }
    const char e = pattern[i + 1];
    std::string name;
    size_t consumed = 2;
    if (e == 's' || e == 'S') {
      name = "s";
    } else if ((e == 'p' || e == 'P') && i + 2 < pattern.size()) {
      if (pattern[i + 2] == '{') {
        const size_t close = pattern.find('}', i + 3);
        if (close != std::string_view::npos) {
          name = std::string(pattern.substr(i + 3, close - i - 3));
          consumed = close + 1 - i;
        }
      } else {
        name = std::string(1, pattern[i + 2]);
        consumed = 3;
      }
    }
    const bool negated = e == 'S' || e == 'P';
    const std::string members = name.empty() ? std::string() : class_members(name);
    if (members.empty() || (negated && in_class && e == 'P')) {  // not ours to adjust
      out.append(pattern.substr(i, consumed));
    } else if (in_class) {
      out += negated ? not_space_members() : members;
    } else {
      out += negated ? "[^" : "[";
      out += members;
      out += "]";
    }
    i += consumed - 1;
  }
  return out;
}

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string compiled = oniguruma_compatible(pattern);
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr)
    throw Error("tokenizer regex does not compile at offset " + std::to_string(offset) + " (" +
                pcre2_message(err) + "): " + pattern);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when unsupported
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each_match(std::string_view text,
                           const std::function<void(size_t, size_t)>& on_match) const {
  auto& st = thread_state();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc =
        pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    VLLM_CHECK(rc >= 0, "regex match failed (", pcre2_message(rc), "): ", pattern_);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t start = ov[0], end = ov[1];
    if (end > start) {
      on_match(start, end);
      pos = end;
    } else {  // empty match: step over one character
      if (start >= text.size()) return;
      pos = start + utf8_char_length(static_cast<unsigned char>(text[start]));
    }
  }
}

}  // namespace vllm::tok
