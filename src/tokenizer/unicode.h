// UTF-8 helpers for the tokenizer: validation, lossy repair (U+FFFD per maximal ill-formed subpart,
// the rule of Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy) and NFC.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vllm::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is ill-formed there.
size_t utf8_sequence_length(std::string_view s, size_t i);
bool utf8_is_valid(std::string_view s);
// Copies s, replacing each maximal ill-formed subpart with U+FFFD.
std::string utf8_lossy(std::string_view s);
// Length in bytes of a trailing incomplete (but so far well-formed) sequence: 0..3.
size_t utf8_incomplete_tail(std::string_view s);

// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
inline size_t utf8_char_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Rust char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t c);

// Canonical composition (Unicode NFC) of valid UTF-8.
std::string nfc(std::string_view s);

// An inclusive range of code points, as the generated Unicode tables (*.inc) list them.
struct CodeRange {
  char32_t first, last;
};

// Hangul syllables decompose and compose by arithmetic (Unicode 15, section 3.12).
namespace hangul {
inline constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
inline constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
inline constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// The two or three jamo of precomposed syllable c into out, and their count; 0 for any other c.
inline int decompose(char32_t c, char32_t out[3]) {
  if (c < kSBase || c >= kSBase + kSCount) return 0;
  const char32_t s = c - kSBase;
  out[0] = kLBase + s / kNCount;
  out[1] = kVBase + (s % kNCount) / kTCount;
  if (s % kTCount == 0) return 2;
  out[2] = kTBase + s % kTCount;
  return 3;
}

// The syllable that leading jamo + vowel, or LV syllable + trailing jamo, compose to; 0 for any
// other pair.
inline char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  return 0;
}
}  // namespace hangul

}  // namespace vllm::tok
