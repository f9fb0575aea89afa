// Request parsing against the real SmolLM2 tokenizer: prompt forms, vLLM's context-length
// rules and messages, chat rendering, JSON depth limits, and the error JSON shape.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "model/load.h"
#include "server/api_error.h"
#include "server/protocol.h"
#include "server/serving.h"

namespace vllm::server {
namespace {

const char* kSmol = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

class ProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kSmol)) GTEST_SKIP() << kSmol << " absent";
    model_ = load_model(kSmol);
    ctx_.config.served_model_names = {"smol", "alias"};
    ctx_.tokenizer = model_.tokenizer.get();
    ctx_.max_model_len = 64;
    ctx_.vocab_size = model_.config().vocab_size;
    ctx_.chat_template = ChatTemplate::parse(*model_.tokenizer->chat_template());
  }
  int status_of(const std::string& body, bool chat = false) {
    try {
      if (chat) parse_chat_request(parse_body(body), ctx_);
      else parse_completion_request(parse_body(body), ctx_);
    } catch (const ApiError& e) {
      return e.status();
    }
    return 200;
  }
  // The ApiError of a completions body that must fail: its param and its message.
  std::string param_of(const std::string& body) {
    try {
      parse_completion_request(parse_body(body), ctx_);
    } catch (const ApiError& e) {
      return e.param().value_or("(none)");
    }
    return "(accepted)";
  }
  std::string message_of(const std::string& body) {
    try {
      parse_completion_request(parse_body(body), ctx_);
    } catch (const ApiError& e) {
      return e.what();
    }
    return "(accepted)";
  }
  LoadedModel model_;
  ServingContext ctx_;
};

TEST_F(ProtocolTest, PromptForms) {
  auto r = parse_completion_request(parse_body(R"({"prompt": "Hello world"})"), ctx_);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Hello world");
  EXPECT_EQ(r.prompts[0].ids, model_.tokenizer->encode("Hello world", true));
  EXPECT_EQ(r.prompts[0].max_tokens, 16);  // vLLM's completions default
  EXPECT_EQ(r.model, "smol");

  r = parse_completion_request(parse_body(R"({"prompt": [1, 2, 3], "model": "alias"})"), ctx_);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.model, "alias");

  r = parse_completion_request(parse_body(R"({"prompt": ["a", [5, 6]], "max_tokens": null})"), ctx_);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.prompts[1].max_tokens, 62);  // null: the rest of the context
}

TEST_F(ProtocolTest, ContextLengthRules) {
  EXPECT_EQ(status_of(R"({"prompt": [1, 2], "max_tokens": 62})"), 200);
  EXPECT_EQ(status_of(R"({"prompt": [1, 2], "max_tokens": 63})"), 400);
  try {
    parse_completion_request(parse_body(R"({"prompt": [1, 2], "max_tokens": 63})"), ctx_);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "max_tokens");
    EXPECT_NE(std::string(e.what()).find("maximum context length is 64"), std::string::npos);
  }
  std::string long_prompt = "[1";  // 64 tokens: no room left for one more
  // (Two appends: g++ 12 -O3 misreads `"," + std::to_string(...)` as an overlapping copy.)
  for (int i = 1; i < 64; ++i) (long_prompt += ',') += std::to_string(i + 1);
  long_prompt += "]";
  EXPECT_EQ(status_of(R"({"prompt": )" + long_prompt + "}"), 400);
}

TEST_F(ProtocolTest, EchoWithZeroMaxTokensScoresThePrompt) {
  auto r = parse_completion_request(
      parse_body(R"({"prompt": "Hi", "echo": true, "max_tokens": 0, "logprobs": 1})"), ctx_);
  EXPECT_TRUE(r.discard_output);
  EXPECT_EQ(r.prompts[0].max_tokens, 1);
  EXPECT_EQ(r.params.prompt_logprobs, 1);
  EXPECT_EQ(status_of(R"({"prompt": "Hi", "max_tokens": 0})"), 400);
}

TEST_F(ProtocolTest, FieldErrorsNameTheField) {
  try {
    parse_completion_request(parse_body(R"({"prompt": "x", "temperature": "hot"})"), ctx_);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "temperature");
  }
  EXPECT_EQ(status_of(R"({"prompt": "x", "model": "other"})"), 404);
  EXPECT_EQ(status_of(R"({"prompt": "x", "max_tokens": 16.0})"), 200);  // pydantic's int
  EXPECT_EQ(status_of(R"({"prompt": "x", "max_tokens": 16.5})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "x", "n": 129})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "x", "stream_options": {}})"), 400);
  EXPECT_EQ(status_of(R"({"prompt": "x", "stream": true, "stream_options": {}})"), 200);
}

