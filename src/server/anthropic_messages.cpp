// POST /v1/messages and /v1/messages/count_tokens: the request goes through the chat path
// (anthropic_request.cpp), the reply comes back as Anthropic content blocks (thinking, text,
// tool_use), whole or as Anthropic's stream events.
#include "server/anthropic_messages.h"

#include <httplib.h>

#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/log.h"
#include "server/responses.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/serving.h"
#include "server/sse.h"

namespace vllm::server {
namespace {

// How generation ended, in Anthropic's words: stop_reason and the matched stop_sequence.
struct StopInfo {
  std::string reason;
  ojson sequence = nullptr;
};

StopInfo anthropic_stop(const std::string& engine_reason, bool tool_calls,
                        const ojson& stop_reason) {
  if (engine_reason == "length") return {"max_tokens"};
  if (tool_calls) return {"tool_use"};
  if (stop_reason.is_string()) return {"stop_sequence", stop_reason};
  return {"end_turn"};
}

ojson usage_json(const ChatRequest& r, int64_t output_tokens) {
  return {{"input_tokens", r.prompt.ids.size()}, {"output_tokens", output_tokens}};
}

ojson message_json(const std::string& id, const ChatRequest& r, ojson content) {
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", r.model},
          {"content", std::move(content)},
          {"stop_reason", nullptr},
          {"stop_sequence", nullptr},
          {"usage", usage_json(r, 0)}};
}

// A tool call's arguments as the object Anthropic's `input` is. The parsers and grammars
// produce JSON objects; anything else is kept whole rather than dropped.
ojson tool_input(const std::string& arguments) {
  try {
    ojson v = parse_body(arguments);
    if (v.is_object()) return v;
  } catch (const ApiError&) {
  }
  log_warning("a tool call's arguments are not a JSON object: " + arguments);
  return {{"arguments", arguments}};
}

ojson content_blocks(const ChatMessageOut& m) {
  ojson blocks = ojson::array();
  // No signature: the thinking is the server's own, never verified when sent back.
  if (m.reasoning && !m.reasoning->empty())
    blocks.push_back({{"type", "thinking"}, {"thinking", *m.reasoning}, {"signature", ""}});
  if (m.content && !m.content->empty())
    blocks.push_back({{"type", "text"}, {"text", *m.content}});
  for (const ChatMessageOut::Call& c : m.tool_calls)
    blocks.push_back({{"type", "tool_use"},
                      {"id", c.id},
                      {"name", c.call.name},
                      {"input", tool_input(c.call.arguments)}});
  return blocks;
}

std::string sse_frame(const ojson& event) {
  return "event: " + event["type"].get<std::string>() + "\ndata: " + to_text(event) + "\n\n";
}

// Anthropic's stream: message_start, ping, then per content block content_block_start,
// content_block_delta..., content_block_stop, and at the end message_delta, message_stop.
class MessageEvents : public EventFormatter {
 public:
  MessageEvents(ChatRequest r, std::string id)
      : r_(std::move(r)), id_(std::move(id)), stream_(*r_.output) {}

