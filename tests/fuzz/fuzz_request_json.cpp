// Request bodies to what the engine needs: parse_body, then the completions and the chat
// request parsers, and Anthropic's Messages bodies through their chat conversion (sampling
// parameters through engine/params_json.cpp, prompts, messages
// rendered by the chat template, tools, structured-output grammars) on a ServingContext with
// the llama2 tokenizer and no engine. The server answers ApiError with its status and
// nlohmann::json exceptions with 400 (router.cpp wrap); any other exception would be a 500,
// and a 5xx ApiError is one: both are findings.
#include <fstream>
#include <sstream>

#include "fuzz_util.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/log.h"
#include "server/protocol.h"
#include "server/serving.h"

namespace {

vllm::server::ServingContext& context() {
  static vllm::server::ServingContext* ctx = [] {
    vllm::server::set_log_level("critical");  // unknown-field warnings on every input
    static std::unique_ptr<vllm::Tokenizer> tok = vllm::fuzz::load_shared_tokenizer("llama2");
    auto* c = new vllm::server::ServingContext();
    c->config.served_model_names = {"m", "other"};
    c->config.trust_request_chat_template = true;  // reach the template paths too
    c->config.render_limits.max_steps = 200'000;
    c->config.render_limits.max_output_bytes = size_t(1) << 20;
    c->tokenizer = tok.get();
    c->max_model_len = 512;
    c->vocab_size = tok->vocab_size();
    std::vector<int32_t> eos;
    if (tok->eos_id()) eos.push_back(*tok->eos_id());
    c->grammars = std::make_unique<vllm::structured::GrammarCache>(
        vllm::structured::TokenVocab::from_tokenizer(*tok, eos, tok->vocab_size()));
    std::ifstream f(std::string(VLLM_SOURCE_DIR) + "/fixtures/chat_template/smollm2.json");
    std::stringstream ss;
    ss << f.rdbuf();
    c->chat_template = vllm::ChatTemplate::parse(
        nlohmann::json::parse(ss.str())["source"]["inline"].get<std::string>());
    return c;
  }();
  return *ctx;
}

template <typename F>
void expect_4xx(F&& parse) {
  try {
    parse();
  } catch (const vllm::server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500)
      vllm::fuzz::fail("ApiError " + std::to_string(e.status()) + ": " + e.what());
  } catch (const nlohmann::json::exception&) {
    // router.cpp answers these with 400 "invalid request: ...".
  } catch (const std::exception& e) {
    vllm::fuzz::fail(std::string("an exception the server answers with 500: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& ctx = context();
  const std::string text(reinterpret_cast<const char*>(data), size);
  vllm::server::ojson body;
  try {
    body = vllm::server::parse_body(text);
  } catch (const vllm::server::ApiError& e) {
    if (e.status() != 400) vllm::fuzz::fail("parse_body: " + std::to_string(e.status()));
    return 0;
  }
  expect_4xx([&] { (void)vllm::server::parse_completion_request(body, ctx); });
  expect_4xx([&] { (void)vllm::server::parse_chat_request(body, ctx); });
  expect_4xx([&] {
    (void)vllm::server::parse_chat_request(
        vllm::server::chat_body_from_anthropic(body, false, ctx), ctx);
  });
  expect_4xx([&] {
    (void)vllm::server::render_chat(vllm::server::chat_body_from_anthropic(body, true, ctx), ctx);
  });
  return 0;
}
