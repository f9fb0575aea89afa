// The encode/decode pipeline (tokenizers' encode_single_sequence and decode) and Tokenizer's
// accessors.
#include "tokenizer/tokenizer.h"

#include "tokenizer/pipeline.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm {
namespace tok {

void Pipeline::finalize() {
  VLLM_CHECK(model != nullptr, "tokenizer pipeline without a model");
  added.build(normalizer.get());
  int32_t limit = model->id_limit();
  for (const auto& t : added.tokens()) limit = std::max(limit, t.id + 1);
  id_to_token.assign(limit, {});
  id_flags.assign(limit, 0);
  for (int32_t id = 0; id < model->id_limit(); ++id)
    if (const std::string* t = model->id_to_token(id)) {
      id_to_token[id] = *t;
      id_flags[id] = 1;
    }
  for (const auto& t : added.tokens()) {
    id_to_token[t.id] = t.content;
    id_flags[t.id] = 1;
  }
  for (int32_t id = 0; id < limit; ++id) {
    if (!(id_flags[id] & 1)) continue;
    if (added.is_special_content(id_to_token[id])) id_flags[id] |= 2;
    if (parse_byte_token(id_to_token[id])) id_flags[id] |= 4;
  }
}

void Pipeline::encode(std::string_view text, bool add_special_tokens,
                      std::vector<int32_t>& out) const {
  std::string repaired;
  if (!utf8_is_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  if (add_special_tokens) out.insert(out.end(), prefix_ids.begin(), prefix_ids.end());
  std::vector<Piece> words;
  for (const Span& raw : added.split(text, /*normalized=*/false)) {
    if (raw.id >= 0) {
      out.push_back(raw.id);
      continue;
    }
    std::string piece(text.substr(raw.start, raw.end - raw.start));
    if (normalizer) normalizer->normalize(piece);
    for (const Span& sub : added.split(piece, /*normalized=*/true)) {
      if (sub.id >= 0) {
        out.push_back(sub.id);
        continue;
      }
      words.clear();
      words.push_back(
          {piece.substr(sub.start, sub.end - sub.start), raw.start == 0 && sub.start == 0});
      if (pre_tokenizer) pre_tokenizer->pre_tokenize(words);
      for (const Piece& w : words) model->tokenize(w.text, out);
    }
  }
  if (add_special_tokens) out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
}

std::string Pipeline::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (!known(id) || (skip_special_tokens && special(id))) continue;
    tokens.push_back(id_to_token[id]);
  }
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace tok

Tokenizer::Tokenizer(std::unique_ptr<tok::Pipeline> pipeline) : pipeline_(std::move(pipeline)) {
  pipeline_->finalize();
}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  pipeline_->encode(text, add_special_tokens, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return pipeline_->decode(ids, skip_special_tokens);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  return pipeline_->known(id) ? pipeline_->id_to_token[id] : std::string();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = pipeline_->added.id_of(token)) return id;
  return pipeline_->model->token_to_id(token);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(pipeline_->id_flags.size()); }

std::optional<int32_t> Tokenizer::bos_id() const {
  if (pipeline_->bos_token.empty()) return std::nullopt;
  return token_to_id(pipeline_->bos_token);
}

std::optional<int32_t> Tokenizer::eos_id() const {
  if (pipeline_->eos_token.empty()) return std::nullopt;
  return token_to_id(pipeline_->eos_token);
}

bool Tokenizer::is_special(int32_t id) const { return pipeline_->special(id); }
std::string Tokenizer::bos_token() const { return pipeline_->bos_token; }
std::string Tokenizer::eos_token() const { return pipeline_->eos_token; }
const std::optional<std::string>& Tokenizer::chat_template() const {
  return pipeline_->chat_template;
}

}  // namespace vllm
