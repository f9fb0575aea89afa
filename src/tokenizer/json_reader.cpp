// SAX handler that builds a DOM for the small parts of tokenizer.json and collects the vocabulary
// and merges directly.
#include "tokenizer/json_reader.h"

#include <fstream>
#include <sstream>

#include "util/check.h"

namespace vllm::tok {
namespace {

using nlohmann::json;

class Handler : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool binary(binary_t&) override { return false; }

  bool string(string_t& v) override {
    if (section_ == Section::kMerges) {
      if (merge_depth_ == 1) {
        merge_pair_.push_back(std::move(v));
        return true;
      }
      const size_t sp = v.find(' ');
      if (sp == std::string::npos) throw Error("bad BPE merge: " + v);
      out_.merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      return true;
    }
    return value(std::move(v));
  }

  bool key(string_t& k) override {
    if (section_ == Section::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (section_ != Section::kNone) return false;
    if (stack_.size() == 2 && stack_.back()->is_object() && path_model() && key_ == "vocab") {
      section_ = Section::kVocab;
      return true;
    }
    return push(json::object());
  }
  bool end_object() override {
    if (section_ == Section::kVocab) {
      section_ = Section::kNone;
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool start_array(std::size_t) override {
    if (section_ == Section::kMerges) {
      if (merge_depth_ != 0) return false;
      merge_depth_ = 1;
      merge_pair_.clear();
      return true;
    }
    if (stack_.size() == 2 && path_model() && key_ == "merges") {
      section_ = Section::kMerges;
      return true;
    }
    return push(json::array());
  }
  bool end_array() override {
    if (section_ == Section::kMerges) {
      if (merge_depth_ == 1) {
        if (merge_pair_.size() != 2) throw Error("bad BPE merge: expected two strings");
        out_.merges.emplace_back(std::move(merge_pair_[0]), std::move(merge_pair_[1]));
        merge_depth_ = 0;
      } else {
        section_ = Section::kNone;
      }
      return true;
    }
    stack_.pop_back();
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    throw Error("bad JSON at byte " + std::to_string(position) + ": " + e.what());
  }

 private:
  enum class Section { kNone, kVocab, kMerges };

  // True when the open container is the top-level "model" object.
  bool path_model() const { return model_ != nullptr && stack_.back() == model_; }

  template <typename T>
  bool value(T&& v) {
    if (section_ == Section::kVocab) {
      if constexpr (std::is_arithmetic_v<std::decay_t<T>>) {
        out_.vocab.emplace_back(std::move(vocab_key_), static_cast<int32_t>(v));
        return true;
      }
      throw Error("vocabulary ids must be numbers");
    }
    if (section_ == Section::kMerges) return false;
    insert(json(std::forward<T>(v)));
    return true;
  }

  json* insert(json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }

  bool push(json&& container) {
    const bool is_model = stack_.size() == 1 && key_ == "model";
    json* p = insert(std::move(container));
    stack_.push_back(p);
    if (is_model) model_ = p;
    return true;
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;
  std::string key_, vocab_key_;
  json* model_ = nullptr;
  Section section_ = Section::kNone;
  int merge_depth_ = 0;
  std::vector<std::string> merge_pair_;
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  TokenizerJson out;
  Handler handler(out);
  try {
    if (!json::sax_parse(text, &handler)) throw Error("unexpected vocab or merges layout");
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  if (!out.doc.is_object()) throw Error(path + ": not a JSON object");
  return out;
}

}  // namespace vllm::tok
