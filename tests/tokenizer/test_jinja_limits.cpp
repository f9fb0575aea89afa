// Render limits: hostile templates (unbounded loops, exponential macros, huge strings, lists
// and outputs) must end quickly with a RenderLimitError naming the limit, under the defaults.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>

#include "tokenizer/chat_template.h"

namespace vllm {
namespace {

using Json = nlohmann::ordered_json;

struct Outcome {
  std::string kind, message, output;
  double seconds = 0;
};

Outcome render_with(const std::string& tmpl, const RenderLimits& limits,
                    const Json& ctx = Json::object()) {
  const ChatTemplate t = ChatTemplate::parse(tmpl);
  Outcome o;
  const auto start = std::chrono::steady_clock::now();
  try {
    o.output = t.render(ctx, limits);
  } catch (const TemplateError& e) {
    o.kind = e.kind();
    o.message = e.what();
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return o;
}

// Fails with the limit named by `limit` ("step", "output size", "time") in well under the
// 2 s a request may take, also in sanitizer builds.
void expect_limit(const std::string& tmpl, const std::string& limit,
                  const RenderLimits& limits = {}, const Json& ctx = Json::object()) {
  SCOPED_TRACE(tmpl);
  const Outcome o = render_with(tmpl, limits, ctx);
  EXPECT_EQ(o.kind, kRenderLimitError) << o.message;
  EXPECT_LT(o.seconds, 3.0);
  if (limit != "time" && o.message.find("exceeded the time limit") != std::string::npos) {
    // A slow machine (a loaded CI host, a sanitizer build) lets the 1 s clock end the render
    // first. The render was bounded; that the limit under test bounds it too is checked with
    // the clock out of the way.
    RenderLimits slow = limits;
    slow.max_time = std::chrono::milliseconds(120'000);
    const Outcome again = render_with(tmpl, slow, ctx);
    EXPECT_NE(again.message.find("exceeded the " + limit + " limit"), std::string::npos)
        << again.message;
    return;
  }
  EXPECT_NE(o.message.find("exceeded the " + limit + " limit"), std::string::npos) << o.message;
}

TEST(JinjaLimits, TenBillionStepLoopHitsTheStepLimit) {
  expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
               "step");
  expect_limit("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}"
               "{% endfor %}", "step");
}

TEST(JinjaLimits, LoopBoundFromTheContextHitsTheStepLimit) {
  expect_limit("{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}", "step",
               {}, Json{{"n", 100000}});
}

TEST(JinjaLimits, ExponentialMacroWithinTheDepthLimitHitsTheStepLimit) {
  expect_limit("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
               "{% endmacro %}{{ f(60) }}", "step");
}

TEST(JinjaLimits, HundredMegabyteOutputHitsTheSizeLimit) {
  expect_limit("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output size");
  // Plain template text repeated by a loop: 100000 x 1000 bytes.
  expect_limit("{% for i in range(100000) %}" + std::string(1000, 'x') + "{% endfor %}",
               "output size");
}

TEST(JinjaLimits, HugeProductsFailBeforeAnythingIsBuilt) {
  expect_limit("{{ 'a' * 10**10 }}", "output size");
  expect_limit("{% set s = 'a' * 10**10 %}", "output size");
  expect_limit("{{ ['a'] * 10**9 }}", "output size");
  expect_limit("{{ ([1] * 100000) * 100000 }}", "output size");
}

// A range longer than the sandbox's 100,000, including ones whose length passes int64 (found by
// fuzz_jinja: the length overflowed): an OverflowError, as jinja2's sandbox raises.
TEST(JinjaLimits, HugeRangesAreOverflowErrors) {
  for (const char* t : {"{% for i in range(9223372036854775807) %}{% endfor %}",
                        "{% for i in range(-9223372036854775807 - 1, 9223372036854775807) %}{% endfor %}",
                        "{{ range(9223372036854775807, -9223372036854775807 - 1, -1)|length }}",
                        "{{ range(100001)|length }}"}) {
    const Outcome o = render_with(t, {});
    EXPECT_EQ(o.kind, "OverflowError") << t;
  }
  EXPECT_EQ(render_with("{{ range(100000)|length }}", {}).output, "100000");
}

// Integers are int64 here (Python's are unbounded): a power past it is an OverflowError, found
// by squaring in a few steps whatever the exponent.
TEST(JinjaLimits, IntegerPowerPastInt64IsAnOverflowError) {
  for (const char* t : {"{{ 2 ** 63 }}", "{{ 3 ** 40 }}", "{{ (-3) ** 9223372036854775807 }}"}) {
    const Outcome o = render_with(t, {});
    EXPECT_EQ(o.kind, "OverflowError") << t;
    EXPECT_LT(o.seconds, 1.0) << t;
  }
}

// Conversions and operations whose result passes int64 (Python's ints are unbounded, ours are
// not): OverflowErrors, not undefined behaviour (fuzz_jinja found `5e118|int`: an out-of-range
// float conversion, UBSan; `INT64_MIN // -1` traps on x86). A float infinity's int is an
// OverflowError in jinja2 too ("cannot convert float infinity to integer", with inf from the
// context; jinja2 folds the constant `'inf'|float` into code that fails with a NameError).
TEST(JinjaLimits, IntegersPastInt64AreOverflowErrors) {
  for (const char* t : {"{{ 5e118|int }}", "{{ '5e118'|int }}", "{{ 9.3e18|int }}",
                        "{{ -9.3e18|int }}", "{{ '99999999999999999999'|int }}",
                        "{{ '-99999999999999999999'|int }}", "{{ 'inf'|float|int }}",
                        "{{ (-9223372036854775807 - 1) // -1 }}",
                        "{{ -(-9223372036854775807 - 1) }}",
                        "{{ (-9223372036854775807 - 1)|abs }}"}) {
    const Outcome o = render_with(t, {});
    EXPECT_EQ(o.kind, "OverflowError") << t;
  }
}

TEST(JinjaLimits, HugeRangeIsRefusedAsTheSandboxRefusesIt) {
  const Outcome o = render_with("{% for i in range(10**10) %}{% endfor %}", {});
  EXPECT_EQ(o.kind, "OverflowError");
  EXPECT_LT(o.seconds, 1.0);
  expect_limit("{{ range(100000)|list * 100000 }}", "output size");
}

TEST(JinjaLimits, JoinsAndFiltersThatBuildBigStringsHitTheSizeLimit) {
  expect_limit("{{ range(100000)|join('x' * 1000) }}", "output size");
  expect_limit("{{ ('x' * 1000).join(range(100000)|map('string')) }}", "output size");
  expect_limit("{{ 'x'|center(10**10) }}", "output size");
  expect_limit("{{ 'a\nb'|indent(10**10) }}", "output size");
  expect_limit("{{ [1, 2]|tojson(indent=10**10) }}", "output size");
  expect_limit("{{ ('a' * 100000)|replace('a', 'b' * 1000) }}", "output size");
  expect_limit("{{ ('a' * 100000).replace('', 'b' * 1000) }}", "output size");
  expect_limit("{{ '{:>10000000000}'.format(1) }}", "output size");
  expect_limit("{{ '%2000000000s' % 'x' }}", "output size");
  expect_limit("{{ [1]|batch(10**10, 'x') }}", "output size");
  expect_limit("{% filter upper %}{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
               "{% endfilter %}", "output size");
}

TEST(JinjaLimits, ConcatenationInLoopsIsBounded) {
  expect_limit("{% set ns = namespace(s='') %}{% for i in range(100000) %}"
               "{% set ns.s = ns.s ~ ('x' * 1000) %}{% endfor %}{{ ns.s|length }}", "step");
  expect_limit("{% set ns = namespace(s='') %}{% for i in range(100000) %}"
               "{% set ns.s = ns.s + ('x' * 1000) %}{% endfor %}{{ ns.s|length }}", "step");
  expect_limit("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
               "{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l|length }}", "step");
  expect_limit("{% set s = 'x' * 1000000 %}{% set ns = namespace(l=[]) %}"
               "{% for i in range(100000) %}{% set ns.l = ns.l + [s] %}{% endfor %}", "step");
  // Many copies of one big string in a literal, then printed.
  expect_limit("{% set s = 'x' * 4000000 %}{% set l = [s, s, s, s, s, s] %}{{ l }}",
               "output size");
}

TEST(JinjaLimits, TheTimeLimitEndsARenderTheStepLimitAllows) {
  RenderLimits limits;
  limits.max_steps = UINT64_MAX / 2;
  limits.max_time = std::chrono::milliseconds(50);
  const Outcome o = render_with(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", limits);
  EXPECT_EQ(o.kind, kRenderLimitError);
  EXPECT_EQ(o.message, "chat template rendering exceeded the time limit (50 ms)");
  EXPECT_LT(o.seconds, 1.0);
}

TEST(JinjaLimits, ACancelledRenderStopsAtTheNextPoll) {
  std::atomic<int> polls{0};
  RenderLimits limits;
  limits.cancelled = [&] { return ++polls > 3; };
  const Outcome o = render_with(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", limits);
  EXPECT_EQ(o.kind, kRenderLimitError);
  EXPECT_EQ(o.message, "chat template rendering was cancelled");
  EXPECT_EQ(polls.load(), 4);
}

TEST(JinjaLimits, ExactLimitsAreReportedAndPerRender) {
  RenderLimits limits;
  limits.max_steps = 1000;
  const std::string loop = "{% for i in range(n) %}{{ i }}{% endfor %}";
  Outcome o = render_with(loop, limits, Json{{"n", 2000}});
  EXPECT_EQ(o.message, "chat template rendering exceeded the step limit (1000 steps)");
  RenderLimits small;
  small.max_output_bytes = 100;
  o = render_with("{{ 'x' * 101 }}", small);
  EXPECT_EQ(o.message, "chat template rendering exceeded the output size limit (100 bytes)");
  o = render_with("{{ 'x' * 100 }}", small);
  EXPECT_EQ(o.kind, "");
  EXPECT_EQ(o.output, std::string(100, 'x'));
  o = render_with("{% for i in range(101) %}x{% endfor %}", small);
  EXPECT_EQ(o.kind, kRenderLimitError);  // the range list itself is past 100 bytes
  // A small render right after a failed one starts with a fresh budget.
  o = render_with(loop, limits, Json{{"n", 10}});
  EXPECT_EQ(o.output, "0123456789");
  RenderStats stats;
  const auto now = [] { return std::tm{}; };
  EXPECT_EQ(ChatTemplate::parse(loop).render(Json{{"n", 10}}, now, limits, &stats),
            "0123456789");
  EXPECT_GT(stats.steps, 10u);
  EXPECT_LT(stats.steps, 400u);
  EXPECT_EQ(stats.output_bytes, 10u);
}

TEST(JinjaLimits, LimitErrorsAreNotSwallowedByLazyFiltersOrFolding) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  // map() defers its errors until consumed in jinja2; a limit must still end the render.
  expect_limit("{% set x = ['a' * 600]|map('center', 2000) %}done", "output size", limits);
  // A constant {{ }} is first tried at parse time in jinja2; the limit holds there too.
  expect_limit("{{ ('a' * 600)|center(2000) }}", "output size", limits);
}

}  // namespace
}  // namespace vllm
