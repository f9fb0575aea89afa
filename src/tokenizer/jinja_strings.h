// Python str semantics over UTF-8 std::string: indices count code points, whitespace is
// str.isspace(). Invalid bytes round-trip as U+DC80..U+DCFF (Python's surrogateescape).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::jinja::text {

std::vector<uint32_t> decode(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
std::string encode(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
bool is_ascii(std::string_view s);
size_t length(std::string_view s);

bool is_space(uint32_t cp);       // str.isspace()
bool is_printable(uint32_t cp);   // str.isprintable(), approximated outside Latin-1
uint32_t to_upper(uint32_t cp);   // simple case mapping: Latin, Greek, Cyrillic
uint32_t to_lower(uint32_t cp);
bool is_alpha(uint32_t cp);
bool is_digit(uint32_t cp);

// Length in bytes of the run of whitespace starting (or, for suffix, ending) at the given end.
size_t space_prefix(std::string_view s);
size_t space_suffix(std::string_view s);

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);   // str.capitalize()
std::string title(std::string_view s);        // str.title()
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
std::string replace(std::string_view s, std::string_view old, std::string_view with,
                    int64_t count);
// Byte offset -> code point index (for str.find results).
size_t code_point_index(std::string_view s, size_t byte_offset);

}  // namespace vllm::jinja::text
