// Real tool-call formats: fixtures/tool_calls/tool_calls.json holds what a model trained on
// each shared chat template emits for known calls (rendered by jinja2 as transformers does,
// tools/make_tool_call_fixtures.py). Each output, parsed whole and streamed a byte at a time
// through the template's parser (after its reasoning parser), must give back those calls.
#include <gtest/gtest.h>

#include <fstream>

#include "server/chat_output.h"

namespace vllm::server {
namespace {

const char* kFixture = "fixtures/tool_calls/tool_calls.json";

ojson load_fixture() {
  std::ifstream f(kFixture);
  if (!f) return nullptr;
  return ojson::parse(f);
}

TEST(ToolCallFixtures, EveryTemplateFormatParsesBack) {
  const ojson fixture = load_fixture();
  if (fixture.is_null()) GTEST_SKIP() << kFixture << " absent";
  ASSERT_GE(fixture["cases"].size(), 20u);
  for (const ojson& c : fixture["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["output"].get<std::string>());
    ChatOutputOptions o;
    o.mode = ChatOutputOptions::ToolMode::kAuto;
    o.tool_parser = make_tool_parser(c["parser"].get<std::string>(), c["tools"]);
    if (!c["reasoning_parser"].is_null())
      o.reasoning = ReasoningParser::make(c["reasoning_parser"].get<std::string>(), true);
    const std::string output = c["output"].get<std::string>();
    const ChatMessageOut m = chat_message(o, output);
    const ojson& calls = c["calls"];
    ASSERT_EQ(m.tool_calls.size(), calls.size());
    EXPECT_TRUE(m.tools_called);
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(m.tool_calls[i].call.name, calls[i]["name"].get<std::string>());
      EXPECT_EQ(ojson::parse(m.tool_calls[i].call.arguments), calls[i]["arguments"]);
      if (!c["arguments_text"].is_null()) {
        EXPECT_EQ(m.tool_calls[i].call.arguments, c["arguments_text"][i].get<std::string>());
      }
    }
    if (c["reasoning"].is_string()) {
      ASSERT_TRUE(m.reasoning.has_value());
      EXPECT_NE(m.reasoning->find(c["reasoning"].get<std::string>()), std::string::npos);
    }
    // Streamed one byte at a time: the same calls, ids and names first.
    ChatOutputStream s(o);
    std::vector<std::pair<std::string, std::string>> streamed;
    auto take = [&](const ChatDelta& d) {
      for (const ToolCallDelta& t : d.tool_calls) {
        if (t.index == static_cast<int>(streamed.size())) {
          ASSERT_TRUE(t.id && t.name);
          streamed.push_back({*t.name, ""});
        }
        streamed.at(t.index).second += t.arguments;
      }
    };
    for (char ch : output) take(s.feed(std::string(1, ch)));
    take(s.finish());
    ASSERT_EQ(streamed.size(), m.tool_calls.size());
    for (size_t i = 0; i < streamed.size(); ++i) {
      EXPECT_EQ(streamed[i].first, m.tool_calls[i].call.name);
      EXPECT_EQ(streamed[i].second, m.tool_calls[i].call.arguments);
    }
  }
}

}  // namespace
}  // namespace vllm::server
