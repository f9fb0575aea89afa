#include "server/responses.h"

#include <algorithm>
#include <cmath>

namespace vllm::server {
namespace {

double clamp_logprob(double v) { return std::isnan(v) ? -9999.0 : std::max(v, -9999.0); }

size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

ojson utf8_bytes(const std::string& s) {
  ojson out = ojson::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

std::string token_text(const Tokenizer& tokenizer, int32_t token, bool as_id) {
  if (as_id) return "token_id:" + std::to_string(token);
  return tokenizer.decode(std::span<const int32_t>(&token, 1), false);
}

ojson Usage::to_json() const {
  return {{"prompt_tokens", prompt_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"completion_tokens", completion_tokens},
          {"prompt_tokens_details",
           cached_tokens ? ojson({{"cached_tokens", *cached_tokens}}) : ojson(nullptr)}};
}

ojson chat_message_json(const std::string& role, const ChatMessageOut& m) {
  ojson calls = ojson::array();
  for (const ChatMessageOut::Call& c : m.tool_calls)
    calls.push_back({{"id", c.id},
                     {"type", "function"},
                     {"function", {{"name", c.call.name}, {"arguments", c.call.arguments}}}});
  const ojson reasoning = m.reasoning ? ojson(*m.reasoning) : ojson(nullptr);
  return {{"role", role},
          {"content", m.content ? ojson(*m.content) : ojson(nullptr)},
          {"tool_calls", std::move(calls)},
          {"reasoning_content", reasoning},
          {"reasoning", reasoning}};
}

ojson chat_choice_json(size_t index, ojson message, const ojson* logprobs,
                       const ojson& finish_reason, const ojson& stop_reason,
                       const std::vector<int32_t>* token_ids) {
  return {{"index", index},
          {"message", std::move(message)},
          {"logprobs", logprobs ? ojson({{"content", *logprobs}}) : ojson(nullptr)},
          {"finish_reason", finish_reason},
          {"stop_reason", stop_reason},
          {"token_ids", token_ids ? ojson(*token_ids) : ojson(nullptr)}};
}

ojson stop_reason_json(const RequestOutput& out, const SamplingParams& params) {
  if (!out.stop_reason) return nullptr;
  const std::string& s = *out.stop_reason;
  if (std::find(params.stop.begin(), params.stop.end(), s) != params.stop.end()) return s;
  try {
    size_t used = 0;
    const int id = std::stoi(s, &used);
    if (used == s.size()) return id;
  } catch (const std::exception&) {
  }
  return s;
}

CompletionLogprobs::CompletionLogprobs(const Tokenizer& tokenizer, bool tokens_as_ids,
                                       size_t initial_offset)
    : tok_(tokenizer), tokens_as_ids_(tokens_as_ids), offset_(initial_offset) {
  take();
}

std::string CompletionLogprobs::text(int32_t token) const {
  return token_text(tok_, token, tokens_as_ids_);
}

void CompletionLogprobs::push(int32_t token, std::optional<double> logprob, ojson top) {
  const std::string text = this->text(token);
  text_offset_.push_back(offset_);
  offset_ += utf8_chars(text);
  tokens_.push_back(text);
  token_logprobs_.push_back(logprob ? ojson(clamp_logprob(*logprob)) : ojson(nullptr));
  top_logprobs_.push_back(std::move(top));
}

void CompletionLogprobs::add(const StepLogprobs& lp, int num_top) {
  // vLLM's dict: the sampled token first, then the best alternatives (one entry per string).
  ojson top = ojson::object();
  top[text(lp.chosen.token)] = clamp_logprob(lp.chosen.logprob);
  for (int i = 0; i < num_top && i < static_cast<int>(lp.top.size()); ++i) {
    const std::string t = text(lp.top[i].token);
    if (!top.contains(t)) top[t] = clamp_logprob(lp.top[i].logprob);
  }
  push(lp.chosen.token, lp.chosen.logprob, std::move(top));
}

void CompletionLogprobs::add_prompt(int32_t token, const std::optional<StepLogprobs>& lp,
                                    int num_top) {
  if (!lp) {
    push(token, std::nullopt, nullptr);
    return;
  }
  add(*lp, num_top);
}

ojson CompletionLogprobs::take() {
  ojson out = {{"text_offset", std::move(text_offset_)},
               {"token_logprobs", std::move(token_logprobs_)},
               {"tokens", std::move(tokens_)},
               {"top_logprobs", std::move(top_logprobs_)}};
  tokens_ = token_logprobs_ = top_logprobs_ = text_offset_ = ojson::array();
  return out;
}

ojson chat_logprobs_content(const std::vector<StepLogprobs>& steps, const Tokenizer& tokenizer,
                            int num_top, bool tokens_as_ids) {
  ojson content = ojson::array();
  for (const StepLogprobs& lp : steps) {
    const std::string t = token_text(tokenizer, lp.chosen.token, tokens_as_ids);
    ojson top = ojson::array();
    for (int i = 0; i < num_top && i < static_cast<int>(lp.top.size()); ++i) {
      const std::string alt = token_text(tokenizer, lp.top[i].token, tokens_as_ids);
      top.push_back({{"token", alt},
                     {"logprob", clamp_logprob(lp.top[i].logprob)},
                     {"bytes", utf8_bytes(alt)}});
    }
    content.push_back({{"token", t},
                       {"logprob", clamp_logprob(lp.chosen.logprob)},
                       {"bytes", utf8_bytes(t)},
                       {"top_logprobs", std::move(top)}});
  }
  return content;
}

ojson prompt_logprobs_json(const std::vector<std::optional<StepLogprobs>>& lps,
                           const Tokenizer& tokenizer) {
  ojson out = ojson::array();
  for (const auto& lp : lps) {
    if (!lp) {
      out.push_back(nullptr);
      continue;
    }
    ojson entry = ojson::object();
    auto add = [&](const TokenLogprob& t) {
      const std::string key = std::to_string(t.token);
      if (entry.contains(key)) return;
      entry[key] = {{"logprob", clamp_logprob(t.logprob)},
                    {"rank", t.rank},
                    {"decoded_token", token_text(tokenizer, t.token)}};
    };
    add(lp->chosen);
    for (const auto& t : lp->top) add(t);
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace vllm::server
