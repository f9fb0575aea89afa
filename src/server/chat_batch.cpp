// POST /v1/chat/completions/batch (vLLM's): "messages" holds N conversations; each is parsed
// as the chat request it would be on its own (same other fields), all run at once, and one
// chat.completion answers with choice i for conversation i and the summed usage.
#include <httplib.h>

#include "server/api_error.h"
#include "server/responses.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

struct BatchChoice {
  std::string content;
  std::vector<int32_t> token_ids;
  ojson logprobs = ojson::array();
  ojson finish_reason = nullptr;
  ojson stop_reason = nullptr;
};

std::vector<ChatRequest> parse_batch(const ojson& body, const ServingContext& ctx) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty())
    throw bad_request("'messages' must be a non-empty list of conversations", "messages");
  for (const ojson& conv : *it)
    if (!conv.is_array())
      throw bad_request("'messages' must be a list of conversations, each a list of messages "
                        "(for one conversation use /v1/chat/completions)", "messages");
  if (it->size() > static_cast<size_t>(ctx.config.max_n) * 8)
    throw bad_request("too many conversations in one request", "messages");
  if (get_bool(body, "stream").value_or(false))
    throw bad_request("streaming is not supported by /v1/chat/completions/batch", "stream");
  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null() && !tools->empty())
    throw bad_request("tools are not supported by /v1/chat/completions/batch", "tools");
  if (get_int(body, "n").value_or(1) != 1)
    throw bad_request("n must be 1 for /v1/chat/completions/batch (one choice per conversation)",
                      "n");
  std::vector<ChatRequest> out;
  ojson single = body;
  for (const ojson& conv : *it) {
    single["messages"] = conv;
    out.push_back(parse_chat_request(single, ctx));
  }
  return out;
}

}  // namespace

void handle_chat_completions_batch(ServingContext& ctx, const httplib::Request& req,
                                   httplib::Response& res) {
  std::vector<ChatRequest> batch = parse_batch(parse_body(req.body), ctx);
  const ChatRequest& first = batch.front();
  const std::string id = response_id(ctx, req, first.request_id, "chatcmpl-");
  set_request_id_header(ctx, req, res, id);
  std::vector<Prompt> prompts;
  for (const ChatRequest& r : batch) prompts.push_back(r.prompt);
  auto gen = start_generation(ctx, ctx.new_request_id("chatcmpl-"), prompts, first.params,
                              first.priority);
  std::vector<BatchChoice> choices(batch.size());
  while (!gen->done()) {
    for (const TaggedOutput& o : gen->next(std::chrono::milliseconds(1000))) {
      BatchChoice& c = choices.at(o.prompt_index);
      c.content += o.out.text_delta;
      c.token_ids.insert(c.token_ids.end(), o.out.new_token_ids.begin(), o.out.new_token_ids.end());
      if (first.logprobs)
        for (auto& e : chat_logprobs_content(o.out.logprobs, *ctx.tokenizer, first.top_logprobs,
                                             first.report.tokens_as_ids))
          c.logprobs.push_back(std::move(e));
      if (o.out.finished) {
        c.finish_reason = o.out.finish_reason;
        c.stop_reason = stop_reason_json(o.out, batch[o.prompt_index].params);
      }
    }
  }
  Usage usage;
  ojson list = ojson::array();
  for (size_t i = 0; i < batch.size(); ++i) {
    const ChatRequest& r = batch[i];
    BatchChoice& c = choices[i];
    usage.prompt_tokens += static_cast<int64_t>(r.prompt.ids.size());
    usage.completion_tokens += static_cast<int64_t>(c.token_ids.size());
    ChatMessageOut m = chat_message(*r.output, c.content);
    if (!r.echo.empty()) m.content = r.echo + m.content.value_or("");
    list.push_back(chat_choice_json(i, chat_message_json(r.role, m),
                                    first.logprobs ? &c.logprobs : nullptr, c.finish_reason,
                                    c.stop_reason, r.report.token_ids ? &c.token_ids : nullptr));
  }
  ojson body = {{"id", id}, {"object", "chat.completion"}, {"created", unix_time()},
                {"model", first.model}};
  body["choices"] = std::move(list);
  body["usage"] = usage.to_json();
  set_json(res, body);
}

}  // namespace vllm::server
