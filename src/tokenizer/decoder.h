// Decoders of tokenizer.json (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, WordPiece,
// Sequence): a chain over the list of token strings, whose results are concatenated.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True when a run of byte tokens (<0xAB>) decodes as one unit (ByteFallback in the chain).
  virtual bool groups_byte_tokens() const { return false; }
};

// Builds from a tokenizer.json "decoder" value; nullptr for null.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j);

std::unique_ptr<Decoder> make_byte_level_decoder();
std::unique_ptr<Decoder> make_replace_decoder(std::string pattern, std::string content);
std::unique_ptr<Decoder> make_byte_fallback_decoder();
std::unique_ptr<Decoder> make_fuse_decoder();
std::unique_ptr<Decoder> make_strip_decoder(std::string content, size_t start, size_t stop);
std::unique_ptr<Decoder> make_sequence_decoder(std::vector<std::unique_ptr<Decoder>> parts);

// "<0xAB>" -> 0xAB.
std::optional<unsigned char> parse_byte_token(std::string_view token);

}  // namespace vllm::tok
