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
// DeepSeek-LLM / DeepSeek-V2 ("deepseek-llm"): llama.cpp's list for that name, applied in turn
// (cased letters of many scripts with an optional leading space, ASCII and full-width
// punctuation likewise, trailing spaces, CJK and Hangul runs, digit runs). llama.cpp matches
// these patterns against text whose non-ASCII whitespace has been replaced by \v, so such
// characters are \s but never inside a class's ranges: the ranges here leave them out
// (U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000).
constexpr const char* kDeepseekLlmPatterns[] = {
    "[\r\n]",
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1"
    "\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd"
    "\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d"
    "\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4"
    "\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec"
    "\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b"
    "\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787"
    "\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a"
    "\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3001-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u167f\u1681-\u1fff\u200b-\u2027\u202a-\u202e\u2030-\u205e"
    "\u2060-\u2fff\u3001-\u4e00\uac00-\ud7ff]+",
    "\\p{N}+",
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
  } else if (pre == "deepseek-v3" || pre == "deepseek-llm") {
    if (pre == "deepseek-v3")
      for (const char* re : kDeepseekV3Patterns)
        seq.push_back(tok::make_regex_split(re, SplitBehavior::kIsolated));
    else
      for (const char* re : kDeepseekLlmPatterns)
        seq.push_back(tok::make_regex_split(re, SplitBehavior::kIsolated));
    seq.push_back(tok::make_byte_level(false, false));
  } else {
    throw Error("unsupported GGUF tokenizer.ggml.pre '" + pre +
                "' (supported: default, gpt2, llama-bpe, qwen2, smollm, starcoder, deepseek-v3, "
                "deepseek-llm)");
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
