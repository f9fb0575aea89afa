// Request parsing against the real SmolLM2 tokenizer: prompt forms, vLLM's context-length
// rules and messages, chat rendering, JSON depth limits, and the error JSON shape.
#include <gtest/gtest.h>

#include <filesystem>

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
  for (int i = 1; i < 64; ++i) long_prompt += "," + std::to_string(i + 1);
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
  auto with_tools = [&](const std::string& tools) {
    return chat_error(ctx_, R"({"messages": [{"role": "user", "content": "x"}], "tools": )" +
                                tools + "}");
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
  EXPECT_EQ(with_tools("null"), "200");
}

TEST_F(ProtocolTest, ContinueFinalMessageCutsAfterItsContent) {
  auto r = parse_chat_request(
      parse_body(R"({"messages": [{"role": "user", "content": "Hi"},
                                  {"role": "assistant", "content": "Hello, I am"}],
                     "continue_final_message": true, "add_generation_prompt": false})"),
      ctx_);
  EXPECT_TRUE(r.prompt.text.ends_with("Hello, I am"));
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
