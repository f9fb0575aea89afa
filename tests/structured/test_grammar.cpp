// Front ends and matcher on byte strings: each case is a text the construct's own definition
// (Python re, JSON Schema, GBNF) accepts or rejects.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "structured/compiler.h"
#include "util/check.h"

using namespace vllm;
using namespace vllm::structured;

namespace {

std::shared_ptr<const TokenVocab> byte_vocab() {
  // One token per byte, plus an EOS id 256.
  std::vector<std::optional<std::string>> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  bytes.push_back(std::nullopt);
  return std::make_shared<TokenVocab>(std::move(bytes), std::vector<int32_t>{256}, 257);
}

bool full_match(OutputConstraint::Kind kind, const std::string& text, const std::string& input) {
  OutputConstraint c;
  c.kind = kind;
  c.text = text;
  GrammarMatcher m(compile(c, byte_vocab()));
  return m.accept_bytes(input) && m.is_accepting();
}

bool regex(const std::string& re, const std::string& s) {
  return full_match(OutputConstraint::Kind::kRegex, re, s);
}
bool schema(const std::string& js, const std::string& s) {
  return full_match(OutputConstraint::Kind::kJsonSchema, js, s);
}
bool gbnf(const std::string& g, const std::string& s) {
  return full_match(OutputConstraint::Kind::kGrammar, g, s);
}

}  // namespace

