// /v1/embeddings and /pooling request parsing: vLLM's EmbeddingCompletionRequest and
// PoolingCompletionRequest fields, each applied or refused with a 400 naming it; inputs
// tokenized, truncated as asked, and length-checked.
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/embeddings.h"
#include "server/log.h"
#include "server/serving.h"
#include "tokenizer/pipeline.h"

namespace vllm::server {
namespace {

constexpr const char* kFields[] = {
    "model", "input", "encoding_format", "dimensions", "user", "truncate_prompt_tokens",
    "truncation_side", "add_special_tokens", "request_id", "priority", "normalize",
    "embed_dtype", "endianness", "cache_salt", "mm_processor_kwargs"};
// /pooling's PoolingCompletionRequest adds these.
constexpr const char* kPoolingFields[] = {"task", "use_activation", "padding"};

constexpr const char* kInputShapes =
    "'input' must be a string, a list of strings, a list of token ids or a list of lists of "
    "token ids";

// The body's fields neither API knows (or, for /v1/embeddings, that /pooling adds), quoted.
std::string unknown_fields(const ojson& body, PoolingApi api) {
  std::string unknown;
  for (const auto& [k, v] : body.items()) {
    bool known = false;
    for (const char* f : kFields) known = known || k == f;
    if (api == PoolingApi::kPooling)
      for (const char* f : kPoolingFields) known = known || k == f;
    if (!known) unknown += (unknown.empty() ? "'" : ", '") + k + "'";
  }
  return unknown;
}

// /v1/embeddings warns about unknown fields as vLLM does; /pooling refuses them.
void check_unknown(const ojson& body, PoolingApi api) {
  const std::string unknown = unknown_fields(body, api);
  if (unknown.empty()) return;
  if (api == PoolingApi::kPooling)
    throw bad_request("unsupported fields in the request: " + unknown);
  log_warning("The following fields were present in the request but ignored: {" + unknown +
              "}");
}

// /pooling's own fields: the task (only "embed": one vector per input), use_activation (for
// "embed", L2 normalisation; `normalize` is its older name) and padding.
std::optional<bool> pooling_fields(const ojson& body) {
  if (auto task = get_string(body, "task"); task && *task != "embed")
    throw bad_request("Unsupported task: '" + *task + "' Supported tasks: ('embed',)", "task");
  if (auto pad = get_string(body, "padding"); pad && *pad != "do_not_pad")
    throw bad_request("'padding' " + *pad + " is not supported (do_not_pad only)", "padding");
  const auto activation = get_bool(body, "use_activation");
  const auto normalize = get_bool(body, "normalize");
  if (activation && normalize && *activation != *normalize)
    throw bad_request("'use_activation' and 'normalize' disagree", "use_activation");
  return activation ? activation : normalize;
}

// vLLM fields this server has no code for: a 400 rather than an answer that ignores them.
void reject_unsupported(const ojson& body) {
  if (auto t = get_string(body, "embed_dtype"); t && *t != "float32")
    throw bad_request("'embed_dtype' " + *t + " is not supported (float32 only)", "embed_dtype");
  if (auto e = get_string(body, "endianness"); e && *e != "native" && *e != "little")
    throw bad_request("'endianness' " + *e + " is not supported (native or little only)",
                      "endianness");
  if (body.contains("cache_salt") && !body["cache_salt"].is_null())
    throw bad_request("'cache_salt' is not supported by this server", "cache_salt");
  if (auto it = body.find("mm_processor_kwargs");
      it != body.end() && !it->is_null() && !(it->is_object() && it->empty()))
    throw bad_request("'mm_processor_kwargs' is not supported by this server",
                      "mm_processor_kwargs");
}

std::vector<int32_t> token_list(const ojson& list, const ServingContext& ctx) {
  if (list.empty()) throw bad_request("'input' holds an empty list of token ids", "input");
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const ojson& t : list) {
    if (!t.is_number_integer()) throw bad_request(kInputShapes, "input");
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.vocab_size)
      throw bad_request("token id " + std::to_string(id) + " is out of vocabulary (size " +
                            std::to_string(ctx.vocab_size) + ")", "input");
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

struct RawInput {
  bool is_text = false;
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<RawInput> read_inputs(const ojson& body, const ServingContext& ctx) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) throw bad_request("'input' is required", "input");
  const ojson& in = *it;
  std::vector<RawInput> out;
  auto add_text = [&](const ojson& s) {
    if (s.get_ref<const std::string&>().empty())
      throw bad_request("'input' holds an empty string, which cannot be embedded", "input");
    out.push_back({true, s.get<std::string>(), {}});
  };
  if (in.is_string()) {
    add_text(in);
    return out;
  }
  if (!in.is_array()) throw bad_request(kInputShapes, "input");
  if (in.empty()) throw bad_request("'input' must not be an empty list", "input");
  if (in.size() > kMaxEmbeddingInputs)
    throw bad_request("'input' holds " + std::to_string(in.size()) + " items; at most " +
                          std::to_string(kMaxEmbeddingInputs) + " are allowed", "input");
  if (in[0].is_number_integer()) {
    out.push_back({false, {}, token_list(in, ctx)});
    return out;
  }
  for (const ojson& item : in) {
    if (in[0].is_string() && item.is_string())
      add_text(item);
    else if (in[0].is_array() && item.is_array())
      out.push_back({false, {}, token_list(item, ctx)});
    else
      throw bad_request(kInputShapes, "input");
  }
  return out;
}

// vLLM's truncate_prompt_tokens: -1 means max_model_len. Text keeps its special tokens around
// the kept part (the tokenizer's truncation); token ids are cut as given.
std::optional<size_t> truncation(const ojson& body, const ServingContext& ctx) {
  const auto keep = get_int(body, "truncate_prompt_tokens");
  if (!keep) return std::nullopt;
  if (*keep == -1) return static_cast<size_t>(ctx.max_model_len);
  if (*keep < 1)
    throw bad_request("'truncate_prompt_tokens' must be -1 or a positive integer",
                      "truncate_prompt_tokens");
  if (*keep > ctx.max_model_len)
    throw bad_request("truncate_prompt_tokens value (" + std::to_string(*keep) +
                          ") is greater than max_model_len (" + std::to_string(ctx.max_model_len) +
                          "). Please, select a smaller truncation size.",
                      "truncate_prompt_tokens");
  return static_cast<size_t>(*keep);
}

// Keeps `n` of [begin, end) of ids: the last ones (left truncation) or the first ones.
void cut(std::vector<int32_t>& ids, size_t begin, size_t end, size_t n, bool left) {
  if (end - begin <= n) return;
  if (left)
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(begin),
              ids.begin() + static_cast<ptrdiff_t>(end - n));
  else
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(begin + n),
              ids.begin() + static_cast<ptrdiff_t>(end));
}

}  // namespace

