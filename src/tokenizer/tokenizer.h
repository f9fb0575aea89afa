// Public tokenizer API: Hugging Face tokenizer.json pipelines and GGUF vocabularies, encode and
// decode byte-exact with HF `tokenizers`, plus per-request streaming detokenization.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vllm {

// Plain data read from a GGUF's tokenizer.ggml.* keys by the caller.
struct GgufVocab {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE by scores)
  std::string pre;    // tokenizer.ggml.pre: "default", "gpt2", "llama-bpe", "qwen2", "smollm", ...
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // 1 normal, 2 unknown, 3 control, 4 user defined, 6 byte
  std::vector<float> scores;
  std::vector<std::string> merges;  // "a b"
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::optional<std::string> chat_template;
};

namespace tok {
struct Pipeline;
}

class Tokenizer {
 public:
  // tokenizer_config_json may be "" (no config: no bos/eos strings, no chat template).
  static std::unique_ptr<Tokenizer> from_files(const std::string& tokenizer_json,
                                               const std::string& tokenizer_config_json);
  // dir/tokenizer.json plus dir/tokenizer_config.json when present.
  static std::unique_ptr<Tokenizer> from_dir(const std::string& dir);
  static std::unique_ptr<Tokenizer> from_gguf_vocab(const GgufVocab& v);
  ~Tokenizer();

  // Invalid UTF-8 in text is replaced first: U+FFFD per maximal ill-formed subpart.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids outside the vocabulary are skipped, as tokenizers does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::string id_to_token(int32_t id) const;  // "" when the id is unknown
  std::optional<int32_t> token_to_id(std::string_view token) const;
  int32_t vocab_size() const;  // highest id + 1, added tokens included
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  bool is_special(int32_t id) const;
  std::string bos_token() const;  // strings for chat templates ("" if none)
  std::string eos_token() const;
  const std::optional<std::string>& chat_template() const;

  const tok::Pipeline& pipeline() const { return *pipeline_; }

 private:
  explicit Tokenizer(std::unique_ptr<tok::Pipeline> pipeline);
  std::unique_ptr<tok::Pipeline> pipeline_;
};

// Streams the text of one request's generated tokens. push() returns the text that became final
// with this token (possibly ""), never a partial UTF-8 character; finish() returns what is still
// held back (an incomplete tail decodes as U+FFFD). push deltas + finish() == decode(ids) with
// the same skip_special_tokens. Context ids (a prompt's last tokens) only condition the text, so
// that e.g. the leading space of the first generated word survives SentencePiece decoding.
class IncrementalDetokenizer {
 public:
  // Keeps a reference to tokenizer, which must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false,
                         std::span<const int32_t> context = {});
  std::string push(int32_t id);
  std::string finish();
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  bool holding() const;
  std::string take(const std::string& text);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;     // generated ids
  std::vector<int32_t> window_;  // recent tokens: a few already emitted ones, then pending ones
  std::string prefix_text_;      // decode(window_) at the last emission point
};

}  // namespace vllm
