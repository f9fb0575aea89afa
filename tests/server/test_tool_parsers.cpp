// Tool-call and reasoning parsers: JSON arguments written as Python's json.dumps writes them
// (expected strings from CPython), vLLM's splits of hand-picked outputs, and for every parser a
// differential test: fuzzed outputs of its format streamed in random chunks must add up to the
// non-streaming parse, which must recover the calls the output was made from.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "server/chat_output.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"
#include "util/check.h"

namespace vllm::server {
namespace {

TEST(NormalizeJson, MatchesPythonJsonDumps) {
  // Expected: json.dumps(json.loads(text), ensure_ascii=False) in CPython 3.
  const std::pair<const char*, const char*> cases[] = {
      {R"({"a":1,"b":[1,2.50,"x\"y\\z\n\t\u0001\u00e9\u4e2d\ud83d\ude00\/"],"c":null,"d":true,"e":{}})",
       "{\"a\": 1, \"b\": [1, 2.5, \"x\\\"y\\\\z\\n\\t\\u0001\u00e9\u4e2d\U0001F600/\"], \"c\": null, "
       "\"d\": true, \"e\": {}}"},
      {"1e16 ", "1e+16"},
      {"1E-5 ", "1e-05"},
      {"1e5 ", "100000.0"},
      {"-0.0 ", "-0.0"},
      {"[3.14159, 1e300,0.1]", "[3.14159, 1e+300, 0.1]"},
      {" { \"k\" :\n [ ] , \"z\":\"\" } ", "{\"k\": [], \"z\": \"\"}"},
  };
  for (const auto& [in, want] : cases) {
    NormalizedJson n = normalize_json(in);
    EXPECT_FALSE(n.error) << in;
    EXPECT_TRUE(n.end.has_value()) << in;
    EXPECT_EQ(n.out, want) << in;
  }
  EXPECT_TRUE(normalize_json("{\"a\": tru").out == "{\"a\": ");
  EXPECT_TRUE(normalize_json("{\"a\" 1}").error);
  // Untrusted nesting is an error, not a deep recursion.
  EXPECT_TRUE(normalize_json(std::string(100000, '[')).error);
  auto py = make_tool_parser("pythonic", {});
  EXPECT_TRUE(parse_tool_calls(*py, "[f(x=" + std::string(100000, '[') + ")]").calls.empty());
}

TEST(NormalizeJson, PrefixesGivePrefixes) {
  const std::string text = R"({"city": "Par\u00e9s \"x\"", "n": [12, -3.5e2, true, null], "o": {}})";
  const std::string full = normalize_json(text).out;
  for (size_t i = 0; i <= text.size(); ++i) {
    const std::string part = normalize_json(text.substr(0, i)).out;
    EXPECT_EQ(full.substr(0, part.size()), part) << "prefix " << i;
  }
}

// ---- fuzzed outputs of each format ----

using Rng = std::mt19937;

