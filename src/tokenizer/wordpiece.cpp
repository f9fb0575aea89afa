// WordPiece model and decoder.
#include "tokenizer/wordpiece.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm::tok {

WordPieceModel::WordPieceModel(const std::vector<std::pair<std::string, int32_t>>& vocab,
                               WordPieceOptions options)
    : options_(std::move(options)) {
  for (const auto& [token, id] : vocab) {
    if (id < 0) throw Error("WordPiece vocabulary: negative id for '" + token + "'");
    vocab_[token] = id;
    if (id >= static_cast<int32_t>(id_to_token_.size())) {
      id_to_token_.resize(id + 1);
      has_id_.resize(id + 1, false);
    }
    id_to_token_[id] = token;
    has_id_[id] = true;
  }
  const auto unk = token_to_id(options_.unk_token);
  if (!unk)
    throw Error("WordPiece: the unk token '" + options_.unk_token + "' is not in the vocabulary");
  unk_id_ = *unk;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  // Character boundaries of the word (valid UTF-8: the pipeline repairs its input first).
  std::vector<size_t> bounds;
  for (size_t i = 0; i < word.size(); i += utf8_char_length(static_cast<unsigned char>(word[i])))
    bounds.push_back(i);
  if (bounds.size() > options_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  bounds.push_back(word.size());
  const size_t mark = out.size();
  std::string piece;
  size_t start = 0;  // index into bounds
  while (start + 1 < bounds.size()) {
    std::optional<int32_t> found;
    size_t end = bounds.size() - 1;
    for (; end > start; --end) {
      const std::string_view sub = word.substr(bounds[start], bounds[end] - bounds[start]);
      if (start == 0) {
        found = token_to_id(sub);
      } else {
        piece.assign(options_.continuing_subword_prefix).append(sub);
        found = token_to_id(piece);
      }
      if (found) break;
    }
    if (!found) {  // one unknown part makes the whole word unknown
      out.resize(mark);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(*found);
    start = end;
  }
}

std::optional<int32_t> WordPieceModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

namespace {

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t.insert(t.begin(), ' ');
      }
      if (cleanup_) t = cleanup(t);
    }
  }

 private:
  // tokenizers' wordpiece::cleanup, in its order.
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},           {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},         {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules)
      if (s.find(from) != std::string::npos) s = replace_all(s, from, to);
    return s;
  }

  std::string prefix_;
  bool cleanup_;
};

}  // namespace

std::unique_ptr<Decoder> make_wordpiece_decoder(std::string prefix, bool cleanup) {
  return std::make_unique<WordPieceDecoder>(std::move(prefix), cleanup);
}

}  // namespace vllm::tok
