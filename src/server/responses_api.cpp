// POST /v1/responses, GET /v1/responses/{id}, POST /v1/responses/{id}/cancel: one chat
// generation read into OpenAI's response object (reasoning, message and function_call items),
// whole or as the Responses API's named stream events, kept in the ResponseStore when `store`.
#include <httplib.h>

#include <algorithm>

#include "server/api_error.h"
#include "server/log.h"
#include "server/responses_api.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/serving.h"
#include "server/sse.h"

namespace vllm::server {
namespace {

// What the engine reported for the one completion.
struct Tally {
  std::string text;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;
  std::string finish_reason = "stop";

  void add(const RequestOutput& out) {
    text += out.text_delta;
    output_tokens += static_cast<int64_t>(out.new_token_ids.size());
    cached_tokens = std::max<int64_t>(cached_tokens, out.num_cached_tokens);
    if (out.finished) finish_reason = out.finish_reason;
  }
};

ojson text_part(const std::string& text) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()},
          {"logprobs", ojson::array()}};
}

ojson reasoning_part(const std::string& text) {
  return {{"type", "reasoning_text"}, {"text", text}};
}

ojson message_item(const std::string& id, const std::string* text, const char* status) {
  ojson content = ojson::array();
  if (text) content.push_back(text_part(*text));
  return {{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"},
          {"content", std::move(content)}};
}

ojson reasoning_item(const std::string& id, const std::string* text, const char* status) {
  ojson content = ojson::array();
  if (text) content.push_back(reasoning_part(*text));
  return {{"id", id}, {"type", "reasoning"}, {"summary", ojson::array()},
          {"content", std::move(content)}, {"encrypted_content", nullptr}, {"status", status}};
}

ojson function_call_item(const std::string& id, const std::string& call_id,
                         const std::string& name, const std::string& arguments,
                         const char* status) {
  return {{"id", id}, {"type", "function_call"}, {"status", status}, {"call_id", call_id},
          {"name", name}, {"arguments", arguments}};
}

ojson usage_json(const ServingContext& ctx, const ResponsesRequest& r, const Tally& t,
                 const ojson& output) {
  int64_t reasoning_tokens = 0;
  for (const ojson& item : output)
    if (item["type"] == "reasoning")
      for (const ojson& part : item["content"])
        reasoning_tokens += static_cast<int64_t>(
            ctx.tokenizer->encode(part["text"].get<std::string>(), false).size());
  const auto input = static_cast<int64_t>(r.chat.prompt.ids.size());
  return {{"input_tokens", input},
          {"input_tokens_details",
           {{"cached_tokens", t.cached_tokens}, {"cache_write_tokens", 0}}},
          {"output_tokens", t.output_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", input + t.output_tokens}};
}

// The finished response object; kept in the store when the request asked for it.
ojson finish_response(ServingContext& ctx, const ResponsesRequest& r, const std::string& id,
                      int64_t created_at, ojson output, const Tally& t) {
  const char* status = t.finish_reason == "length"  ? "incomplete"
                       : t.finish_reason == "abort" ? "cancelled"
                                                    : "completed";
  ojson resp = response_skeleton(r, id, created_at, status);
  if (t.finish_reason == "length") resp["incomplete_details"] = {{"reason", "max_output_tokens"}};
  resp["usage"] = usage_json(ctx, r, t, output);
  resp["output"] = std::move(output);
  if (r.store &&
      !ctx.responses->put(id, {resp, conversation_after(r.conversation, resp["output"])}))
    log_warning("response " + id + " is larger than --responses-store-max-bytes: not stored");
  return resp;
}

std::string event_frame(const char* type, int64_t& sequence_number, ojson fields) {
  ojson event = {{"type", type}, {"sequence_number", sequence_number++}};
  for (auto& [k, v] : fields.items()) event[k] = std::move(v);
  return std::string("event: ") + type + "\ndata: " + to_text(event) + "\n\n";
}

// The Responses API's stream: response.created and .in_progress, then per output item
// output_item.added, its content part (text and reasoning items), the deltas, their .done
// events and output_item.done; last response.completed (or .incomplete) with the whole object.
class ResponseEvents : public EventFormatter {
 public:
  ResponseEvents(ServingContext& ctx, ResponsesRequest r, std::string id)
      : ctx_(ctx), r_(std::move(r)), id_(std::move(id)), created_(unix_time()),
        stream_(*r_.chat.output) {}

  // Each event is a whole SSE frame ("event: <type>\ndata: {json}\n\n"); no [DONE].
  std::string frame(const std::string& event) const override { return event; }
  std::string end_frame() const override { return ""; }
  // The Responses API's stream error event.
  std::string error_frame(int status, const std::string& message) override {
    return event_frame("error", seq_,
                       {{"code", error_type(status)}, {"message", message}, {"param", nullptr}});
  }

  void output(const TaggedOutput& o, std::vector<std::string>& events) override {
    start(events);
    tally_.add(o.out);
    const ChatDelta d = stream_.feed(o.out.text_delta, o.out.finished);
    if (!d.reasoning.empty()) append(events, Kind::kReasoning, d.reasoning);
    if (!d.content.empty()) append(events, Kind::kMessage, d.content);
    for (const ToolCallDelta& t : d.tool_calls) call_delta(events, t);
  }

  void finish(std::vector<std::string>& events) override {
    start(events);
    const bool incomplete = tally_.finish_reason == "length";
    close(events, incomplete ? "incomplete" : "completed");
    if (items_.empty()) {  // nothing generated: one empty message, as the whole response has
      open(events, Kind::kMessage);
      close(events, incomplete ? "incomplete" : "completed");
    }
    ojson resp = finish_response(ctx_, r_, id_, created_, items_, tally_);
    const char* type = resp["status"] == "incomplete" ? "response.incomplete"
                                                      : "response.completed";
    events.push_back(event_frame(type, seq_, {{"response", std::move(resp)}}));
  }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };

  void start(std::vector<std::string>& events) {
    if (started_) return;
    started_ = true;
    const ojson snapshot = response_skeleton(r_, id_, created_, "in_progress");
    events.push_back(event_frame("response.created", seq_, {{"response", snapshot}}));
    events.push_back(event_frame("response.in_progress", seq_, {{"response", snapshot}}));
  }

  ojson where() const {
    return {{"item_id", item_id_}, {"output_index", items_.size()}};
  }

  void open(std::vector<std::string>& events, Kind kind, const ToolCallDelta* call = nullptr) {
    kind_ = kind;
    text_.clear();
    ojson item, part;
    if (kind == Kind::kMessage) {
      item_id_ = ctx_.new_request_id("msg_");
      item = message_item(item_id_, nullptr, "in_progress");
      part = text_part("");
    } else if (kind == Kind::kReasoning) {
      item_id_ = ctx_.new_request_id("rs_");
      item = reasoning_item(item_id_, nullptr, "in_progress");
      part = reasoning_part("");
    } else {
      item_id_ = ctx_.new_request_id("fc_");
      call_index_ = call->index;
      call_id_ = call->id.value_or(make_tool_call_id(r_.chat.output->mistral_ids));
      call_name_ = call->name.value_or("");
      item = function_call_item(item_id_, call_id_, call_name_, "", "in_progress");
    }
    events.push_back(event_frame("response.output_item.added", seq_,
                           {{"output_index", items_.size()}, {"item", std::move(item)}}));
    if (part.is_null()) return;
    ojson f = where();
    f["content_index"] = 0;
    f["part"] = std::move(part);
    events.push_back(event_frame("response.content_part.added", seq_, std::move(f)));
  }

  void append(std::vector<std::string>& events, Kind kind, const std::string& delta) {
    if (kind_ != kind) {
      close(events, "completed");
      open(events, kind);
    }
    text_ += delta;
    ojson f = where();
    f["content_index"] = 0;
    f["delta"] = delta;
    if (kind == Kind::kMessage) f["logprobs"] = ojson::array();
    events.push_back(event_frame(kind == Kind::kMessage ? "response.output_text.delta"
                                                  : "response.reasoning_text.delta",
                           seq_, std::move(f)));
  }

  void call_delta(std::vector<std::string>& events, const ToolCallDelta& t) {
    if (kind_ != Kind::kCall || t.index != call_index_) {
      close(events, "completed");
      open(events, Kind::kCall, &t);
    }
    if (t.arguments.empty()) return;
    text_ += t.arguments;
    ojson f = where();
    f["delta"] = t.arguments;
    events.push_back(event_frame("response.function_call_arguments.delta", seq_, std::move(f)));
  }

  void close(std::vector<std::string>& events, const char* status) {
    if (kind_ == Kind::kNone) return;
    ojson item;
    if (kind_ == Kind::kCall) {
      ojson f = where();
      f["name"] = call_name_;
      f["arguments"] = text_;
      events.push_back(event_frame("response.function_call_arguments.done", seq_, std::move(f)));
      item = function_call_item(item_id_, call_id_, call_name_, text_, status);
    } else {
      const bool message = kind_ == Kind::kMessage;
      ojson f = where();
      f["content_index"] = 0;
      f["text"] = text_;
      if (message) f["logprobs"] = ojson::array();
      events.push_back(event_frame(message ? "response.output_text.done" : "response.reasoning_text.done",
                             seq_, f));
      f.erase("text");
      f.erase("logprobs");
      f["part"] = message ? text_part(text_) : reasoning_part(text_);
      events.push_back(event_frame("response.content_part.done", seq_, std::move(f)));
      item = message ? message_item(item_id_, &text_, status)
                     : reasoning_item(item_id_, &text_, status);
    }
    events.push_back(event_frame("response.output_item.done", seq_,
                           {{"output_index", items_.size()}, {"item", item}}));
    items_.push_back(std::move(item));
    kind_ = Kind::kNone;
  }

  ServingContext& ctx_;
  ResponsesRequest r_;
  std::string id_;
  int64_t created_;
  ChatOutputStream stream_;
  Tally tally_;
  int64_t seq_ = 0;
  bool started_ = false;
  ojson items_ = ojson::array();  // the finished output items
  Kind kind_ = Kind::kNone;       // the item being streamed
  std::string item_id_, text_, call_id_, call_name_;
  int call_index_ = -1;
};

StoredResponse stored_or_404(const ServingContext& ctx, const httplib::Request& req) {
  const std::string id = req.matches[1];
  std::optional<StoredResponse> stored = ctx.responses->get(id);
  if (!stored) throw response_not_found(id, "response_id");
  return *stored;
}

}  // namespace

ojson output_items(ServingContext& ctx, const ChatMessageOut& m, bool incomplete) {
  ojson items = ojson::array();
  if (m.reasoning && !m.reasoning->empty())
    items.push_back(reasoning_item(ctx.new_request_id("rs_"), &*m.reasoning, "completed"));
  const std::string content = m.content.value_or("");
  if (!content.empty() || (m.tool_calls.empty() && items.empty()))
    items.push_back(message_item(ctx.new_request_id("msg_"), &content,
                                 incomplete ? "incomplete" : "completed"));
  for (const ChatMessageOut::Call& c : m.tool_calls)
    items.push_back(function_call_item(ctx.new_request_id("fc_"), c.id, c.call.name,
                                       c.call.arguments, "completed"));
  return items;
}

ojson conversation_after(const ojson& conversation, const ojson& output) {
  std::string text;
  ojson calls = ojson::array();
  for (const ojson& item : output) {
    if (item["type"] == "message")
      for (const ojson& part : item["content"]) text += part["text"].get<std::string>();
    if (item["type"] == "function_call")
      calls.push_back({{"id", item["call_id"]},
                       {"type", "function"},
                       {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
  }
  ojson reply = {{"role", "assistant"}, {"content", text}};
  if (!calls.empty()) reply["tool_calls"] = std::move(calls);
  ojson out = conversation;
  out.push_back(std::move(reply));
  return out;
}

void handle_responses_create(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res) {
  ResponsesRequest r = parse_responses_request(parse_body(req.body), ctx);
  const std::string id = ctx.new_request_id("resp_");
  set_request_id_header(ctx, req, res, id);
  auto gen = start_generation(ctx, ctx.new_request_id("resp_"), {r.chat.prompt}, r.chat.params,
                              r.chat.priority);
  if (r.stream) {
    stream_events(res, gen, std::make_shared<ResponseEvents>(ctx, std::move(r), id));
    return;
  }
  const int64_t created_at = unix_time();
  Tally t;
  while (!gen->done())
    for (const TaggedOutput& o : gen->next(std::chrono::milliseconds(1000))) t.add(o.out);
  ChatMessageOut m = chat_message(*r.chat.output, t.text);
  set_json(res, finish_response(ctx, r, id, created_at,
                                output_items(ctx, m, t.finish_reason == "length"), t));
}

void handle_responses_retrieve(ServingContext& ctx, const httplib::Request& req,
                               httplib::Response& res) {
  // vLLM's query parameters replay a background stream, which this server does not run.
  for (const auto& [k, v] : req.params)
    throw bad_request("query parameter '" + k + "' is not supported by this server", k);
  set_json(res, stored_or_404(ctx, req).response);
}

void handle_responses_cancel(ServingContext& ctx, const httplib::Request& req,
                             httplib::Response& res) {
  // As vLLM: only queued or in-progress (background) responses can be cancelled; every stored
  // response here has finished.
  StoredResponse stored = stored_or_404(ctx, req);
  const std::string status = stored.response["status"].get<std::string>();
  if (status != "queued" && status != "in_progress")
    throw bad_request("Cannot cancel a synchronous response.", "response_id");
  set_json(res, stored.response);
}

}  // namespace vllm::server
