// Normalizer implementations and their construction from tokenizer.json.
#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/bert_text.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm::tok {
namespace {

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = nfc(text); }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    if (!regex_) {
      if (!literal_.empty()) text = replace_all(text, literal_, content_);
      return;
    }
    std::string out;
    size_t prev = 0;
    regex_->for_each_match(text, [&](size_t start, size_t end) {
      out.append(text, prev, start - prev);
      out += content_;
      prev = end;
    });
    out.append(text, prev, std::string::npos);
    text = std::move(out);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!is_whitespace(utf8_next(text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!is_whitespace(utf8_next(text, i))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (size_t pos = text.find(from); pos != std::string_view::npos; pos = text.find(from, prev)) {
    out.append(text.substr(prev, pos - prev));
    out.append(to);
    prev = pos + from.size();
  }
  out.append(text.substr(prev));
  return out;
}

std::unique_ptr<Normalizer> make_nfc_normalizer() { return std::make_unique<NfcNormalizer>(); }
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix) {
  return std::make_unique<PrependNormalizer>(std::move(prefix));
}
std::unique_ptr<Normalizer> make_replace_normalizer(std::string pattern, std::string content) {
  return std::make_unique<ReplaceNormalizer>(std::move(pattern), nullptr, std::move(content));
}
std::unique_ptr<Normalizer> make_sequence_normalizer(
    std::vector<std::unique_ptr<Normalizer>> parts) {
  return std::make_unique<SequenceNormalizer>(std::move(parts));
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.at("type").get<std::string>();
  if (type == "NFC") return make_nfc_normalizer();
  if (type == "Prepend") return make_prepend_normalizer(j.at("prepend").get<std::string>());
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(j.value("strip_left", true),
                                             j.value("strip_right", true));
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    std::string content = j.at("content").get<std::string>();
    if (pat.contains("Regex"))
      return std::make_unique<ReplaceNormalizer>(
          "", std::make_unique<Regex>(pat["Regex"].get<std::string>()), std::move(content));
    return make_replace_normalizer(pat.at("String").get<std::string>(), std::move(content));
  }
  if (type == "BertNormalizer") {
    BertNormalizerOptions o;
    o.clean_text = j.value("clean_text", true);
    o.handle_chinese_chars = j.value("handle_chinese_chars", true);
    if (j.contains("strip_accents") && !j["strip_accents"].is_null())
      o.strip_accents = j["strip_accents"].get<bool>();
    o.lowercase = j.value("lowercase", true);
    return make_bert_normalizer(o);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& n : j.at("normalizers"))
      if (auto p = make_normalizer(n)) parts.push_back(std::move(p));
    return make_sequence_normalizer(std::move(parts));
  }
  throw Error("unsupported tokenizer normalizer type: " + type);
}

}  // namespace vllm::tok