  void output(const TaggedOutput& o, std::vector<std::string>& events) override {
    start(events);
    output_tokens_ += static_cast<int64_t>(o.out.new_token_ids.size());
    ChatDelta d = parse(o.out);
    if (!d.reasoning.empty())
      delta(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}},
            {{"type", "thinking_delta"}, {"thinking", d.reasoning}}, events);
    if (!d.content.empty())
      delta(Block::kText, {{"type", "text"}, {"text", ""}},
            {{"type", "text_delta"}, {"text", d.content}}, events);
    for (const ToolCallDelta& t : d.tool_calls) tool_delta(t, events);
    if (o.out.finished) {
      engine_reason_ = o.out.finish_reason;
      stop_reason_ = stop_reason_json(o.out, r_.params);
    }
  }

  void finish(std::vector<std::string>& events) override {
    start(events);
    close(events);
    const StopInfo stop = anthropic_stop(engine_reason_, tool_calls_, stop_reason_);
    events.push_back(sse_frame({{"type", "message_delta"},
                                {"delta", {{"stop_reason", stop.reason},
                                           {"stop_sequence", stop.sequence}}},
                                {"usage", usage_json(r_, output_tokens_)}}));
    events.push_back(sse_frame({{"type", "message_stop"}}));
  }

  std::string frame(const std::string& event) const override { return event; }
  std::string end_frame() const override { return ""; }
  std::string error_frame(int status, const std::string& message) override {
    return sse_frame(anthropic_error_json(status, message));
  }

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };

  void start(std::vector<std::string>& events) {
    if (started_) return;
    started_ = true;
    events.push_back(sse_frame(
        {{"type", "message_start"}, {"message", message_json(id_, r_, ojson::array())}}));
    events.push_back(sse_frame({{"type", "ping"}}));
  }

  ChatDelta parse(const RequestOutput& out) {
    ChatDelta d;
    if (!r_.output->active()) {
      d.content = out.text_delta;
      return d;
    }
    return stream_.feed(out.text_delta, out.finished);
  }

  void open(Block kind, ojson block, std::vector<std::string>& events) {
    close(events);
    block_ = kind;
    ++index_;
    events.push_back(sse_frame(
        {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}}));
  }

  void close(std::vector<std::string>& events) {
    if (block_ == Block::kNone) return;
    events.push_back(sse_frame({{"type", "content_block_stop"}, {"index", index_}}));
    block_ = Block::kNone;
  }

  // Appends to the open block of `kind`, opening `block` first when another is open.
  void delta(Block kind, ojson block, ojson delta, std::vector<std::string>& events) {
    if (block_ != kind) open(kind, std::move(block), events);
    events.push_back(sse_frame(
        {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}}));
  }

  // A call's first entry (id and name) opens its tool_use block; its arguments stream as
  // input_json_delta.
  void tool_delta(const ToolCallDelta& t, std::vector<std::string>& events) {
    if (t.id) {
      tool_calls_ = true;
      open(Block::kToolUse,
           {{"type", "tool_use"}, {"id", *t.id}, {"name", t.name.value_or("")},
            {"input", ojson::object()}},
           events);
    }
    if (block_ != Block::kToolUse || t.arguments.empty()) return;
    events.push_back(sse_frame(
        {{"type", "content_block_delta"},
         {"index", index_},
         {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}}));
  }

  ChatRequest r_;
  std::string id_;
  ChatOutputStream stream_;
  bool started_ = false;
  Block block_ = Block::kNone;
  int index_ = -1;
  bool tool_calls_ = false;
  int64_t output_tokens_ = 0;
  std::string engine_reason_ = "stop";
  ojson stop_reason_ = nullptr;
};

}  // namespace

ojson anthropic_error_json(int status, const std::string& message) {
  const char* type = "api_error";
  switch (status) {
    case 400: case 405: case 415: case 422: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: case 529: type = "overloaded_error"; break;
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

void handle_messages(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const ojson chat = chat_body_from_anthropic(parse_body(req.body), false, ctx);
  ChatRequest r = parse_chat_request(chat, ctx);
  const std::string id = response_id(ctx, req, "", "msg_");
  set_request_id_header(ctx, req, res, id);
  auto gen = start_generation(ctx, ctx.new_request_id("msg_"), {r.prompt}, r.params, r.priority);
  if (r.stream.stream) {
    stream_events(res, gen, std::make_shared<MessageEvents>(std::move(r), id));
    return;
  }
  std::string text;
  int64_t output_tokens = 0;
  std::string engine_reason = "stop";
  ojson stop_reason = nullptr;
  while (!gen->done()) {
    for (const TaggedOutput& o : gen->next(std::chrono::milliseconds(1000))) {
      text += o.out.text_delta;
      output_tokens += static_cast<int64_t>(o.out.new_token_ids.size());
      if (!o.out.finished) continue;
      engine_reason = o.out.finish_reason;
      stop_reason = stop_reason_json(o.out, r.params);
    }
  }
  const ChatMessageOut m = chat_message(*r.output, text);
  const StopInfo stop = anthropic_stop(engine_reason, !m.tool_calls.empty(), stop_reason);
  ojson body = message_json(id, r, content_blocks(m));
  body["stop_reason"] = stop.reason;
  body["stop_sequence"] = stop.sequence;
  body["usage"] = usage_json(r, output_tokens);
  set_json(res, body);
}

void handle_count_tokens(ServingContext& ctx, const httplib::Request& req,
                         httplib::Response& res) {
  const ojson chat = chat_body_from_anthropic(parse_body(req.body), true, ctx);
  ctx.resolve_model(chat["model"].get<std::string>());
  const std::string text = render_chat(chat, ctx);
  set_json(res, {{"input_tokens", ctx.tokenizer->encode(text, false).size()}});
}

}  // namespace vllm::server
