// GPT-2 byte-level alphabet: every byte maps to one printable code point (bytes 0x21-0x7E,
// 0xA1-0xAC, 0xAE-0xFF map to themselves, the rest to U+0100 onwards, in byte order).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace vllm::tok {

struct ByteLevelAlphabet {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point
  std::array<int16_t, 0x144> char_to_byte;    // code point -> byte, -1 when not in the alphabet

  ByteLevelAlphabet() {
    char_to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      char_to_byte[cp] = static_cast<int16_t>(b);
      std::string& s = byte_to_utf8[b];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

inline const ByteLevelAlphabet& byte_level() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

// Maps raw bytes to their byte-level characters.
inline std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& a = byte_level();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += a.byte_to_utf8[b];
  return out;
}

}  // namespace vllm::tok
