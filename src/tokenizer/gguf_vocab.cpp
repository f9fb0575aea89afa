// Building a Pipeline from GGUF tokenizer data: "gpt2" vocabularies get the Hugging Face
// pre-tokenizer that their tokenizer.ggml.pre names; "llama" (SentencePiece) vocabularies get BPE
// merges derived from the scores the way transformers' GGUF converter derives them.
#include <algorithm>

#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/check.h"

namespace vllm {
namespace {

constexpr int32_t kTypeControl = 3, kTypeUserDefined = 4;
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kDeepseekV3Patterns[] = {
    R"(\p{N}{1,3})",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};

// The Hugging Face pre-tokenizer (and normalizer) for a tokenizer.ggml.pre name.
void set_gpt2_pre(const std::string& pre, tok::Pipeline& p) {
  using tok::SplitBehavior;
  std::vector<std::unique_ptr<tok::PreTokenizer>> seq;
  if (pre == "default" || pre == "gpt2" || pre.empty()) {
    p.pre_tokenizer = tok::make_byte_level(false, true);
    return;
  }
  if (pre == "smollm" || pre == "starcoder") {
    seq.push_back(tok::make_digits(true));
    seq.push_back(tok::make_byte_level(false, true));
  } else if (pre == "llama-bpe" || pre == "llama3") {
    seq.push_back(tok::make_regex_split(kLlama3Pattern, SplitBehavior::kIsolated));
    seq.push_back(tok::make_byte_level(false, false));
  } else if (pre == "qwen2") {
    p.normalizer = tok::make_nfc_normalizer();
    seq.push_back(tok::make_regex_split(kQwen2Pattern, SplitBehavior::kIsolated));
    seq.push_back(tok::make_byte_level(false, false));
  } else if (pre == "deepseek-v3") {
    for (const char* re : kDeepseekV3Patterns)
      seq.push_back(tok::make_regex_split(re, SplitBehavior::kIsolated));
    seq.push_back(tok::make_byte_level(false, false));
  } else {
    throw Error("unsupported GGUF tokenizer.ggml.pre '" + pre +
                "' (supported: default, gpt2, llama-bpe, qwen2, smollm, starcoder, deepseek-v3)");
  }
  p.pre_tokenizer = tok::make_sequence_pre_tokenizer(std::move(seq));
}

// transformers' GGUFTokenizerSkeleton: for each token, every split into two vocabulary pieces,
// ordered by (score(left), score(right)) descending; then all merges ordered by the merged
// token's score descending (stable).
std::vector<std::pair<std::string, std::string>> merges_from_scores(const GgufVocab& v) {
  tok::TokenMap index;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    index.insert_or_assign(v.tokens[i], static_cast<int32_t>(i));
  auto score_of = [&](std::string_view t) { return v.scores[index.find(t)->second]; };
  struct Candidate {
    float score;
    std::string left, right;
  };
  std::vector<Candidate> all;
  std::vector<Candidate> local;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    local.clear();
    for (size_t cut = 0; cut < t.size();) {
      cut += tok::utf8_char_length(static_cast<unsigned char>(t[cut]));
      if (cut >= t.size()) break;
      const std::string_view l = std::string_view(t).substr(0, cut),
                             r = std::string_view(t).substr(cut);
      if (index.find(l) != index.end() && index.find(r) != index.end())
        local.push_back({v.scores[i], std::string(l), std::string(r)});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Candidate& a, const Candidate& b) {
      const float al = score_of(a.left), bl = score_of(b.left);
      if (al != bl) return al > bl;
      return score_of(a.right) > score_of(b.right);
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(all.size());
  for (auto& c : all) merges.emplace_back(std::move(c.left), std::move(c.right));
  return merges;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf_vocab(const GgufVocab& v) {
  const bool spm = v.model == "llama";
  if (!spm && v.model != "gpt2")
    throw Error("unsupported GGUF tokenizer.ggml.model '" + v.model + "' (supported: gpt2, llama)");
  VLLM_CHECK(!v.tokens.empty(), "GGUF vocabulary has no tokens");
  VLLM_CHECK(v.token_types.empty() || v.token_types.size() == v.tokens.size(),
             "GGUF token_type count differs from the token count");
  auto p = std::make_unique<tok::Pipeline>();
  auto token_at = [&](std::optional<int32_t> id) -> std::string {
    return id && *id >= 0 && static_cast<size_t>(*id) < v.tokens.size() ? v.tokens[*id]
                                                                        : std::string();
  };

  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i)
    vocab.emplace_back(v.tokens[i], static_cast<int32_t>(i));
  std::vector<std::pair<std::string, std::string>> merges;
  if (!v.merges.empty()) {
    for (const auto& m : v.merges) {
      const size_t sp = m.find(' ');
      if (sp == std::string::npos) throw Error("bad GGUF merge: " + m);
      merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  } else if (spm) {
    VLLM_CHECK(v.scores.size() == v.tokens.size(),
               "GGUF llama vocabulary needs one score per token");
    merges = merges_from_scores(v);
  }
  tok::BpeOptions options;
  // Llama 3's tokenizer.json looks whole words up before merging (llama.cpp does the same).
  options.ignore_merges = v.pre == "llama-bpe" || v.pre == "llama3";
  if (spm) {
    options.byte_fallback = true;
    options.fuse_unk = true;
    options.unk_token = token_at(v.unk_id);
    if (options.unk_token->empty()) options.unk_token = "<unk>";
  }
  p->model = std::make_unique<tok::BpeModel>(vocab, merges, std::move(options));

  if (spm) {
    const bool space_prefix = v.add_space_prefix.value_or(true);
    std::vector<std::unique_ptr<tok::Normalizer>> norm;
    if (space_prefix) norm.push_back(tok::make_prepend_normalizer("\u2581"));
    norm.push_back(tok::make_replace_normalizer(" ", "\u2581"));
    p->normalizer = tok::make_sequence_normalizer(std::move(norm));
    std::vector<std::unique_ptr<tok::Decoder>> dec;
    dec.push_back(tok::make_byte_fallback_decoder());
    dec.push_back(tok::make_fuse_decoder());
    dec.push_back(tok::make_replace_decoder("\u2581", " "));
    if (space_prefix) dec.push_back(tok::make_strip_decoder(" ", 1, 0));
    p->decoder = tok::make_sequence_decoder(std::move(dec));
  } else {
    set_gpt2_pre(v.pre, *p);
    p->decoder = tok::make_byte_level_decoder();
  }

  // As transformers builds it from a GGUF: control tokens and the bos/eos/unk/pad tokens are
  // special, user-defined tokens are plain added tokens.
  auto add = [&](int32_t id, bool special) {
    tok::AddedToken t;
    t.content = v.tokens[id];
    t.id = id;
    t.special = special;
    p->added.add(std::move(t));
  };
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    const int32_t type = v.token_types[i];
    if (type == kTypeControl || type == kTypeUserDefined)
      add(static_cast<int32_t>(i), type == kTypeControl);
  }
  for (const auto& id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id})
    if (!token_at(id).empty()) add(*id, true);

  p->bos_token = token_at(v.bos_id);
  p->eos_token = token_at(v.eos_id);
  // Without the keys, llama.cpp adds BOS for SentencePiece and Llama-3-style vocabularies.
  const bool bos_default = spm || v.pre == "llama-bpe" || v.pre == "llama3";
  if (v.add_bos.value_or(bos_default) && !p->bos_token.empty()) p->prefix_ids.push_back(*v.bos_id);
  if (v.add_eos.value_or(false) && !p->eos_token.empty()) p->suffix_ids.push_back(*v.eos_id);
  p->chat_template = v.chat_template;
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(p)));
}

}  // namespace vllm
