// Structural tags (vLLM's legacy structures + triggers form): free text until a trigger, then
// begin, JSON of the schema, end, then free text again. Each case is a text that this
// definition (xgrammar's) accepts or rejects, plus masks on small vocabularies.
#include <gtest/gtest.h>

#include "structured/compiler.h"
#include "structured/structural_tag.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::structured;

namespace {

std::shared_ptr<const TokenVocab> byte_token_vocab() {
  std::vector<std::optional<std::string>> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back(std::nullopt);
  return std::make_shared<TokenVocab>(std::move(bytes), std::vector<int32_t>{256}, 257);
}

const char* kWeather = R"({
  "structures": [
    {"begin": "<function=get_weather>", "schema": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"],
      "additionalProperties": false}, "end": "</function>"},
    {"begin": "<function=get_time>", "schema": {"type": "object",
      "properties": {"tz": {"type": "integer"}}, "required": ["tz"],
      "additionalProperties": false}, "end": "</function>"}
  ],
  "triggers": ["<function="]
})";

std::shared_ptr<const CompiledGrammar> tag_grammar(const std::string& tag,
                                                   std::shared_ptr<const TokenVocab> v) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kStructuralTag;
  c.text = tag;
  return compile(c, std::move(v));
}

bool accepts(const std::string& tag, const std::string& text) {
  GrammarMatcher m(tag_grammar(tag, byte_token_vocab()));
  return m.accept_bytes(text) && m.is_accepting();
}

// A prefix of some accepted text: the matcher takes every byte.
bool viable(const std::string& tag, const std::string& text) {
  GrammarMatcher m(tag_grammar(tag, byte_token_vocab()));
  return m.accept_bytes(text);
}

}  // namespace

TEST(StructuralTag, FreeTextWithoutTriggers) {
  EXPECT_TRUE(accepts(kWeather, ""));
  EXPECT_TRUE(accepts(kWeather, "Hello, world.\nNo calls here."));
  EXPECT_TRUE(accepts(kWeather, "caf\xC3\xA9 \xF0\x9F\x98\x80"));  // UTF-8 text
  EXPECT_FALSE(viable(kWeather, "bad \xFF"));                      // not UTF-8
  EXPECT_FALSE(viable(kWeather, "\xED\xA0\x80"));                  // a surrogate
  EXPECT_FALSE(accepts(kWeather, "cut \xC3"));                     // ends inside a character
}

TEST(StructuralTag, TriggerPrefixesDoNotCommit) {
  // Proper prefixes of the trigger, alone, at the end, and overlapping a second start.
  EXPECT_TRUE(accepts(kWeather, "a <function b"));
  EXPECT_TRUE(accepts(kWeather, "ends with <functio"));
  EXPECT_TRUE(accepts(kWeather, "<<function <fun <f x"));
  EXPECT_TRUE(accepts(kWeather, "<function-like but not a trigger"));
}

TEST(StructuralTag, TriggerCommitsToAStructure) {
  EXPECT_TRUE(accepts(kWeather, R"(<function=get_weather>{"city": "Paris"}</function>)"));
  EXPECT_TRUE(accepts(kWeather,
                      "Let me check. <function=get_weather>{\"city\":\"Oslo\"}</function> and "
                      "<function=get_time>{\"tz\": -3}</function> done"));
  // The automaton restarts in the middle of a failed prefix: "<<function=".
  EXPECT_TRUE(accepts(kWeather, R"(<<function=get_time>{"tz": 1}</function>)"));
  // Once the trigger is whole, only a structure may follow.
  EXPECT_FALSE(viable(kWeather, "x <function=other"));
  EXPECT_FALSE(viable(kWeather, R"(<function=get_weather>{"city": 3})"));
  EXPECT_FALSE(viable(kWeather, R"(<function=get_time>{"city": "Paris"})"));
  EXPECT_FALSE(viable(kWeather, R"(<function=get_weather>{"city": "A"}</func>)"));
  // Unfinished: not an end of output.
  EXPECT_FALSE(accepts(kWeather, "<function="));
  EXPECT_FALSE(accepts(kWeather, R"(<function=get_weather>{"city": "A"})"));
  EXPECT_TRUE(viable(kWeather, R"(<function=get_weather>{"city": "A"}</fun)"));
}

TEST(StructuralTag, SeveralTriggersAndNoSchema) {
  const std::string tag = R"({"type": "structural_tag", "structures": [
      {"begin": "<tool>", "schema": {"type": "array", "items": {"type": "integer"}},
       "end": "</tool>"},
      {"begin": "ab[", "end": "]"}],
    "triggers": ["<tool>", "ab"]})";
  EXPECT_TRUE(accepts(tag, "<tool>[1, 2]</tool>"));
  EXPECT_TRUE(accepts(tag, "xab[{\"any\": [true, null]}]y"));  // no schema: any JSON
  EXPECT_TRUE(accepts(tag, "a b <too"));
  EXPECT_FALSE(viable(tag, "abc"));   // "ab" is a trigger: '[' must follow
  EXPECT_FALSE(viable(tag, "<tool>x"));
}

