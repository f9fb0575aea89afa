// Renders every real chat template over the conversations in fixtures/chat_template/*.json and
// requires byte-identical output (or the same error) as Python jinja2 under HF's settings.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cctype>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include "tokenizer/chat_template.h"

namespace vllm {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

fs::path repo_root() { return fs::path(VLLM_SOURCE_DIR); }

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  const fs::path dir = repo_root() / "fixtures" / "chat_template";
  if (!fs::exists(dir)) return names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The template text the fixture was generated from; nullopt when the shared file is absent.
std::optional<std::string> template_source(const Json& source) {
  if (source.contains("inline")) return source["inline"].get<std::string>();
  if (source.contains("file")) return read_file(repo_root() / source["file"].get<std::string>());
  const auto config_text = read_file(repo_root() / source["tokenizer_config"].get<std::string>());
  if (!config_text) return std::nullopt;
  const Json config = Json::parse(*config_text);
  const Json& chat = config.at("chat_template");
  if (chat.is_string()) return chat.get<std::string>();
  for (const auto& entry : chat) {
    if (entry.at("name") == source.at("name")) return entry.at("template").get<std::string>();
  }
  return std::nullopt;
}

// Fixture "now" ("2024-07-26T12:00:00") as the local time strftime_now() sees.
ChatTemplate::Clock fixed_clock(const std::string& iso) {
  std::tm t{};
  std::istringstream in(iso);
  in >> std::get_time(&t, "%Y-%m-%dT%H:%M:%S");
  timegm(&t);  // fills tm_wday / tm_yday
  return [t] { return t; };
}

class ChatTemplateFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateFixture, MatchesJinja2) {
  const fs::path path = repo_root() / "fixtures" / "chat_template" / (GetParam() + ".json");
  const Json fixture = Json::parse(*read_file(path));
  const auto source = template_source(fixture.at("source"));
  if (!source) GTEST_SKIP() << "template source not available: " << fixture.at("source").dump();
  ASSERT_EQ(source->size(), fixture.at("template_bytes").get<size_t>())
      << "template changed since the fixture was generated; rerun tools/make_chat_template_fixtures.py";

  const ChatTemplate tmpl = ChatTemplate::parse(*source);
  const auto clock = fixed_clock(fixture.at("now").get<std::string>());
  int passed = 0, total = 0;
  for (const auto& c : fixture.at("cases")) {
    ++total;
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(GetParam() + " / " + name);
    std::string output, error_kind, error_message;
    try {
      output = tmpl.render(c.at("context"), clock);
    } catch (const TemplateError& e) {
      error_kind = e.kind();
      error_message = e.what();
    }
    if (c.contains("error")) {
      const bool ok = error_message == c["error"]["message"].get<std::string>() &&
                      error_kind == c["error"]["type"].get<std::string>();
      EXPECT_TRUE(ok) << "expected " << c["error"]["type"].get<std::string>() << ": "
                      << c["error"]["message"].get<std::string>() << "\n     got "
                      << (error_kind.empty() ? "output: " + output : error_kind + ": " + error_message);
      passed += ok;
    } else {
      const std::string expected = c.at("expected").get<std::string>();
      EXPECT_EQ(error_message, "") << error_kind;
      EXPECT_EQ(output, expected);
      passed += error_message.empty() && output == expected;
    }
  }
  std::cout << "[ chat_template ] " << GetParam() << ": " << passed << "/" << total << " cases match\n";
}

// The default RenderLimits must stay far above what real templates cost: every fixture case,
// and a long conversation (256 messages of 2 KiB, about 130k tokens) under each template.
// The figures printed here are the ones docs/reliability.md quotes.
TEST_P(ChatTemplateFixture, StaysFarBelowTheDefaultRenderLimits) {
  const fs::path path = repo_root() / "fixtures" / "chat_template" / (GetParam() + ".json");
  const Json fixture = Json::parse(*read_file(path));
  const auto source = template_source(fixture.at("source"));
  if (!source) GTEST_SKIP() << "template source not available";
  const ChatTemplate tmpl = ChatTemplate::parse(*source);
  const auto clock = fixed_clock(fixture.at("now").get<std::string>());
  const RenderLimits limits;
  RenderStats worst;
  auto measure = [&](const Json& context) {
    RenderStats stats;
    try {
      tmpl.render(context, clock, limits, &stats);
    } catch (const TemplateError& e) {
      EXPECT_NE(e.kind(), kRenderLimitError) << e.what();
    }
    worst.steps = std::max(worst.steps, stats.steps);
    worst.output_bytes = std::max(worst.output_bytes, stats.output_bytes);
    worst.elapsed = std::max(worst.elapsed, stats.elapsed);
  };
  for (const auto& c : fixture.at("cases")) measure(c.at("context"));
  const uint64_t fixture_steps = worst.steps;
  Json long_chat = fixture.at("cases").at(0).at("context");
  Json messages = Json::array();
  for (int i = 0; i < 256; ++i) {
    std::string text;
    while (text.size() < 2048) text += "word " + std::to_string(text.size()) + " ";
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", text}});
  }
  long_chat["messages"] = messages;
  long_chat["add_generation_prompt"] = true;
  measure(long_chat);
  std::cout << "[ render cost ] " << GetParam() << ": fixtures " << fixture_steps
            << " steps; long chat " << worst.steps << " steps, " << worst.output_bytes
            << " bytes, " << worst.elapsed.count() << " us\n";
  EXPECT_LT(fixture_steps * 1000, limits.max_steps);
  EXPECT_LT(worst.steps * 20, limits.max_steps);
  EXPECT_LT(worst.output_bytes * 20, limits.max_output_bytes);
#if !defined(__SANITIZE_ADDRESS__)  // Debug + sanitizer wall times say nothing about Release
  EXPECT_LT(worst.elapsed * 10, limits.max_time);
#endif
}

INSTANTIATE_TEST_SUITE_P(Shared, ChatTemplateFixture, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ChatTemplateFixture);

}  // namespace
}  // namespace vllm
