// Pre-tokenizer implementations and their construction from tokenizer.json.
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/bert_text.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "util/check.h"

namespace vllm::tok {
namespace {

// prefix + text (spelled out: GCC 12 reports a false -Wrestrict for string::insert(0, ...)).
std::string prefixed(std::string_view prefix, const std::string& text) {
  std::string out;
  out.reserve(prefix.size() + text.size());
  out.append(prefix);
  out.append(text);
  return out;
}

struct Segment {
  size_t start, end;
  bool is_match;
};

// Applies a split behavior to the segments that cover a piece (tokenizers' SplitDelimiterBehavior).
std::vector<Segment> apply_behavior(std::vector<Segment> segs, SplitBehavior behavior) {
  std::vector<Segment> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& s : segs)
        if (!s.is_match) out.push_back(s);
      return out;
    case SplitBehavior::kIsolated:
      return segs;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& s : segs) {
        if (s.is_match && !previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty())
          out.back().start = it->start;
        else
          out.push_back(*it);
        previous_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < segs.size(); ++i) {
        if (i > 0 && segs[i].is_match == previous_match)
          out.back().end = segs[i].end;
        else
          out.push_back(segs[i]);
        previous_match = segs[i].is_match;
      }
      return out;
  }
  return segs;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string literal, std::unique_ptr<Regex> regex, SplitBehavior behavior,
                    bool invert)
      : literal_(std::move(literal)),
        regex_(std::move(regex)),
        behavior_(behavior),
        invert_(invert) {}

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (auto& piece : pieces) {
      const std::string& t = piece.text;
      std::vector<Segment> segs;
      size_t prev = 0;
      auto on_match = [&](size_t start, size_t end) {
        if (prev != start) segs.push_back({prev, start, invert_});
        segs.push_back({start, end, !invert_});
        prev = end;
      };
      if (regex_) {
        regex_->for_each_match(t, on_match);
      } else if (!literal_.empty()) {
        for (size_t p = t.find(literal_); p != std::string::npos; p = t.find(literal_, prev))
          on_match(p, p + literal_.size());
      }
      if (prev != t.size()) segs.push_back({prev, t.size(), invert_});
      for (const auto& s : apply_behavior(std::move(segs), behavior_))
        if (s.end > s.start)
          out.push_back({t.substr(s.start, s.end - s.start), piece.first && s.start == 0});
    }
    pieces = std::move(out);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        split_(use_regex ? make_regex_split(kGpt2Pattern, SplitBehavior::kIsolated) : nullptr) {}

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text = prefixed(" ", p.text);
    if (split_) split_->pre_tokenize(pieces);
    for (auto& p : pieces) p.text = bytes_to_byte_level(p.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<PreTokenizer> split_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split ? std::make_unique<SplitPreTokenizer>(replacement_, nullptr,
                                                           SplitBehavior::kMergedWithNext, false)
                     : nullptr) {}

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces) {
      p.text = replace_all(p.text, " ", replacement_);
      const bool want = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.first);
      if (want && p.text.rfind(replacement_, 0) != 0) p.text = prefixed(replacement_, p.text);
    }
    if (split_) split_->pre_tokenize(pieces);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  std::unique_ptr<PreTokenizer> split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

SplitBehavior parse_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  throw Error("unsupported Split behavior: " + s);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_regex_split(const std::string& regex, SplitBehavior behavior,
                                               bool invert) {
  return std::make_unique<SplitPreTokenizer>("", std::make_unique<Regex>(regex), behavior, invert);
}
std::unique_ptr<PreTokenizer> make_byte_level(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> make_digits(bool individual_digits) {
  return make_regex_split(individual_digits ? R"(\p{RustNumeric})" : R"(\p{RustNumeric}+)",
                          SplitBehavior::kIsolated);
}
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> parts) {
  return std::make_unique<SequencePreTokenizer>(std::move(parts));
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.at("type").get<std::string>();
  if (type == "Split") {
    const auto& pat = j.at("pattern");
    const SplitBehavior behavior = parse_behavior(j.at("behavior").get<std::string>());
    const bool invert = j.value("invert", false);
    if (pat.contains("Regex"))
      return make_regex_split(pat["Regex"].get<std::string>(), behavior, invert);
    return std::make_unique<SplitPreTokenizer>(pat.at("String").get<std::string>(), nullptr,
                                               behavior, invert);
  }
  if (type == "ByteLevel")
    return make_byte_level(j.value("add_prefix_space", true), j.value("use_regex", true));
  if (type == "Digits") return make_digits(j.value("individual_digits", false));
  if (type == "BertPreTokenizer") return make_bert_pre_tokenizer();
  if (type == "Metaspace") {
    using P = MetaspacePreTokenizer::Prepend;
    P prepend = j.value("add_prefix_space", true) ? P::kAlways : P::kNever;
    if (j.contains("prepend_scheme")) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      prepend = s == "first" ? P::kFirst : s == "never" ? P::kNever : P::kAlways;
    }
    return std::make_unique<MetaspacePreTokenizer>(j.value("replacement", std::string("\u2581")),
                                                   prepend, j.value("split", true));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : j.at("pretokenizers"))
      if (auto x = make_pre_tokenizer(p)) parts.push_back(std::move(x));
    return make_sequence_pre_tokenizer(std::move(parts));
  }
  throw Error("unsupported tokenizer pre_tokenizer type: " + type);
}

}  // namespace vllm::tok