std::string random_text(Rng& rng, size_t max_len, std::string_view alphabet) {
  std::string s;
  const size_t n = rng() % (max_len + 1);
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

const std::string_view kTextChars = "abc xyz<>/_[]{}(),;:=\"'\n\\t";

std::string random_string_value(Rng& rng) {
  static const char* pieces[] = {"a", "b", " ", "\"", "\\", "\n", "\t", "é", "中", "😀", "<",
                                 "/", "{", "}", ",", ":", "[", "]", "'", "x1", "\x01"};
  std::string s;
  const int n = rng() % 8;
  for (int i = 0; i < n; ++i) s += pieces[rng() % (sizeof pieces / sizeof *pieces)];
  return s;
}

ojson random_value(Rng& rng, int depth) {
  switch (rng() % (depth > 2 ? 5 : 7)) {
    case 0: return random_string_value(rng);
    case 1: return static_cast<int64_t>(rng() % 2000) - 1000;
    case 2: return (static_cast<int>(rng() % 20000) - 10000) / 8.0 + 0.125;
    case 3: return rng() % 2 == 0;
    case 4: return nullptr;
    case 5: {
      ojson a = ojson::array();
      for (int i = rng() % 3; i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      ojson o = ojson::object();
      for (int i = rng() % 3; i > 0; --i)
        o[std::string(1, static_cast<char>('a' + rng() % 5))] = random_value(rng, depth + 1);
      return o;
    }
  }
}

ojson random_args(Rng& rng) {
  ojson o = ojson::object();
  static const char* keys[] = {"p0", "p1", "p2", "p3", "p4", "p5"};
  for (int i = rng() % 4; i > 0; --i) o[keys[rng() % 6]] = random_value(rng, 1);
  return o;
}

std::string random_name(Rng& rng) {
  static const char* names[] = {"get_weather", "search", "f", "run_code", "send_email2"};
  return names[rng() % 5];
}

// JSON text in one of the spellings models write: compact, Python's, or indented.
std::string spell(Rng& rng, const ojson& v) {
  switch (rng() % 3) {
    case 0: return v.dump();
    case 1: return normalize_json(v.dump()).out;
    default: return v.dump(2);
  }
}

struct Sample {
  std::string text;
  std::optional<std::string> content;
  std::vector<std::pair<std::string, ojson>> calls;  // name, arguments
  bool raw_arguments = false;  // arguments compared as text (deepseek_v3 passes them through)
  std::vector<std::string> raw;
};

// Content that does not contain `marker` (nor start with '{' / '[' where that means calls).
std::string content_without(Rng& rng, std::string_view marker) {
  for (;;) {
    std::string c = random_text(rng, 30, kTextChars);
    if (c.find(marker) == std::string::npos) return c;
  }
}

Sample hermes_sample(Rng& rng) {
  Sample s;
  const std::string c = content_without(rng, "<tool_call>");
  s.text = c;
  const int n = rng() % 3;
  if (n == 0) {
    s.content = c;
    return s;
  }
  s.content = c.empty() ? std::nullopt : std::optional(c);
  for (int i = 0; i < n; ++i) {
    const std::string name = random_name(rng);
    const ojson args = random_args(rng);
    ojson call = rng() % 2 ? ojson{{"name", name}, {"arguments", args}}
                           : ojson{{"arguments", args}, {"name", name}};
    s.text += "<tool_call>\n" + spell(rng, call) + "\n</tool_call>" + (i + 1 < n ? "\n" : "");
    s.calls.push_back({name, args});
  }
  return s;
}

Sample llama3_sample(Rng& rng) {
  Sample s;
  const int n = rng() % 3;
  if (n == 0) {
    std::string c;
    do c = content_without(rng, "<|python_tag|>");
    while (c.starts_with("{") || c.starts_with("<|python_tag|>"));
    s.text = c;
    s.content = c;
    return s;
  }
  if (rng() % 2) s.text = "<|python_tag|>";
  for (int i = 0; i < n; ++i) {
    const std::string name = random_name(rng);
    const ojson args = random_args(rng);
    const char* key = rng() % 2 ? "parameters" : "arguments";
    s.text += (i ? "; " : "") + spell(rng, ojson{{"name", name}, {key, args}});
    s.calls.push_back({name, args});
  }
  return s;
}

Sample mistral_sample(Rng& rng) {
  Sample s;
  const std::string c = content_without(rng, "[TOOL_CALLS]");
  s.text = c;
  const int n = rng() % 3;
  if (n == 0) {
    s.content = c;
    return s;
  }
  s.content = c.empty() ? std::nullopt : std::optional(c);
  const bool v11 = rng() % 2;
  s.text += v11 ? "[TOOL_CALLS]" : "[TOOL_CALLS] [";
  for (int i = 0; i < n; ++i) {
    const std::string name = random_name(rng);
    const ojson args = random_args(rng);
    if (v11) {
      s.text += (i ? "[TOOL_CALLS]" : "") + name + "[ARGS]" + spell(rng, args);
    } else {
      s.text += (i ? ", " : "") +
                spell(rng, ojson{{"name", name}, {"arguments", args}, {"id", "abcDEF123"}});
    }
    s.calls.push_back({name, args});
  }
  if (!v11) s.text += "]";
  return s;
}

Sample required_sample(Rng& rng) {
  Sample s;
  s.text = "[";
  const int n = 1 + rng() % 3;
  for (int i = 0; i < n; ++i) {
    const std::string name = random_name(rng);
    const ojson args = random_args(rng);
    s.text += (i ? ", " : "") + spell(rng, ojson{{"name", name}, {"parameters", args}});
    s.calls.push_back({name, args});
  }
  s.text += "]";
  return s;
}

Sample deepseek_sample(Rng& rng) {
  Sample s;
  const std::string c = content_without(rng, "<｜tool▁calls▁begin｜>");
  s.text = c;
  const int n = rng() % 3;
  s.raw_arguments = true;
  if (n == 0) {
    s.content = c;
    return s;
  }
  s.content = c.empty() ? std::nullopt : std::optional(c);
  s.text += "<｜tool▁calls▁begin｜>";
  for (int i = 0; i < n; ++i) {
    const std::string name = random_name(rng);
    const ojson args = random_args(rng);
    const std::string a = spell(rng, args);
    s.text += std::string(i ? "\n" : "") + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name +
              "\n```json\n" + a + "\n```<｜tool▁call▁end｜>";
    s.calls.push_back({name, args});
    s.raw.push_back(a);
  }
  s.text += "<｜tool▁calls▁end｜>";
  return s;
}

const ojson& coder_tools() {
  static const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "temp": {"type": "number"}, "metric": {"type": "boolean"},
                     "opts": {"type": "object"}, "tags": {"type": "array"}}}}}])");
  return tools;
}

