// POST /v1/completions: text or token-id prompts (one or many), n choices each, echo,
// completions-format logprobs, streaming or not.
#include <httplib.h>

#include "server/api_error.h"
#include "server/responses.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/serving.h"
#include "server/sse.h"

namespace vllm::server {
namespace {

struct Choice {
  bool started = false;
  bool prompt_ids_sent = false;  // streaming with return_token_ids
  std::string text;
  std::vector<int32_t> token_ids;
  int64_t num_tokens = 0;
  std::optional<CompletionLogprobs> logprobs;
  ojson prompt_logprobs = nullptr;
  ojson finish_reason = nullptr;
  ojson stop_reason = nullptr;
};

// Applies one output to its choice; returns the text and logprobs it added.
class CompletionAssembler {
 public:
  CompletionAssembler(const ServingContext& ctx, const CompletionRequest& r)
      : ctx_(ctx), r_(r), choices_(r.prompts.size() * r.params.n), cached_(r.prompts.size()) {}

  Choice& choice(const TaggedOutput& o) { return choices_.at(o.prompt_index * r_.params.n + o.out.index); }
  int index(const TaggedOutput& o) const { return o.prompt_index * r_.params.n + o.out.index; }

  std::string apply(const TaggedOutput& o) {
    Choice& c = choice(o);
    const Prompt& prompt = r_.prompts.at(o.prompt_index);
    std::string added;
    if (o.out.index == 0)
      cached_[o.prompt_index] = std::max<int64_t>(cached_[o.prompt_index], o.out.num_cached_tokens);
    if (!c.started) {
      c.started = true;
      if (r_.logprobs) c.logprobs.emplace(*ctx_.tokenizer, r_.report.tokens_as_ids);
      if (r_.echo) {
        added = prompt.text;
        if (c.logprobs)
          for (size_t k = 0; k < prompt.ids.size(); ++k)
            c.logprobs->add_prompt(prompt.ids[k],
                                   k < o.out.prompt_logprobs.size() ? o.out.prompt_logprobs[k]
                                                                    : std::nullopt,
                                   *r_.logprobs);
      }
      if (!o.out.prompt_logprobs.empty())
        c.prompt_logprobs = prompt_logprobs_json(o.out.prompt_logprobs, *ctx_.tokenizer);
    }
    if (!r_.discard_output) {
      added += o.out.text_delta;
      c.num_tokens += static_cast<int64_t>(o.out.new_token_ids.size());
      c.token_ids.insert(c.token_ids.end(), o.out.new_token_ids.begin(), o.out.new_token_ids.end());
      if (c.logprobs)
        for (const StepLogprobs& lp : o.out.logprobs) c.logprobs->add(lp, *r_.logprobs);
    }
    c.text += added;
    if (o.out.finished) {
      c.finish_reason = o.out.finish_reason;
      c.stop_reason = stop_reason_json(o.out, r_.params);
    }
    return added;
  }

  Usage usage() const {
    Usage u;
    for (const Prompt& p : r_.prompts) u.prompt_tokens += static_cast<int64_t>(p.ids.size());
    for (const Choice& c : choices_) u.completion_tokens += c.num_tokens;
    int64_t cached = 0;
    for (int64_t n : cached_) cached += n;
    if (ctx_.config.enable_prompt_tokens_details && cached > 0) u.cached_tokens = cached;
    return u;
  }
  std::vector<Choice>& choices() { return choices_; }

 private:
  const ServingContext& ctx_;
  const CompletionRequest& r_;
  std::vector<Choice> choices_;
  std::vector<int64_t> cached_;  // per prompt: its prompt tokens found in the prefix cache
};

ojson envelope(const std::string& id, int64_t created, const std::string& model) {
  return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}};
}

class CompletionEvents : public EventFormatter {
 public:
  CompletionEvents(const ServingContext& ctx, CompletionRequest r, std::string id)
      : r_(std::move(r)), asm_(ctx, r_), id_(std::move(id)), created_(unix_time()) {}

  void output(const TaggedOutput& o, std::vector<std::string>& events) override {
    const std::string text = asm_.apply(o);
    Choice& c = asm_.choice(o);
    ojson lp = nullptr;
    if (c.logprobs && !c.logprobs->empty()) lp = c.logprobs->take();
    const bool ids = r_.report.token_ids;
    const bool new_ids = ids && !r_.discard_output && !o.out.new_token_ids.empty();
    if (text.empty() && lp.is_null() && !o.out.finished && !new_ids && (!ids || c.prompt_ids_sent))
      return;
    ojson choice = {{"index", asm_.index(o)},
                    {"text", text},
                    {"logprobs", std::move(lp)},
                    {"finish_reason", c.finish_reason},
                    {"stop_reason", c.stop_reason}};
    if (ids) {  // vLLM: the prompt's ids with a choice's first chunk, then each chunk's new ids
      if (!c.prompt_ids_sent) choice["prompt_token_ids"] = r_.prompts.at(o.prompt_index).ids;
      c.prompt_ids_sent = true;
      choice["token_ids"] = r_.discard_output ? std::vector<int32_t>{} : o.out.new_token_ids;
    }
    ojson chunk = envelope(id_, created_, r_.model);
    chunk["choices"] = ojson::array({std::move(choice)});
    if (r_.stream.include_usage && r_.stream.continuous_usage_stats)
      chunk["usage"] = asm_.usage().to_json();
    events.push_back(to_text(chunk));
  }

  void finish(std::vector<std::string>& events) override {
    if (!r_.stream.include_usage) return;
    ojson chunk = envelope(id_, created_, r_.model);
    chunk["choices"] = ojson::array();
    chunk["usage"] = asm_.usage().to_json();
    events.push_back(to_text(chunk));
  }

 private:
  CompletionRequest r_;
  CompletionAssembler asm_;
  std::string id_;
  int64_t created_;
};

}  // namespace

void handle_completions(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  CompletionRequest r = parse_completion_request(parse_body(req.body), ctx);
  const std::string id = response_id(ctx, req, r.request_id, "cmpl-");
  set_request_id_header(ctx, req, res, id);
  auto gen = start_generation(ctx, ctx.new_request_id("cmpl-"), r.prompts, r.params, r.priority);
  if (r.stream.stream) {
    stream_events(res, gen, std::make_shared<CompletionEvents>(ctx, std::move(r), id));
    return;
  }
  CompletionAssembler assembler(ctx, r);
  while (!gen->done())
    for (const TaggedOutput& o : gen->next(std::chrono::milliseconds(1000))) assembler.apply(o);
  ojson body = envelope(id, unix_time(), r.model);
  ojson choices = ojson::array();
  int index = 0;
  const bool ids = r.report.token_ids;
  for (Choice& c : assembler.choices()) {
    const Prompt& prompt = r.prompts.at(index / r.params.n);
    choices.push_back({{"index", index++},
                       {"text", c.text},
                       {"logprobs", c.logprobs ? c.logprobs->take() : ojson(nullptr)},
                       {"finish_reason", c.finish_reason},
                       {"stop_reason", c.stop_reason},
                       {"token_ids", ids ? ojson(c.token_ids) : ojson(nullptr)},
                       {"prompt_logprobs", c.prompt_logprobs},
                       {"prompt_token_ids", ids ? ojson(prompt.ids) : ojson(nullptr)}});
  }
  body["choices"] = std::move(choices);
  body["usage"] = assembler.usage().to_json();
  set_json(res, body);
}

}  // namespace vllm::server