TEST_F(ProtocolTest, ChatRendersWithoutExtraSpecialTokens) {
  auto r = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                     "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})"),
      ctx_);
  EXPECT_NE(r.prompt.text.find("<|im_start|>user\nHi<|im_end|>"), std::string::npos);
  EXPECT_TRUE(r.prompt.text.ends_with("<|im_start|>assistant\n"));
  EXPECT_EQ(r.prompt.ids, model_.tokenizer->encode(r.prompt.text, false));
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_EQ(r.params.logprobs, 2);
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true), 400);
  ctx_.config.trust_request_chat_template = true;
  EXPECT_EQ(status_of(R"({"messages": [{"role": "user", "content": "x"}],
                          "chat_template": "{{ raise_exception('no') }}"})", true), 400);
}

// The ApiError a chat body gets, as "status param: message"; "200" when it parses.
std::string chat_error(ServingContext& ctx, const std::string& body) {
  try {
    parse_chat_request(parse_body(body), ctx);
  } catch (const ApiError& e) {
    return std::to_string(e.status()) + " " + e.param().value_or("-") + ": " + e.what();
  }
  return "200";
}

TEST_F(ProtocolTest, RequestChatTemplateNeedsTrust) {
  const std::string refused =
      "400 chat_template: a chat template was passed with the request, but the server was not "
      "started with --trust-request-chat-template; the untrusted template is refused";
  const std::string own = R"({"messages": [{"role": "user", "content": "x"}],
                              "chat_template": "{{ messages[0].content }}!"})";
  const std::string via_kwargs = R"({"messages": [{"role": "user", "content": "x"}],
      "chat_template_kwargs": {"chat_template": "{{ messages[0].content }}?"}})";
  EXPECT_EQ(chat_error(ctx_, own), refused);
  EXPECT_EQ(chat_error(ctx_, via_kwargs), refused);
  ctx_.config.trust_request_chat_template = true;
  EXPECT_EQ(parse_chat_request(parse_body(own), ctx_).prompt.text, "x!");
  EXPECT_EQ(parse_chat_request(parse_body(via_kwargs), ctx_).prompt.text, "x?");
}

TEST_F(ProtocolTest, RenderLimitsAreA400NamingTheLimit) {
  ctx_.config.trust_request_chat_template = true;
  ctx_.config.render_limits.max_steps = 10000;
  EXPECT_EQ(chat_error(ctx_, R"({"messages": [{"role": "user", "content": "x"}],
                       "chat_template": "{% for i in range(100000) %}{% endfor %}"})"),
            "400 messages: chat template rendering exceeded the step limit (10000 steps) "
            "(--chat-template-max-steps)");
  EXPECT_EQ(chat_error(ctx_, R"({"messages": [{"role": "user", "content": "x"}],
                       "chat_template": "{{ 'x' * 10**12 }}"})"),
            "400 messages: chat template rendering exceeded the output size limit (16777216 "
            "bytes) (--chat-template-max-output-bytes)");
  ctx_.config.render_limits = RenderLimits{};
  ctx_.abort_all = true;  // the drain timeout cancels renders in flight
  EXPECT_EQ(chat_error(ctx_, R"({"messages": [{"role": "user", "content": "x"}],
                       "chat_template": "{% for i in range(100000) %}{% endfor %}"})"),
            "400 messages: chat template rendering was cancelled");
}

