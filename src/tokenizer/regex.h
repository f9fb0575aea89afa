// PCRE2 regex (UTF + UCP, JIT) standing in for the Oniguruma patterns of tokenizer.json files.
// Thread-safe: match state lives in thread-local storage.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace vllm::tok {

class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(start, end) for each non-empty, non-overlapping match, left to right.
  // text must be valid UTF-8.
  void for_each_match(std::string_view text,
                      const std::function<void(size_t, size_t)>& on_match) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

// The pattern PCRE2 compiles: \\s, \\S and \\p{L|N|P|S|M} spelled out with tokenizers' Unicode sets
// (Oniguruma's \\s is White_Space; its Unicode is newer than PCRE2's). \\p{RustNumeric} is Rust's
// char::is_numeric, for Digits.
std::string oniguruma_compatible(std::string_view pattern);

}  // namespace vllm::tok