TEST(Regex, Basics) {
  EXPECT_TRUE(regex("abc", "abc"));
  EXPECT_FALSE(regex("abc", "ab"));
  EXPECT_FALSE(regex("abc", "abcd"));
  EXPECT_TRUE(regex("a|bc", "bc"));
  EXPECT_TRUE(regex("(ab)+", "ababab"));
  EXPECT_FALSE(regex("(ab)+", ""));
  EXPECT_TRUE(regex("x*", ""));
  EXPECT_TRUE(regex("\\d{3}-\\d{4}", "555-1234"));
  EXPECT_FALSE(regex("\\d{3}-\\d{4}", "55-1234"));
  EXPECT_TRUE(regex("[a-c]{2,3}", "abc"));
  EXPECT_FALSE(regex("[a-c]{2,3}", "abca"));
  EXPECT_TRUE(regex("[^a]", "\xC3\xA9"));  // é, one code point
  EXPECT_FALSE(regex("[^a]", "\xC3"));
  EXPECT_TRUE(regex(".", "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(regex(".", "\n"));
  EXPECT_TRUE(regex("^(?:yes|no)$", "no"));
  EXPECT_TRUE(regex("a{2,}", "aaaa"));
  EXPECT_TRUE(regex("\\w+@\\w+\\.com", "me@example.com"));
  EXPECT_TRUE(regex("[\\-+]?\\d+(\\.\\d+)?", "-3.25"));
}

TEST(Regex, UnsupportedIsAnErrorNamingIt) {
  OutputConstraint c{OutputConstraint::Kind::kRegex, "(?=a)b", {}, {}};
  try {
    compile(c, byte_vocab());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(?"), std::string::npos) << e.what();
  }
  c.text = "a\\bb";
  EXPECT_THROW(compile(c, byte_vocab()), Error);
  c.text = "(a";
  EXPECT_THROW(compile(c, byte_vocab()), Error);
  c.text = "a{100000}";
  EXPECT_THROW(compile(c, byte_vocab()), Error);
}

// A quantifier right after another is "multiple repeat" (Python's re; ECMAScript refuses it
// too), not a repetition of a repetition: found by fuzz_request_json, `[a-z]{0,}??{3033}...`
// made the matcher's parses explode, and the server then ended the completion with an empty
// text that did not match. One quantifier with its lazy '?' still parses.
TEST(Regex, StackedQuantifiersAreAnError) {
  EXPECT_TRUE(regex("a??b", "b"));
  EXPECT_TRUE(regex("a*?b", "aab"));
  EXPECT_TRUE(regex("a{2,}?b", "aab"));
  for (const char* p : {"a**", "a*{3}", "a???", "a{2}{3}", "(x*)?{3033}b",
                        "[a-z]{0,}??{3033}?x"}) {
    OutputConstraint c{OutputConstraint::Kind::kRegex, p, {}, {}};
    try {
      compile(c, byte_vocab());
      ADD_FAILURE() << p << " compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("multiple repeat"), std::string::npos) << e.what();
    }
  }
}

// A valid pattern whose parses pass the matcher's limit from the start is refused when it
// compiles (the first mask is computed there), with the limit in the message: found by
// fuzz_request_json, `(x*){3033}b` ended a completion as "stop" with empty text that did not
// match. A control with fewer repeats compiles and matches.
TEST(Regex, GrammarPastTheParseLimitFailsToCompile) {
  EXPECT_TRUE(regex("(x*){30}b", "xxb"));
  OutputConstraint c{OutputConstraint::Kind::kRegex, "(x*){3033}b", {}, {}};
  try {
    compile(c, byte_vocab());
    ADD_FAILURE() << "compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

namespace {

// `nested(d)`, groups nested d deep, fails to compile at d = 33 and 100,000 with the nesting
// limit's message (the parsers recurse per group; without the limit the stack overflows).
void expect_too_deep(OutputConstraint::Kind kind,
                     const std::function<std::string(int)>& nested) {
  for (int depth : {33, 100000}) {
    OutputConstraint c{kind, nested(depth), {}, {}};
    try {
      compile(c, byte_vocab());
      ADD_FAILURE() << depth << " levels compiled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("nested deeper than 32"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace

// Group nesting is bounded (the parser recurses per group): found by fuzz_request_json, a 3 KB
// pattern of nested groups overflowed the stack of an ASan build; in a server, a request of
// enough '(' could take the process down. 32 levels parse, 33 are a clear error, and so are
// 100,000.
TEST(Regex, DeeplyNestedGroupsAreAnError) {
  const auto nested = [](int depth) {
    return std::string(size_t(depth), '(') + "a" + std::string(size_t(depth), ')');
  };
  EXPECT_TRUE(regex(nested(32), "a"));
  expect_too_deep(OutputConstraint::Kind::kRegex, nested);
}

TEST(JsonSchema, Objects) {
  const std::string s = R"({"type":"object","properties":{"name":{"type":"string"},
    "age":{"type":"integer"}},"required":["name"],"additionalProperties":false})";
  EXPECT_TRUE(schema(s, R"({"name":"Bo","age":31})"));
  EXPECT_TRUE(schema(s, R"({ "name" : "Bo" })"));
  EXPECT_TRUE(schema(s, "{\n  \"name\": \"B\\\"o\",\n  \"age\": -4\n}"));
  EXPECT_FALSE(schema(s, R"({"age":31})"));
  EXPECT_FALSE(schema(s, R"({"name":"Bo","x":1})"));
  EXPECT_FALSE(schema(s, R"( {"name":"Bo"})"));
  EXPECT_FALSE(schema(s, R"({"name":"Bo","age":1.5})"));
  EXPECT_FALSE(schema(s, R"({"name":"Bo","age":01})"));
}

TEST(JsonSchema, ValuesAndRefs) {
  EXPECT_TRUE(schema(R"({"enum":["a",1,null]})", "null"));
  EXPECT_FALSE(schema(R"({"enum":["a",1,null]})", "\"b\""));
  EXPECT_TRUE(schema(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2})",
                     "[true, false]"));
  EXPECT_FALSE(schema(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2})",
                      "[]"));
  EXPECT_FALSE(schema(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2})",
                      "[true,true,true]"));
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{
    "v":{"type":"number"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
    "required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"})";
  EXPECT_TRUE(schema(tree, R"({"v":1e3,"kids":[{"v":-0.5,"kids":[]}]})"));
  EXPECT_FALSE(schema(tree, R"({"v":1,"kids":[{"v":2}]})"));
  EXPECT_TRUE(schema(R"({"type":"string","format":"date"})", "\"2024-02-29\""));
  EXPECT_FALSE(schema(R"({"type":"string","format":"date"})", "\"2024-13-01\""));
  EXPECT_TRUE(schema(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})", "\"ab\""));
  EXPECT_FALSE(schema(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})", "\"abc\""));
}