// xgrammar's newer form, where it says what the legacy form says.
TEST(StructuralTag, TriggeredTagsFormat) {
  const std::string tag = R"({"type": "structural_tag", "format": {"type": "triggered_tags",
      "triggers": ["<function="], "tags": [{"type": "tag", "begin": "<function=get_time>",
        "content": {"type": "json_schema", "json_schema": {"type": "object",
          "properties": {"tz": {"type": "integer"}}, "required": ["tz"],
          "additionalProperties": false}}, "end": "</function>"}],
      "at_least_one": false, "stop_after_first": false}})";
  EXPECT_TRUE(accepts(tag, "x <functio y"));
  EXPECT_TRUE(accepts(tag, R"(a <function=get_time>{"tz": 2}</function> b)"));
  EXPECT_FALSE(viable(tag, R"(<function=get_weather>)"));
  EXPECT_FALSE(viable(tag, R"(<function=get_time>{"tz": "x")"));
}

TEST(StructuralTag, ErrorsNameWhatIsUnsupported) {
  auto message = [](const std::string& tag) -> std::string {
    try {
      tag_grammar(tag, byte_token_vocab());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(R"({"type": "structural_tag", "format": {"type": "sequence"}})")
                .find("format type 'sequence' is not supported"), std::string::npos);
  EXPECT_NE(message(R"({"format": {"type": "triggered_tags", "triggers": ["<a"], "tags": [
                {"begin": "<a>", "content": {"type": "regex", "pattern": "x"}, "end": "</a>"}]}})")
                .find("type 'regex' is not supported"), std::string::npos);
  EXPECT_NE(message(R"({"format": {"type": "triggered_tags", "triggers": ["<a"], "tags": [],
                "stop_after_first": true}})")
                .find("stop_after_first true is not supported"), std::string::npos);
  EXPECT_NE(message(R"({"structures": [{"begin": "<a>", "end": "</a>"}], "triggers": ["<b"]})")
                .find("does not start with any trigger"), std::string::npos);
  EXPECT_NE(message(R"({"structures": [{"begin": "<a>", "end": "</a>"}], "triggers": []})")
                .find("'triggers' is empty"), std::string::npos);
  EXPECT_NE(message(R"({"structures": [{"begin": "<a>", "end": "</a>"}], "triggers": [""]})")
                .find("empty string"), std::string::npos);
  EXPECT_NE(message(R"({"structures": [{"begin": "<a>", "schema": {"not": {}}, "end": "</a>"}],
                        "triggers": ["<a"]})")
                .find("'not'"), std::string::npos);
  EXPECT_NE(message(R"({"structures": [], "triggers": ["<a"], "extra": 1})").find("'extra'"),
            std::string::npos);
}

TEST(StructuralTag, Masks) {
  // Multi-byte tokens: a token may carry text across the trigger and into the structure.
  std::vector<std::optional<std::string>> toks = {
      "hi", " <fun", "ction", "=get_time>", "=nope", "{\"tz\":", "5}", "</function>",
      "<function=get_time>{", "x<function=bad", "\xC3", "\xA9", std::nullopt};
  auto vocab = std::make_shared<TokenVocab>(toks, std::vector<int32_t>{12}, 13);
  auto g = tag_grammar(kWeather, vocab);
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(vocab->mask_words());
  auto allowed = [&](int t) { return (mask[t >> 5] >> (t & 31)) & 1; };
  m.fill_mask(mask);
  for (int t : {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12}) EXPECT_TRUE(allowed(t)) << t;
  EXPECT_FALSE(allowed(9));   // commits to a structure that does not exist
  EXPECT_FALSE(allowed(11));  // a continuation byte alone
  ASSERT_TRUE(m.accept_token(1));  // " <fun": a pending prefix, still free text
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(2));
  EXPECT_TRUE(allowed(12));  // may end here
  ASSERT_TRUE(m.accept_token(2));  // "ction": the trigger is one '=' away
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(3));
  EXPECT_FALSE(allowed(4));
  EXPECT_TRUE(allowed(0));  // "hi" after "<function" is still free text
  ASSERT_TRUE(m.accept_token(3));
  m.fill_mask(mask);
  EXPECT_FALSE(allowed(12));  // inside the structure: no EOS
  EXPECT_TRUE(allowed(5));
  EXPECT_FALSE(allowed(0));
  ASSERT_TRUE(m.accept_token(5));
  ASSERT_TRUE(m.accept_token(6));
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(7));
  EXPECT_FALSE(allowed(12));
  ASSERT_TRUE(m.accept_token(7));
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(12));
  EXPECT_TRUE(allowed(10));
  ASSERT_TRUE(m.accept_token(10));
  m.fill_mask(mask);
  EXPECT_TRUE(allowed(11));
  EXPECT_FALSE(allowed(12));  // inside a character
}
