// POST /v1/chat/completions: one rendered conversation, n choices, chat-format logprobs,
// streaming (a role delta first, then content deltas) or not.
#include <httplib.h>

#include "server/api_error.h"
#include "server/responses.h"
#include "server/routes.h"
#include "server/serving.h"
#include "server/sse.h"

namespace vllm::server {
namespace {

struct ChatChoice {
  std::string content;
  int64_t num_tokens = 0;
  ojson logprobs = ojson::array();
  ojson finish_reason = nullptr;
  ojson stop_reason = nullptr;
};

ojson envelope(const std::string& id, const char* object, int64_t created,
               const std::string& model) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

Usage usage_of(const ChatRequest& r, const std::vector<ChatChoice>& choices) {
  Usage u;
  u.prompt_tokens = static_cast<int64_t>(r.prompt.ids.size());
  for (const ChatChoice& c : choices) u.completion_tokens += c.num_tokens;
  return u;
}

class ChatEvents : public EventFormatter {
 public:
  ChatEvents(const ServingContext& ctx, ChatRequest r, std::string id)
      : ctx_(ctx), r_(std::move(r)), id_(std::move(id)), created_(unix_time()),
        choices_(r_.params.n) {}

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
    chunk["usage"] = usage_of(r_, choices_).to_json();
    events.push_back(to_text(chunk));
  }

 private:
  void role_chunks(std::vector<std::string>& events) {
    for (int i = 0; i < r_.params.n; ++i) {
      ojson chunk = envelope(id_, "chat.completion.chunk", created_, r_.model);
      chunk["choices"] = ojson::array({{{"index", i},
                                        {"delta", {{"role", "assistant"}, {"content", ""}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}});
      add_usage(chunk);
      events.push_back(to_text(chunk));
    }
  }

  void content_chunk(const TaggedOutput& o, std::vector<std::string>& events) {
    ChatChoice& c = choices_.at(o.out.index);
    c.num_tokens += static_cast<int64_t>(o.out.new_token_ids.size());
    ojson lp = nullptr;
    if (r_.logprobs && !o.out.logprobs.empty())
      lp = {{"content", chat_logprobs_content(o.out.logprobs, *ctx_.tokenizer, r_.top_logprobs)}};
    if (o.out.text_delta.empty() && lp.is_null() && !o.out.finished) return;
    ojson delta = ojson::object();
    if (!o.out.text_delta.empty()) delta["content"] = o.out.text_delta;
    ojson choice = {{"index", o.out.index}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)}};
    choice["finish_reason"] = o.out.finished ? ojson(o.out.finish_reason) : ojson(nullptr);
    if (o.out.finished) choice["stop_reason"] = stop_reason_json(o.out, r_.params);
    ojson chunk = envelope(id_, "chat.completion.chunk", created_, r_.model);
    chunk["choices"] = ojson::array({std::move(choice)});
    add_usage(chunk);
    events.push_back(to_text(chunk));
  }

  void add_usage(ojson& chunk) const {
    if (r_.stream.include_usage && r_.stream.continuous_usage_stats)
      chunk["usage"] = usage_of(r_, choices_).to_json();
  }

  const ServingContext& ctx_;
  ChatRequest r_;
  std::string id_;
  int64_t created_;
  std::vector<ChatChoice> choices_;
  bool role_sent_ = false;
};

}  // namespace

void handle_chat_completions(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res) {
  ChatRequest r = parse_chat_request(parse_body(req.body), ctx);
  const std::string id = ctx.new_request_id("chatcmpl-");
  auto gen = start_generation(ctx, id, {r.prompt}, r.params, r.priority);
  if (r.stream.stream) {
    stream_events(res, gen, std::make_shared<ChatEvents>(ctx, std::move(r), id));
    return;
  }
  std::vector<ChatChoice> choices(r.params.n);
  ojson prompt_logprobs = nullptr;
  while (!gen->done()) {
    for (const TaggedOutput& o : gen->next(std::chrono::milliseconds(1000))) {
      ChatChoice& c = choices.at(o.out.index);
      c.content += o.out.text_delta;
      c.num_tokens += static_cast<int64_t>(o.out.new_token_ids.size());
      if (r.logprobs)
        for (auto& e : chat_logprobs_content(o.out.logprobs, *ctx.tokenizer, r.top_logprobs))
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
    ChatChoice& c = choices[i];
    ojson message = {{"role", "assistant"},
                     {"content", c.content},
                     {"tool_calls", ojson::array()},
                     {"reasoning_content", nullptr}};
    list.push_back({{"index", i},
                    {"message", std::move(message)},
                    {"logprobs", r.logprobs ? ojson({{"content", c.logprobs}}) : ojson(nullptr)},
                    {"finish_reason", c.finish_reason},
                    {"stop_reason", c.stop_reason}});
  }
  body["choices"] = std::move(list);
  body["usage"] = usage_of(r, choices).to_json();
  body["prompt_logprobs"] = std::move(prompt_logprobs);
  set_json(res, body);
}

}  // namespace vllm::server