Sample qwen3_coder_sample(Rng& rng) {
  Sample s;
  const std::string c = content_without(rng, "<tool_call>");
  s.text = c;
  const int n = rng() % 3;
  if (n == 0) {
    s.content = c;
    return s;
  }
  s.content = c.empty() ? std::nullopt : std::optional(c);
  for (int i = 0; i < n; ++i) {
    ojson args = ojson::object();
    s.text += "<tool_call>\n<function=get_weather>\n";
    for (const char* p : {"city", "days", "temp", "metric", "opts", "tags"}) {
      if (rng() % 2) continue;
      std::string text;
      const std::string_view name(p);
      if (name == "city") {
        std::string v;
        do v = random_string_value(rng);
        while (v.find("</parameter>") != std::string::npos || v == "null" ||
               v.starts_with("\n") || v.ends_with("\n"));
        args[p] = v;
        text = v;
      } else if (name == "days") {
        args[p] = static_cast<int64_t>(rng() % 30);
        text = args[p].dump();
      } else if (name == "temp") {
        const double v = (static_cast<int>(rng() % 400) - 200) / 4.0;
        text = ojson(v).dump();
        // vLLM: a number with no fraction becomes an int
        if (v == static_cast<int64_t>(v)) args[p] = static_cast<int64_t>(v);
        else args[p] = v;
      } else if (name == "metric") {
        args[p] = rng() % 2 == 0;
        text = args[p].get<bool>() ? "True" : "false";
      } else {
        args[p] = name == "opts" ? random_args(rng) : ojson::array({1, "two", nullptr});
        text = args[p].dump();
      }
      s.text += "<parameter=" + std::string(p) + ">\n" + text + "\n</parameter>\n";
    }
    s.text += "</function>\n</tool_call>";
    if (i + 1 < n) s.text += "\n";
    s.calls.push_back({"get_weather", args});
  }
  return s;
}

std::string py_repr(const ojson& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number()) return v.dump();
  if (v.is_string()) {
    std::string out = "'";
    for (char ch : v.get<std::string>()) {
      if (ch == '\'' || ch == '\\') out += '\\';
      if (ch == '\n') {
        out += "\\n";
        continue;
      }
      out += ch;
    }
    return out + "'";
  }
  std::string out = v.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it, first = false) {
    if (!first) out += ", ";
    if (v.is_object()) out += py_repr(it.key()) + ": ";
    out += py_repr(*it);
  }
  return out + (v.is_array() ? "]" : "}");
}

Sample pythonic_sample(Rng& rng) {
  Sample s;
  const int n = rng() % 3;
  if (n == 0) {
    std::string c;
    do c = random_text(rng, 30, kTextChars);
    while (c.find_first_not_of(" \t\r\n") != std::string::npos &&
           c[c.find_first_not_of(" \t\r\n")] == '[');
    if (c.find_first_not_of(" \t\r\n") == std::string::npos) c += "ok";
    s.text = c;
    s.content = c;
    return s;
  }
  s.text = "[";
  for (int i = 0; i < n; ++i) {
    const std::string name = random_name(rng);
    ojson args = random_args(rng);
    s.text += (i ? ", " : "") + name + "(";
    bool first = true;
    for (auto& [k, v] : args.items()) {
      s.text += (first ? "" : ", ") + k + "=" + py_repr(v);
      first = false;
    }
    s.text += ")";
    s.calls.push_back({name, args});
  }
  s.text += "]";
  return s;
}

struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
};

Streamed stream(const ToolParser& parser, const std::string& text, Rng& rng) {
  ToolCallStream ts(parser);
  Streamed out;
  auto take = [&](const ToolStreamDelta& d) {
    out.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.index == static_cast<int>(out.calls.size())) {
        EXPECT_TRUE(c.id && c.name) << "a call starts with its id and name";
        out.calls.push_back({c.name.value_or(""), ""});
      }
      ASSERT_LT(c.index, static_cast<int>(out.calls.size()));
      out.calls[c.index].arguments += c.arguments;
    }
  };
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 8, text.size() - i);
    take(ts.feed(std::string_view(text).substr(i, n)));
    i += n;
  }
  take(ts.finish());
  return out;
}