TEST_F(ProtocolTest, ToolsFollowTheOpenAISchema) {
  // tool_choice "none": tools without it mean "auto", a 400 on a server without a parser.
  auto with_tools = [&](const std::string& tools, const std::string& choice = R"("none")") {
    return chat_error(ctx_, R"({"messages": [{"role": "user", "content": "x"}], "tools": )" +
                                tools + R"(, "tool_choice": )" + choice + "}");
  };
  EXPECT_EQ(with_tools("[1, 2, 3]"), "400 tools: 'tools[0]' must be an object, not a number");
  EXPECT_EQ(with_tools(R"([{"type": "function", "function": {"description": "d"}}])"),
            "400 tools: 'tools[0].function.name' is required");
  EXPECT_EQ(with_tools(R"([{"function": {"name": "f"}}, {"type": "code", "function": {}}])"),
            "400 tools: 'tools[1].type' must be 'function', not \"code\"");
  EXPECT_EQ(with_tools(R"([{"type": "function"}])"), "400 tools: 'tools[0].function' is required");
  EXPECT_EQ(with_tools(R"([{"function": {"name": "f", "parameters": "{}"}}])"),
            "400 tools: 'tools[0].function.parameters' must be an object, not a string");
  EXPECT_EQ(with_tools(R"("f")"), "400 tools: 'tools' must be a list, not a string");
  EXPECT_EQ(with_tools(R"([{"type": "function", "function": {"name": "f", "description": null,
                            "parameters": {"type": "object"}, "strict": true}, "x": 1}])"),
            "200");
  EXPECT_EQ(with_tools("null", "null"), "200");
  // The tool list is checked before tool_choice, as pydantic does before vLLM's serving checks.
  EXPECT_EQ(with_tools("[1]", R"("auto")"), "400 tools: 'tools[0]' must be an object, not a number");
  EXPECT_EQ(with_tools(R"([{"function": {"name": "f"}}])", R"("auto")"),
            "400 tool_choice: \"auto\" tool choice requires --enable-auto-tool-choice and "
            "--tool-call-parser to be set");
}

TEST_F(ProtocolTest, ContinueFinalMessageCutsAfterItsContent) {
  auto r = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "Hi"},
                                  {"role": "assistant", "content": "Hello, I am"}],
                     "continue_final_message": true, "add_generation_prompt": false})"),
      ctx_);
  EXPECT_TRUE(r.prompt.text.ends_with("Hello, I am"));
}

TEST_F(ProtocolTest, StringBooleansAsPydanticReadsThem) {
  auto r = parse_completion_request(
      parse_body(R"({"prompt": "x", "echo": "true", "ignore_eos": "Yes", "stream": "1",
                     "skip_special_tokens": "off", "return_token_ids": 1})"), ctx_);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_TRUE(r.stream.stream);
  EXPECT_FALSE(r.params.skip_special_tokens);
  EXPECT_TRUE(r.report.token_ids);
  EXPECT_EQ(param_of(R"({"prompt": "x", "echo": "maybe"})"), "echo");
  EXPECT_EQ(param_of(R"({"prompt": "x", "ignore_eos": 2})"), "ignore_eos");
}

TEST_F(ProtocolTest, SeedIsASigned64BitInteger) {
  auto r = parse_completion_request(
      parse_body(R"({"prompt": "x", "seed": 9223372036854775807})"), ctx_);
  EXPECT_EQ(r.params.seed, 9223372036854775807ull);
  r = parse_completion_request(parse_body(R"({"prompt": "x", "seed": -1})"), ctx_);
  EXPECT_EQ(r.params.seed, ~0ull);
  for (const char* seed : {"9223372036854775808", "-9223372036854775809", "1e30"}) {
    const std::string body = std::string(R"({"prompt": "x", "seed": )") + seed + "}";
    EXPECT_EQ(param_of(body), "seed") << seed;
    EXPECT_NE(message_of(body).find("[-9223372036854775808, 9223372036854775807]"),
              std::string::npos) << seed;
  }
  EXPECT_EQ(param_of(R"({"prompt": "x", "seed": 1.5})"), "seed");
}

TEST_F(ProtocolTest, LogitBiasNamesEveryBadKey) {
  const std::string msg = message_of(R"({"prompt": "x", "logit_bias": {"a": 1, "5": 1, "-2": 1}})");
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'-2'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'5'"), std::string::npos) << msg;
  EXPECT_EQ(param_of(R"({"prompt": "x", "allowed_token_ids": []})"), "allowed_token_ids");
}