EmbeddingRequest parse_embedding_request(const ojson& body, const ServingContext& ctx,
                                         PoolingApi api) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  check_unknown(body, api);
  reject_unsupported(body);
  EmbeddingRequest r;
  r.model = ctx.resolve_model(get_string(body, "model").value_or(""));
  get_string(body, "user");  // OpenAI's end-user id: type-checked, no effect (as in vLLM)
  r.request_id = get_string(body, "request_id").value_or("");
  if (get_int(body, "priority").value_or(0) != 0)
    throw bad_request("'priority' does not apply to embedding requests (use 0)", "priority");
  const std::string format = get_string(body, "encoding_format").value_or("float");
  if (format != "float" && format != "base64")
    throw bad_request("'encoding_format' must be 'float' or 'base64'", "encoding_format");
  r.base64 = format == "base64";
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    get_int(body, "dimensions");  // a wrong type is named as such first
    if (api == PoolingApi::kPooling)
      throw bad_request("dimensions is currently not supported", "dimensions");
    throw bad_request("Model \"" + r.model + "\" does not support matryoshka representation, "
                      "changing output dimensions will lead to poor results.", "dimensions");
  }
  const std::optional<bool> normalize =
      api == PoolingApi::kPooling ? pooling_fields(body) : get_bool(body, "normalize");
  r.normalize = normalize.value_or(ctx.pooling->model().normalize_by_default());
  const bool add_special = get_bool(body, "add_special_tokens").value_or(true);
  const auto side = get_string(body, "truncation_side").value_or("left");
  if (side != "left" && side != "right")
    throw bad_request("'truncation_side' must be 'left' or 'right'", "truncation_side");
  const std::optional<size_t> keep = truncation(body, ctx);

  const tok::Pipeline& p = ctx.tokenizer->pipeline();
  for (RawInput& in : read_inputs(body, ctx)) {
    std::vector<int32_t> ids = in.is_text ? ctx.tokenizer->encode(in.text, add_special)
                                          : std::move(in.ids);
    if (keep && in.is_text && add_special) {
      const size_t pre = p.prefix_ids.size(), post = p.suffix_ids.size();
      const size_t room = *keep > pre + post ? *keep - pre - post : 0;
      cut(ids, pre, ids.size() - post, room, side == "left");
    } else if (keep) {
      cut(ids, 0, ids.size(), *keep, side == "left");
    }
    if (ids.empty())
      throw bad_request("an input has no tokens left to embed", "input");
    if (ids.size() > static_cast<size_t>(ctx.max_model_len))
      throw bad_request("This model's maximum context length is " +
                            std::to_string(ctx.max_model_len) + " tokens. However, you requested " +
                            std::to_string(ids.size()) + " tokens in the input for embedding "
                            "generation. Please reduce the length of the input.", "input");
    r.inputs.push_back(std::move(ids));
  }
  return r;
}

}  // namespace vllm::server