void differential(const std::string& parser_name, Sample (*gen)(Rng&), const ojson& tools = {}) {
  std::unique_ptr<ToolParser> parser = parser_name == "required"
                                           ? make_required_tool_parser()
                                           : make_tool_parser(parser_name, tools);
  Rng rng(1234);
  for (int iter = 0; iter < 400; ++iter) {
    const Sample s = gen(rng);
    SCOPED_TRACE(parser_name + " output: " + s.text);
    const ParsedTools p = parse_tool_calls(*parser, s.text);
    EXPECT_EQ(p.content, s.content);
    ASSERT_EQ(p.calls.size(), s.calls.size());
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(p.calls[i].name, s.calls[i].first);
      if (s.raw_arguments) {
        EXPECT_EQ(p.calls[i].arguments, s.raw[i]);
      } else {
        EXPECT_EQ(ojson::parse(p.calls[i].arguments), s.calls[i].second);
        EXPECT_EQ(p.calls[i].arguments, normalize_json(s.calls[i].second.dump()).out)
            << "arguments as json.dumps writes them";
      }
    }
    for (int k = 0; k < 3; ++k) {
      const Streamed st = stream(*parser, s.text, rng);
      EXPECT_EQ(st.content, p.content.value_or(""));
      ASSERT_EQ(st.calls.size(), p.calls.size());
      for (size_t i = 0; i < p.calls.size(); ++i) {
        EXPECT_EQ(st.calls[i].name, p.calls[i].name);
        EXPECT_EQ(st.calls[i].arguments, p.calls[i].arguments);
      }
    }
  }
}

TEST(ToolParsers, HermesStreamsAsItParses) { differential("hermes", hermes_sample); }
TEST(ToolParsers, Llama3JsonStreamsAsItParses) { differential("llama3_json", llama3_sample); }
TEST(ToolParsers, MistralStreamsAsItParses) { differential("mistral", mistral_sample); }
TEST(ToolParsers, RequiredStreamsAsItParses) { differential("required", required_sample); }
TEST(ToolParsers, DeepSeekV3StreamsAsItParses) { differential("deepseek_v3", deepseek_sample); }
TEST(ToolParsers, Qwen3CoderStreamsAsItParses) {
  differential("qwen3_coder", qwen3_coder_sample, coder_tools());
}
TEST(ToolParsers, PythonicStreamsAsItParses) { differential("pythonic", pythonic_sample); }

TEST(ToolParsers, MalformedCallIsContent) {
  // As vLLM: a call that does not parse leaves the whole output as content.
  auto hermes = make_tool_parser("hermes", {});
  const std::string bad = "ok <tool_call>\n{\"name\": \"f\", \"arguments\": {]}\n</tool_call>";
  ParsedTools p = parse_tool_calls(*hermes, bad);
  EXPECT_EQ(p.content, bad);
  EXPECT_TRUE(p.calls.empty());
  auto py = make_tool_parser("pythonic", {});
  EXPECT_EQ(parse_tool_calls(*py, "[f(x=1)").content, "[f(x=1)");
  EXPECT_THROW(make_tool_parser("nope", {}), Error);
}