TEST(JsonSchema, IntegerBounds) {
  const std::string s = R"({"type":"integer","minimum":-15,"maximum":230})";
  for (int v = -30; v <= 300; ++v)
    EXPECT_EQ(schema(s, std::to_string(v)), v >= -15 && v <= 230) << v;
  EXPECT_FALSE(schema(s, "007"));
  const std::string open = R"({"type":"integer","exclusiveMinimum":99})";
  EXPECT_FALSE(schema(open, "99"));
  EXPECT_TRUE(schema(open, "100"));
  EXPECT_TRUE(schema(open, "123456789"));
}

TEST(JsonSchema, UnsupportedKeywordIsNamed) {
  OutputConstraint c{OutputConstraint::Kind::kJsonSchema, R"({"type":"object","not":{}})", {}, {}};
  try {
    compile(c, byte_vocab());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'not'"), std::string::npos) << e.what();
  }
  c.text = "{bad json";
  EXPECT_THROW(compile(c, byte_vocab()), Error);
}

TEST(Gbnf, Grammar) {
  const std::string g = R"g(# arithmetic
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= [0-9]+ | "(" expr ")"
)g";
  EXPECT_TRUE(gbnf(g, "1+(2-30)"));
  EXPECT_FALSE(gbnf(g, "1+"));
  EXPECT_THROW(gbnf("root ::= root \"a\" | \"a\"", "a"), Error);  // left recursion
  EXPECT_THROW(gbnf("root ::= undefined-rule", "a"), Error);
}

// A grammar of thousands of '(' overflowed the parser's stack (fuzz_request_json, twelfth
// session); groups now nest at most 32 deep, as in the regex parser.
TEST(Gbnf, DeeplyNestedGroupsAreAnError) {
  const auto nested = [](int depth) {
    return "root ::= " + std::string(size_t(depth), '(') + "\"a\"" +
           std::string(size_t(depth), ')');
  };
  EXPECT_TRUE(gbnf(nested(32), "a"));
  expect_too_deep(OutputConstraint::Kind::kGrammar, nested);
}

TEST(Matcher, TokensEosAndRollback) {
  OutputConstraint c;
  c.kind = OutputConstraint::Kind::kChoice;
  c.choices = {"yes", "no"};
  auto g = compile(c, byte_vocab());
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(g->vocab->mask_words());
  m.fill_mask(mask);
  auto allowed = [&](int t) { return (mask[t >> 5] >> (t & 31)) & 1; };
  EXPECT_TRUE(allowed('y'));
  EXPECT_TRUE(allowed('n'));
  EXPECT_FALSE(allowed('x'));
  EXPECT_FALSE(allowed(256));
  EXPECT_TRUE(m.accept_token('n'));
  EXPECT_FALSE(m.accept_token('x'));
  EXPECT_TRUE(m.accept_token('o'));
  m.fill_mask(mask);
  for (int t = 0; t < 256; ++t) EXPECT_FALSE(allowed(t));
  EXPECT_TRUE(allowed(256));
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(3);
  EXPECT_EQ(m.num_tokens(), 0);
  EXPECT_TRUE(m.accept_token('y'));
}

// An exponentially ambiguous grammar hits the matcher's parse limit as an Error (the runner
// then ends that completion), never unbounded work.
TEST(Matcher, AmbiguityIsBounded) {
  OutputConstraint c{OutputConstraint::Kind::kGrammar,
                     "root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"", {}, {}};
  GrammarMatcher m(compile(c, byte_vocab()));
  EXPECT_THROW(m.accept_bytes(std::string(40, 'a')), Error);
}
