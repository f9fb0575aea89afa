// POST /v1/chat/completions: one rendered conversation, n choices, chat-format logprobs,
// streaming (a role delta first, then content deltas) or not.
#include <httplib.h>

#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/responses.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/serving.h"
#include "server/sse.h"

namespace vllm::server {
namespace {

struct ChatChoice {
  std::string content;
  std::vector<int32_t> token_ids;
  int64_t num_tokens = 0;
  int64_t num_cached_tokens = 0;
  ojson logprobs = ojson::array();
  ojson finish_reason = nullptr;
  ojson stop_reason = nullptr;
};

ojson envelope(const std::string& id, const char* object, int64_t created,
               const std::string& model) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

Usage usage_of(const ServingContext& ctx, const ChatRequest& r,
               const std::vector<ChatChoice>& choices) {
  Usage u;
  u.prompt_tokens = static_cast<int64_t>(r.prompt.ids.size());
  for (const ChatChoice& c : choices) u.completion_tokens += c.num_tokens;
  if (ctx.config.enable_prompt_tokens_details && choices.at(0).num_cached_tokens > 0)
    u.cached_tokens = choices[0].num_cached_tokens;
  return u;
}

// One engine output into its choice: text, token ids, the prompt's cached tokens.
void accumulate(ChatChoice& c, const RequestOutput& out) {
  c.content += out.text_delta;
  c.token_ids.insert(c.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  c.num_tokens += static_cast<int64_t>(out.new_token_ids.size());
  c.num_cached_tokens = std::max<int64_t>(c.num_cached_tokens, out.num_cached_tokens);
}

class ChatEvents : public EventFormatter {
 public:
  ChatEvents(const ServingContext& ctx, ChatRequest r, std::string id)
      : ctx_(ctx), r_(std::move(r)), id_(std::move(id)), created_(unix_time()),
        choices_(r_.params.n) {
    for (int i = 0; i < r_.params.n; ++i) streams_.emplace_back(*r_.output);
  }

  void output(const TaggedOutput& o, std::vector<std::string>& events) override {
    // As vLLM: the role deltas go out with the first engine output, so a client's time to
    // the first chunk is the time to the first token.
    if (!role_sent_) {
      role_sent_ = true;
      role_chunks(events);
    }
    content_chunk(o, events);
  }

  void finish(std::vector<std::string>& events) override {
    if (!r_.stream.include_usage) return;
    ojson chunk = envelope(id_, "chat.completion.chunk", created_, r_.model);
    chunk["choices"] = ojson::array();
    chunk["usage"] = usage_of(ctx_, r_, choices_).to_json();
    events.push_back(to_text(chunk));
  }

 private:
  // The role deltas (with the prompt's ids when asked), then the echoed last message.
  void role_chunks(std::vector<std::string>& events) {
    for (int i = 0; i < r_.params.n; ++i) {
      ojson chunk = envelope(id_, "chat.completion.chunk", created_, r_.model);
      chunk["choices"] = ojson::array({{{"index", i},
                                        {"delta", {{"role", r_.role}, {"content", ""}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}});
      if (r_.report.token_ids) chunk["prompt_token_ids"] = r_.prompt.ids;
      add_usage(chunk);
      events.push_back(to_text(chunk));
    }
    if (r_.echo.empty()) return;
    for (int i = 0; i < r_.params.n; ++i) {
      ojson chunk = envelope(id_, "chat.completion.chunk", created_, r_.model);
      chunk["choices"] = ojson::array({{{"index", i},
                                        {"delta", {{"content", r_.echo}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}});
      add_usage(chunk);
      events.push_back(to_text(chunk));
    }
  }

  // The text delta through the choice's reasoning and tool-call parsers.
  ChatDelta parse(int index, const RequestOutput& out) {
    ChatDelta d;
    if (!r_.output->active()) {
      d.content = out.text_delta;
      return d;
    }
    return streams_.at(index).feed(out.text_delta, out.finished);
  }

  void content_chunk(const TaggedOutput& o, std::vector<std::string>& events) {
    ChatChoice& c = choices_.at(o.out.index);
    accumulate(c, o.out);
    ojson lp = nullptr;
    if (r_.logprobs && !o.out.logprobs.empty())
      lp = {{"content", chat_logprobs_content(o.out.logprobs, *ctx_.tokenizer, r_.top_logprobs,
                                              r_.report.tokens_as_ids)}};
    const bool new_ids = r_.report.token_ids && !o.out.new_token_ids.empty();
    ChatDelta d = parse(o.out.index, o.out);
    if (d.empty() && lp.is_null() && !o.out.finished && !new_ids) return;
    ojson delta = ojson::object();
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.reasoning.empty()) {
      delta["reasoning"] = d.reasoning;
      delta["reasoning_content"] = d.reasoning;
    }
    if (!d.tool_calls.empty()) {
      ojson calls = ojson::array();
      for (const ToolCallDelta& t : d.tool_calls) calls.push_back(t.to_json());
      delta["tool_calls"] = std::move(calls);
    }
    ojson choice = {{"index", o.out.index}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)}};
    const bool called = r_.output->active() && streams_.at(o.out.index).tools_called();
    choice["finish_reason"] =
        o.out.finished ? ojson(chat_finish_reason(*r_.output, called, o.out.finish_reason))
                       : ojson(nullptr);
    if (o.out.finished) choice["stop_reason"] = stop_reason_json(o.out, r_.params);
    if (r_.report.token_ids) choice["token_ids"] = o.out.new_token_ids;
    ojson chunk = envelope(id_, "chat.completion.chunk", created_, r_.model);
    chunk["choices"] = ojson::array({std::move(choice)});
    add_usage(chunk);
    events.push_back(to_text(chunk));
  }

  void add_usage(ojson& chunk) const {
    if (r_.stream.include_usage && r_.stream.continuous_usage_stats)
      chunk["usage"] = usage_of(ctx_, r_, choices_).to_json();
  }

  const ServingContext& ctx_;
  ChatRequest r_;
  std::string id_;
  int64_t created_;
  std::vector<ChatChoice> choices_;
  std::vector<ChatOutputStream> streams_;  // per choice
  bool role_sent_ = false;
};

}  // namespace

void handle_chat_completions(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res) {
  ChatRequest r = parse_chat_request(parse_body(req.body), ctx);
  const std::string id = response_id(ctx, req, r.request_id, "chatcmpl-");
  set_request_id_header(ctx, req, res, id);
  auto gen =
      start_generation(ctx, ctx.new_request_id("chatcmpl-"), {r.prompt}, r.params, r.priority);
  if (r.stream.stream) {
    stream_events(res, gen, std::make_shared<ChatEvents>(ctx, std::move(r), id));
    return;
  }
  std::vector<ChatChoice> choices(r.params.n);
  ojson prompt_logprobs = nullptr;
  while (!gen->done()) {
    for (const TaggedOutput& o : gen->next(std::chrono::milliseconds(1000))) {
      ChatChoice& c = choices.at(o.out.index);
      accumulate(c, o.out);
      if (r.logprobs)
        for (auto& e : chat_logprobs_content(o.out.logprobs, *ctx.tokenizer, r.top_logprobs,
                                             r.report.tokens_as_ids))
          c.logprobs.push_back(std::move(e));
      if (!o.out.prompt_logprobs.empty() && prompt_logprobs.is_null())
        prompt_logprobs = prompt_logprobs_json(o.out.prompt_logprobs, *ctx.tokenizer);
      if (o.out.finished) {
        c.finish_reason = o.out.finish_reason;
        c.stop_reason = stop_reason_json(o.out, r.params);
      }
    }
  }
  ojson body = envelope(id, "chat.completion", unix_time(), r.model);
  ojson list = ojson::array();
  for (int i = 0; i < r.params.n; ++i) {
    const ChatChoice& c = choices[i];
    const std::string engine_reason =
        c.finish_reason.is_string() ? c.finish_reason.get<std::string>() : "stop";
    ChatMessageOut m = chat_message(*r.output, c.content);
    if (!r.echo.empty()) m.content = r.echo + m.content.value_or("");
    list.push_back(chat_choice_json(i, chat_message_json(r.role, m),
                                    r.logprobs ? &c.logprobs : nullptr,
                                    chat_finish_reason(*r.output, m.tools_called, engine_reason),
                                    c.stop_reason, r.report.token_ids ? &c.token_ids : nullptr));
  }
  body["choices"] = std::move(list);
  body["usage"] = usage_of(ctx, r, choices).to_json();
  body["prompt_logprobs"] = std::move(prompt_logprobs);
  body["prompt_token_ids"] = r.report.token_ids ? ojson(r.prompt.ids) : ojson(nullptr);
  set_json(res, body);
}

}  // namespace vllm::server