TEST(ToolParsers, Qwen3CoderTypesFollowTheSchema) {
  auto p = make_tool_parser("qwen3_coder", coder_tools());
  ParsedTools r = parse_tool_calls(
      *p, "<tool_call>\n<function=get_weather>\n<parameter=city>\nnull\n</parameter>\n"
          "<parameter=days>\n3\n</parameter>\n<parameter=temp>\n2.0\n</parameter>\n"
          "<parameter=extra>\n5\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  // vLLM: "null" is None, integral floats become ints, unknown parameters stay strings.
  EXPECT_EQ(r.calls[0].arguments, R"({"city": null, "days": 3, "temp": 2, "extra": "5"})");
}

// ---- reasoning ----

ReasoningSplit split(const char* parser, const std::string& text, bool thinking = true) {
  return ReasoningParser::make(parser, thinking)->split(text);
}

TEST(ReasoningParsers, SplitAsVllm) {
  using O = std::optional<std::string>;
  auto r = split("deepseek_r1", "<think>abc</think>hi");
  EXPECT_EQ(r.reasoning, O("abc"));
  EXPECT_EQ(r.content, O("hi"));
  r = split("deepseek_r1", "abc</think>hi");  // R1 often omits the opening tag
  EXPECT_EQ(r.reasoning, O("abc"));
  EXPECT_EQ(r.content, O("hi"));
  r = split("deepseek_r1", "<think>abc");  // stopped inside the think block
  EXPECT_EQ(r.reasoning, O("abc"));
  EXPECT_EQ(r.content, std::nullopt);
  r = split("deepseek_r1", "<think>abc</think>");
  EXPECT_EQ(r.content, std::nullopt);
  r = split("qwen3", "<think>\nabc\n</think>\n\nhi");
  EXPECT_EQ(r.reasoning, O("\nabc\n"));
  EXPECT_EQ(r.content, O("\n\nhi"));
  r = split("qwen3", "abc");  // thinking on, no end tag: cut short, all reasoning
  EXPECT_EQ(r.reasoning, O("abc"));
  EXPECT_EQ(r.content, std::nullopt);
  r = split("qwen3", "abc", false);  // enable_thinking false: all content
  EXPECT_EQ(r.reasoning, std::nullopt);
  EXPECT_EQ(r.content, O("abc"));
  r = split("qwen3", "plan<tool_call>\n<function=f>\n</function>\n</tool_call>");
  EXPECT_EQ(r.reasoning, O("plan"));
  EXPECT_EQ(r.content, O("<tool_call>\n<function=f>\n</function>\n</tool_call>"));
  r = split("qwen3", "a <tool_call> b");  // a mention, not a call
  EXPECT_EQ(r.reasoning, O("a <tool_call> b"));
  EXPECT_THROW(ReasoningParser::make("nope", true), Error);
}

TEST(ReasoningParsers, StreamsAsItSplits) {
  Rng rng(99);
  static const char* pieces[] = {"a", " ", "\n", "<", ">", "/", "think", "<think", "</thin",
                                 "é", "<tool_call>", "<function=f>", "x"};
  for (const char* name : {"deepseek_r1", "qwen3"}) {
    for (bool thinking : {true, false}) {
      auto parser = ReasoningParser::make(name, thinking);
      for (int iter = 0; iter < 500; ++iter) {
        std::string text = rng() % 2 ? "" : "\n";
        if (rng() % 2) text += "<think>";
        for (int i = rng() % 10; i > 0; --i) text += pieces[rng() % 13];
        if (rng() % 2) text += "</think>";
        for (int i = rng() % 6; i > 0; --i) text += pieces[rng() % 13];
        SCOPED_TRACE(std::string(name) + " output: " + text);
        const ReasoningSplit whole = parser->split(text);
        ReasoningStream s(*parser);
        std::string reasoning, content;
        for (size_t i = 0; i < text.size();) {
          const size_t n = std::min<size_t>(1 + rng() % 6, text.size() - i);
          ReasoningDelta d = s.feed(std::string_view(text).substr(i, n));
          reasoning += d.reasoning;
          content += d.content;
          i += n;
        }
        ReasoningDelta d = s.finish();
        reasoning += d.reasoning;
        content += d.content;
        EXPECT_EQ(reasoning, whole.reasoning.value_or(""));
        EXPECT_EQ(content, whole.content.value_or(""));
      }
    }
  }
}

TEST(ChatOutput, ToolCallsAfterThinkBlock) {
  ChatOutputOptions o;
  o.mode = ChatOutputOptions::ToolMode::kAuto;
  o.tool_parser = make_tool_parser("hermes", {});
  o.reasoning = ReasoningParser::make("qwen3", true);
  const std::string text =
      "<think>need weather</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>";
  ChatMessageOut m = chat_message(o, text);
  EXPECT_EQ(m.reasoning, std::optional<std::string>("need weather"));
  EXPECT_EQ(m.content, std::optional<std::string>("\n\n"));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].call.name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].call.arguments, R"({"city": "Paris"})");
  EXPECT_EQ(m.tool_calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(m.tool_calls[0].id.size(), 14u + 32u);
  EXPECT_EQ(chat_finish_reason(o, m.tools_called, "stop"), "tool_calls");

  ChatOutputStream s(o);
  std::string reasoning, content, args;
  int names = 0;
  for (char ch : text) {
    ChatDelta d = s.feed(std::string(1, ch));
    reasoning += d.reasoning;
    content += d.content;
    for (auto& c : d.tool_calls) {
      names += c.name.has_value();
      args += c.arguments;
    }
  }
  ChatDelta d = s.finish();
  for (auto& c : d.tool_calls) args += c.arguments;
  EXPECT_EQ(reasoning, "need weather");
  EXPECT_EQ(content, "\n\n");
  EXPECT_EQ(names, 1);
  EXPECT_EQ(args, R"({"city": "Paris"})");
  EXPECT_TRUE(s.tools_called());
}

}  // namespace
}  // namespace vllm::server
