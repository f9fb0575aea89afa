// Decoder implementations (tokenizers' decode_chain semantics) and construction from JSON.
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/wordpiece.h"
#include "util/check.h"

namespace vllm::tok {
namespace {

// Joins the byte-level bytes of all tokens (a token with a character outside the alphabet
// contributes its raw UTF-8) and repairs the result as UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const auto& map = byte_level().char_to_byte;
    std::string bytes;
    for (const auto& t : tokens) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size() && mapped;) {
        const char32_t c = utf8_next(t, i);
        if (c < map.size() && map[c] >= 0)
          bytes.push_back(static_cast<char>(map[c]));
        else
          mapped = false;
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(tokens[i], replacement_, i == 0 && strip_first_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (pattern_.empty()) return;
    for (auto& t : tokens) t = replace_all(t, pattern_, content_);
  }

 private:
  std::string pattern_, content_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (utf8_is_valid(run))
        out.push_back(run);
      else
        for (size_t k = 0; k < run_tokens; ++k) out.emplace_back(kReplacementChar);
      run.clear();
      run_tokens = 0;
    };
    for (auto& t : tokens) {
      if (auto b = parse_byte_token(t)) {
        run.push_back(static_cast<char>(*b));
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
  bool groups_byte_tokens() const override { return true; }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (content_.empty()) return;
    const size_t n = content_.size();
    for (auto& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t k = 0; k < start_ && t.compare(begin, n, content_) == 0 && begin + n <= end; ++k)
        begin += n;
      for (size_t k = 0; k < stop_ && end >= begin + n && t.compare(end - n, n, content_) == 0; ++k)
        end -= n;
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }
  bool groups_byte_tokens() const override {
    for (const auto& p : parts_)
      if (p->groups_byte_tokens()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::optional<unsigned char> parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevelDecoder>(); }
std::unique_ptr<Decoder> make_replace_decoder(std::string pattern, std::string content) {
  return std::make_unique<ReplaceDecoder>(std::move(pattern), std::move(content));
}
std::unique_ptr<Decoder> make_byte_fallback_decoder() {
  return std::make_unique<ByteFallbackDecoder>();
}
std::unique_ptr<Decoder> make_fuse_decoder() { return std::make_unique<FuseDecoder>(); }
std::unique_ptr<Decoder> make_strip_decoder(std::string content, size_t start, size_t stop) {
  return std::make_unique<StripDecoder>(std::move(content), start, stop);
}
std::unique_ptr<Decoder> make_sequence_decoder(std::vector<std::unique_ptr<Decoder>> parts) {
  return std::make_unique<SequenceDecoder>(std::move(parts));
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return make_byte_level_decoder();
  if (type == "ByteFallback") return make_byte_fallback_decoder();
  if (type == "Fuse") return make_fuse_decoder();
  if (type == "WordPiece")
    return make_wordpiece_decoder(j.value("prefix", std::string("##")),
                                  j.value("cleanup", true));
  if (type == "Strip")
    return make_strip_decoder(j.at("content").get<std::string>(), j.value("start", size_t{0}),
                              j.value("stop", size_t{0}));
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    if (!pat.contains("String")) throw Error("unsupported Replace decoder pattern: " + pat.dump());
    return make_replace_decoder(pat["String"].get<std::string>(),
                                j.at("content").get<std::string>());
  }
  if (type == "Metaspace") {
    bool strip_first = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme"))
      strip_first = j["prepend_scheme"].get<std::string>() != "never";
    return std::make_unique<MetaspaceDecoder>(j.value("replacement", std::string("\u2581")),
                                              strip_first);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& d : j.at("decoders"))
      if (auto p = make_decoder(d)) parts.push_back(std::move(p));
    return make_sequence_decoder(std::move(parts));
  }
  throw Error("unsupported tokenizer decoder type: " + type);
}

}  // namespace vllm::tok
