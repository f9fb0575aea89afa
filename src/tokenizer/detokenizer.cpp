// IncrementalDetokenizer: decodes a short window of recent tokens and emits what it adds to the
// text of the window's already-emitted prefix, like tokenizers' DecodeStream. Text is held back
// while it ends in U+FFFD (an unfinished UTF-8 character) or, for ByteFallback decoders, while a
// run of <0xAB> byte tokens may still grow, so that emitted text is never revised.
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace vllm {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= tok::kReplacementChar.size() &&
         s.compare(s.size() - tok::kReplacementChar.size(), tok::kReplacementChar.size(),
                   tok::kReplacementChar) == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> context)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  // The shortest context tail (4 to 24 tokens) that decodes without U+FFFD, as vLLM primes its
  // stream.
  if (context.empty()) return;
  size_t take = std::min<size_t>(context.size(), 4);
  for (size_t n = take; n <= std::min<size_t>(context.size(), 24); ++n) {
    take = n;
    const auto tail = context.subspan(context.size() - n);
    if (tokenizer_.decode(tail, skip_special_tokens_).find(tok::kReplacementChar) ==
        std::string::npos)
      break;
  }
  window_.assign(context.end() - static_cast<std::ptrdiff_t>(take), context.end());
  // A context that ends inside a character (a prompt given as ids may) leaves its last tokens
  // pending, as tokenizers' DecodeStream does: the prefix is the text of the longest leading
  // part of the window that decodes without a trailing U+FFFD, so a generated token that
  // completes the character emits it whole, never a piece of it.
  for (size_t n = window_.size(); n > 0; --n) {
    prefix_text_ = tokenizer_.decode(std::span(window_).first(n), skip_special_tokens_);
    if (!ends_with_replacement(prefix_text_)) return;
  }
  prefix_text_.clear();
}

// A ByteFallback run may still grow while the last token that survives skipping is a byte token.
bool IncrementalDetokenizer::holding() const {
  const auto& p = tokenizer_.pipeline();
  if (!p.decoder || !p.decoder->groups_byte_tokens()) return false;
  for (auto it = window_.rbegin(); it != window_.rend(); ++it) {
    if (!p.known(*it) || (skip_special_tokens_ && p.special(*it))) continue;
    return p.byte_token(*it);
  }
  return false;
}

// Emits text beyond prefix_text_ and restarts the window at the tokens that produced it.
std::string IncrementalDetokenizer::take(const std::string& text) {
  size_t common = 0;
  if (text.compare(0, prefix_text_.size(), prefix_text_) == 0) {
    common = prefix_text_.size();
  } else {  // cannot happen for the supported decoders; never re-emit text
    while (common < text.size() && common < prefix_text_.size() &&
           text[common] == prefix_text_[common])
      ++common;
    common = std::max(common, std::min(prefix_text_.size(), text.size()));
    // ... and never emit a piece of a character.
    while (common < text.size() && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80)
      ++common;
  }
  std::string delta = text.substr(common);
  prefix_text_ = text;
  return delta;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  window_.push_back(id);
  if (holding()) return "";
  const std::string text = tokenizer_.decode(window_, skip_special_tokens_);
  if (text.size() <= prefix_text_.size() || ends_with_replacement(text)) return "";
  std::string delta = take(text);
  // Keep a window of the last few tokens as context for the next decode.
  constexpr size_t kKeep = 6;
  if (window_.size() > 2 * kKeep) {
    window_.erase(window_.begin(), window_.end() - kKeep);
    prefix_text_ = tokenizer_.decode(window_, skip_special_tokens_);
  }
  return delta;
}

std::string IncrementalDetokenizer::finish() {
  const std::string text = tokenizer_.decode(window_, skip_special_tokens_);
  if (text.size() <= prefix_text_.size()) return "";
  return take(text);
}

}  // namespace vllm
