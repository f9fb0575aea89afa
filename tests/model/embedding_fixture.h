// The embedding fixtures' vectors (fixtures/embeddings): base64 of little-endian f32.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace vllm {

inline std::vector<float> decode_f32_base64(const std::string& s) {
  auto value = [](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : 63;
  };
  std::vector<unsigned char> bytes;
  for (size_t i = 0; i + 3 < s.size(); i += 4) {
    const uint32_t chunk = value(s[i]) << 18 | value(s[i + 1]) << 12 |
                           (s[i + 2] == '=' ? 0 : value(s[i + 2]) << 6) |
                           (s[i + 3] == '=' ? 0 : value(s[i + 3]));
    bytes.push_back(chunk >> 16 & 0xFF);
    if (s[i + 2] != '=') bytes.push_back(chunk >> 8 & 0xFF);
    if (s[i + 3] != '=') bytes.push_back(chunk & 0xFF);
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t u = bytes[4 * i] | bytes[4 * i + 1] << 8 | bytes[4 * i + 2] << 16 |
                       static_cast<uint32_t>(bytes[4 * i + 3]) << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

}  // namespace vllm