TEST_F(ProtocolTest, TruncatePromptTokens) {
  auto with_ten = [](const std::string& fields) {
    std::string b = R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])";
    b += fields;
    return b;
  };
  auto r = parse_completion_request(parse_body(with_ten(R"(, "truncate_prompt_tokens": 4})")),
                                    ctx_);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{7, 8, 9, 10}));  // the last 4: "left"
  EXPECT_EQ(r.prompts[0].text, model_.tokenizer->decode(r.prompts[0].ids, false));
  r = parse_completion_request(
      parse_body(with_ten(R"(, "truncate_prompt_tokens": 4, "truncation_side": "right"})")),
      ctx_);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3, 4}));
  r = parse_completion_request(parse_body(with_ten(R"(, "truncate_prompt_tokens": 20})")), ctx_);
  EXPECT_EQ(r.prompts[0].ids.size(), 10u);  // shorter prompts stay whole
  // -1: as many as max_model_len - max_tokens (64 - 16) leaves; more than that is an error.
  std::string long_prompt = "[1";
  for (int i = 2; i <= 60; ++i) long_prompt.append(",").append(std::to_string(i));
  long_prompt += "]";
  r = parse_completion_request(
      parse_body(R"({"prompt": )" + long_prompt + R"(, "truncate_prompt_tokens": -1})"), ctx_);
  EXPECT_EQ(r.prompts[0].ids.size(), 48u);
  EXPECT_EQ(r.prompts[0].ids.front(), 13);
  EXPECT_EQ(param_of(with_ten(R"(, "truncate_prompt_tokens": 49})")), "truncate_prompt_tokens");
  EXPECT_EQ(param_of(with_ten(R"(, "truncate_prompt_tokens": -2})")), "truncate_prompt_tokens");
  EXPECT_EQ(param_of(with_ten(R"(, "truncation_side": "middle"})")), "truncation_side");
  auto c = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "Hello there, how are you?"}],
                     "truncate_prompt_tokens": 5, "max_tokens": 3})"), ctx_);
  EXPECT_EQ(c.prompt.ids.size(), 5u);
}

TEST_F(ProtocolTest, ChatEchoAndRole) {
  auto r = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "Hi"},
                                  {"role": "assistant", "content": "Hello, I am"}],
                     "continue_final_message": true, "echo": true})"), ctx_);
  EXPECT_EQ(r.role, "assistant");
  EXPECT_EQ(r.echo, "Hello, I am");
  EXPECT_EQ(r.params.prompt_logprobs, 0);  // vLLM: echo asks for prompt logprobs
  // With a generation prompt the reply is the assistant's: a last user message is not echoed.
  r = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "Hi"}], "echo": true})"), ctx_);
  EXPECT_EQ(r.role, "assistant");
  EXPECT_EQ(r.echo, "");
  // Without one the reply continues the last message's role.
  r = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "Hi"}], "echo": true,
                     "add_generation_prompt": false})"), ctx_);
  EXPECT_EQ(r.role, "user");
  EXPECT_EQ(r.echo, "Hi");
}

TEST_F(ProtocolTest, FieldsWithoutAnEffectHereAreRefused) {
  const std::map<std::string, std::string> refused = {
      {"cache_salt", R"("x")"},         {"kv_transfer_params", R"({"a": 1})"},
      {"suffix", R"("x")"},             {"vllm_xargs", R"({"a": 1})"},
      {"logits_processors", R"(["m.P"])"}};
  for (const auto& [f, value] : refused)
    EXPECT_EQ(param_of(R"({"prompt": "x", ")" + f + R"(": )" + value + "}"), f);
  EXPECT_EQ(param_of(R"({"prompt": "x", "priority": 1})"), "priority");  // fcfs server
  // A structural tag is a constraint (vLLM's older top-level field): bad JSON names it.
  EXPECT_EQ(param_of(R"({"prompt": "x", "structural_tag": "x"})"), "structural_tag");
  EXPECT_EQ(status_of(R"({"prompt": "x", "logits_processors": [], "user": "u",
                          "length_penalty": 1.0, "spaces_between_special_tokens": true})"), 200);
  auto r = parse_completion_request(
      parse_body(R"({"prompt": "x", "return_tokens_as_token_ids": true, "request_id": "abc"})"),
      ctx_);
  EXPECT_TRUE(r.report.tokens_as_ids);
  EXPECT_EQ(r.request_id, "abc");
}

TEST(ProtocolBody, DepthAndSyntax) {
  EXPECT_THROW(parse_body("{"), ApiError);
  EXPECT_THROW(parse_body(std::string(100, '[') + std::string(100, ']')), ApiError);
  EXPECT_NO_THROW(parse_body(std::string(60, '[') + std::string(60, ']')));
  EXPECT_THROW(parse_body("{\"a\": \"\xff\"}"), ApiError);
}

TEST(ErrorJson, OpenAiShape) {
  const auto j = error_json(404, "The model `x` does not exist.", std::string("model"));
  EXPECT_EQ(j["object"], "error");
  EXPECT_EQ(j["error"]["message"], "The model `x` does not exist.");
  EXPECT_EQ(j["error"]["type"], "NotFoundError");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], 404);
  EXPECT_TRUE(error_json(400, "bad")["error"]["param"].is_null());
}

}  // namespace
}  // namespace vllm::server
