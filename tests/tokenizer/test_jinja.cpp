// Individual Jinja constructs against outputs and errors recorded from Python jinja2 3.1.6 in
// HF's configuration, plus the parse-time "unsupported construct" contract.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/chat_template.h"

namespace vllm {
namespace {

struct Case {
  const char* tmpl;
  const char* context;      // JSON object, "" for {}
  const char* expected;     // when error_kind is ""
  const char* error_kind;   // jinja2 exception class name
  const char* error;        // its message
};

std::tm fixed_now() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 12;
  timegm(&t);
  return t;
}

std::string render(const std::string& tmpl, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return ChatTemplate::parse(tmpl).render(ctx, fixed_now);
}

template <size_t N>
void run_cases(const Case (&cases)[N]) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tmpl);
    const auto ctx = *c.context ? nlohmann::ordered_json::parse(c.context) : nlohmann::ordered_json::object();
    std::string out, kind, message;
    try {
      out = render(c.tmpl, ctx);
    } catch (const TemplateError& e) {
      kind = e.kind();
      message = e.what();
    }
    EXPECT_EQ(kind, c.error_kind);
    EXPECT_EQ(message, c.error);
    if (!*c.error_kind) {
      EXPECT_EQ(out, c.expected);
    }
  }
}

// Generated from Python jinja2 (trim_blocks, lstrip_blocks, HF tojson, raise_exception).
const Case kOutput[] = {
    {R"J({{ 'a' ~ 1 ~ none ~ true ~ 2.5 }})J", "", "a1NoneTrue2.5", "", ""},
    {R"J({{ [1, 'a', none, true, 1.5, {'k': "it's"}] }})J", "", "[1, 'a', None, True, 1.5, {'k': \"it's\"}]", "", ""},
    {R"J({{ (1,) }}{{ (1, 2) }}{{ () }}{{ {} }}{{ [] }})J", "", "(1,)(1, 2)(){}[]", "", ""},
    {R"J({{ none }}|{{ None }}|{{ True }}|{{ false }}|{{ undefined_name }}|)J", "", "None|None|True|False||", "", ""},
    {R"J({{ ['it\'s', 'say "hi"', 'both \' "', 'nl\n\ttab', 'back\\slash', '\x01\x7f', 'é\u200b\u00a0中'] }})J", "", "[\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n\\ttab', 'back\\\\slash', '\\x01\\x7f', 'é\\u200b\\xa0中']", "", ""},
    {R"J({{ d }})J", R"J({"d": {"b": [1, 2.0, null, false], "a": {"x": "y"}, "é": "ü"}})J", "{'b': [1, 2.0, None, False], 'a': {'x': 'y'}, 'é': 'ü'}", "", ""},
    {R"J({{ ns }})J", "", "", "", ""},
    {R"J({% set ns = namespace(a=1, b='x') %}{{ ns }})J", "", "<Namespace {'a': 1, 'b': 'x'}>", "", ""},
    {R"J({{ "a\tb\n\x41\u00e9\\ \q" }}|{{ 'it\'s' }}|{{ 'a' 'b' "c" }})J", "", "a\tb\nAé\\ \\q|it's|abc", "", ""},
    {R"J({{ 1, 'a' }})J", "", "(1, 'a')", "", ""},
    {R"J({{ 'a%sb' % x }}|{{ '' % [1] }}|{{ 'x'|safe|list }}|{{ self.DEFAULT_SYSTEM_MESSAGE }}|)J", "", "ab||['x']||", "", ""},
};
TEST(JinjaConstructs, Output) { run_cases(kOutput); }

const Case kNumbers[] = {
    {R"J({{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 2**-1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 3 * 1.5 }} {{ 10 - 2.5 }})J", "", "0.5 2.0 3 -4 2 -2 1024 0.5 3.0 0.5 4.5 7.5", "", ""},
    {R"J({{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 0.1 + 0.2 }} {{ -0.0 }} {{ 1.5e-7 }} {{ 123456789.125 }} {{ 1_000 }} {{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 2.5e3 }})J", "", "1e+20 1e+16 1000000000000000.0 0.0001 1e-05 0.30000000000000004 -0.0 1.5e-07 123456789.125 1000 31 5 15 2500.0", "", ""},
    {R"J({{ -x }} {{ +x }} {{ - 2 ** 2 }} {{ (-2) ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 3 - 2 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }})J", R"J({"x": 5})J", "-5 5 4 4 64 5 14 20", "", ""},
    {R"J({{ true + 1 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' * 3 }} {{ [1] * 2 }} {{ 3 * 'ab' }})J", "", "2 True True aaa [1, 1] ababab", "", ""},
    {R"J({{ big }} {{ big + 1 }} {{ f }} {{ f * 2 }})J", R"J({"big": 9007199254740993, "f": 0.1})J", "9007199254740993 9007199254740994 0.1 0.2", "", ""},
};
TEST(JinjaConstructs, Numbers) { run_cases(kNumbers); }

const Case kWhitespace[] = {
    {R"J(a
  {% if true %}
    x
  {% endif %}
b)J", "", "a\n    x\nb", "", ""},
    {R"J(a  {%- if true -%}  x  {%- endif -%}  b)J", "", "axb", "", ""},
    {R"J(a 
 {{- 'x' -}} 
 b)J", "", "axb", "", ""},
    {R"J(a
  {%+ if true %}x{% endif %}
  {{ 'y' }}
)J", "", "a\n  x  y", "", ""},
    {R"J({% if true +%}
x{% endif %}|{% if true %}

y{% endif %})J", "", "\nx|\ny", "", ""},
    {R"J(a {# c #} b
  {# c2 #}
c
  {#- c3 -#}  
d{#+ c4 +#}
e)J", "", "a  b\ncd\ne", "", ""},
    {R"J(line1
{{ 'v' }}
line2
)J", "", "line1\nv\nline2", "", ""},
    {R"J(line1

)J", "", "line1\n", "", ""},
    {"a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\rd\r\n", "", "a\nb\nc\nd", "", ""},
    {R"J({% raw %}{{ x }} {% if %}{% endraw %}|
  {%- raw -%}  a  {%- endraw -%}  |)J", "", "{{ x }} {% if %}|a|", "", ""},
    {R"J(  {% for i in [1, 2] %}
    {{ i }}
  {% endfor %}
)J", "", "    1\n    2\n", "", ""},
    {R"J({% for i in [1, 2] -%}
  {{ i }}
{%- endfor %})J", "", "12", "", ""},
    {R"J(x  {% set a = 1 %}  y
	 {% set b = 2 %}
z)J", "", "x    y\nz", "", ""},
    {R"J({{ 'a' }}  {% if true %}b{% endif %}
   {% if true %}c{% endif %})J", "", "a  bc", "", ""},
    {R"J({{ {'a': {'b': 1}} }}{{ {'a': 1}}})J", "", "{'a': {'b': 1}}{'a': 1}", "", ""},
};
TEST(JinjaConstructs, Whitespace) { run_cases(kWhitespace); }

const Case kControl[] = {
    {R"J({% if x == 1 %}one{% elif x == 2 %}two{% elif x == 3 %}three{% else %}other{% endif %})J", R"J({"x": 3})J", "three", "", ""},
    {R"J({% if x %}t{% else %}f{% endif %}{% if not x %}T{% endif %})J", R"J({"x": []})J", "fT", "", ""},
    {R"J({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }},{% endfor %})J", R"J({"xs": ["a", "b", "c"]})J", "1032TrueFalse3,2121FalseFalse3,3210FalseTrue3,", "", ""},
    {R"J({% for x in xs %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('odd', 'even') }}]{% endfor %})J", R"J({"xs": [1, 2, 3]})J", "[|2|odd][1|3|even][2||odd]", "", ""},
    {R"J({% for x in [] %}body{% else %}empty{% endfor %}{% for x in [1] %}body{% else %}empty{% endfor %})J", "", "emptybody", "", ""},
    {R"J({% for x in range(10) if x is odd %}{{ x }}{{ loop.index }}{{ loop.last }} {% endfor %})J", "", "11False 32False 53False 74False 95True ", "", ""},
    {R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %})J", R"J({"d": {"z": 1, "a": 2}})J", "z=1;a=2;za37", "", ""},
    {R"J({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})J", "", "0134", "", ""},
    {R"J({% for row in [[1, 2], [3]] %}{% set outer = loop %}{% for c in row %}{{ outer.index }}.{{ loop.index }}={{ c }} {% endfor %}{% endfor %})J", "", "1.1=1 1.2=2 2.1=3 ", "", ""},
    {R"J({% for c in 'héllo' %}{{ c }}-{% endfor %}{% for x in undefined_thing %}never{% endfor %})J", "", "h-é-l-l-o-", "", ""},
    {R"J({% for x in [1, 2] %}{{ x }}{% for x in [3] %}{{ x }}{% endfor %}{{ x }}{% endfor %})J", "", "131232", "", ""},
};
TEST(JinjaConstructs, Control) { run_cases(kControl); }

const Case kScoping[] = {
    {R"J({% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }})J", "", "01010", "", ""},
    {R"J({% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}[{{ y }}])J", "", "[][]", "", ""},
    {R"J({% set ns = namespace(total=0, items=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }}{{ ns.items }})J", "", "6[1, 2, 3]", "", ""},
    {R"J({% if true %}{% set a = 'set in if' %}{% endif %}{{ a }})J", "", "set in if", "", ""},
    {R"J({% set messages = messages[1:] %}{{ messages|length }})J", R"J({"messages": [1, 2, 3]})J", "2", "", ""},
    {R"J({% set a, b = 1, 2 %}{{ b }}{{ a }}{% set c = (3, 4) %}{{ c }})J", "", "21(3, 4)", "", ""},
    {R"J({% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }})J", "", "[a2b]ABC", "", ""},
    {R"J({% with a = 1, b = 2 %}{{ a + b }}{% set c = 3 %}{% endwith %}[{{ a }}{{ c }}])J", "", "3[]", "", ""},
    {R"J({% filter upper %}abc{{ 'd' }}{% endfilter %}{% filter replace('a', 'b') | upper %}aaa{% endfilter %})J", "", "ABCDBBB", "", ""},
    {R"J({% generation %}gen{% endgeneration %})J", "", "gen", "", ""},
};
TEST(JinjaConstructs, Scoping) { run_cases(kScoping); }

const Case kMacros[] = {
    {R"J({% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }})J", "", "Hello, Ann! Hi, Bob! Yo, Cy!", "", ""},
    {R"J({% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})J", "", "120", "", ""},
    {R"J({% macro m(a, b=a ~ 'x') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m() }}|)J", "", "11x|12|x|", "", ""},
    {R"J({% macro m() %}[{{ g }}]{% endmacro %}{{ m() }}{% set g = 3 %}{{ m() }})J", "", "[][3]", "", ""},
    {R"J({% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) + 'a' }}{{ m is defined }}{{ undefined_macro is defined }})J", "", "1aTrueFalse", "", ""},
    {R"J({% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }})J", "", "", "TypeError", "macro 'm' takes not more than 1 argument(s)"},
    {R"J({% macro m(a) %}{{ a }}{% endmacro %}{{ m(q=2) }})J", "", "", "TypeError", "macro 'm' takes no keyword argument 'q'"},
};
TEST(JinjaConstructs, Macros) { run_cases(kMacros); }

const Case kExpressions[] = {
    {R"J({{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 <= 1 >= 0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }})J", "", "True False True True True True", "", ""},
    {R"J({{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ not 1 in [1] }} {{ 'x' in undefined_thing }})J", R"J({"d": {"k": 1}})J", "True True True True False False", "", ""},
    {R"J({{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or 0 }} {{ '' and 1 }} {{ [] or {} }} {{ not none }})J", "", "x b 0  {} True", "", ""},
    {R"J({{ 'y' if 1 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }})J", "", "y||b", "", ""},
    {R"J({{ 'abcdef'[::-1] }} {{ 'abcdef'[1:-1] }} {{ [1, 2, 3, 4][::2] }} {{ 'héllo'[1:3] }} {{ 'abc'[-1] }} {{ [1, 2, 3][-2:] }} {{ [1, 2, 3][:-1] }} {{ 'abcdef'[5:1:-2] }} {{ [1, 2][5:] }} {{ 'abc'[10] }}|)J", "", "fedcba bcde [1, 3] él c [2, 3] [1, 2] fd [] |", "", ""},
    {R"J({{ d.a }} {{ d['a'] }} {{ d.b.c }} {{ d['b']['c'] }} {{ d.missing }}| {{ l[0] }} {{ l.0 }} {{ l[-1] }} {{ l[9] }}|)J", R"J({"d": {"a": 1, "b": {"c": 2}}, "l": [10, 20]})J", "1 1 2 2 | 10 10 20 |", "", ""},
    {R"J({{ d.items() }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('x') }} {{ d.get('x', 5) }} {{ d['items'] is defined }})J", R"J({"d": {"a": 1, "b": 2}})J", "dict_items([('a', 1), ('b', 2)]) ['a', 'b'] [1, 2] 1 None 5 True", "", ""},
    {R"J({{ [1, 2] + [3] }} {{ 'a' + 'b' }} {{ (1,) + (2,) }} {{ {'a': 1, 'b': [1, 2]} }} {{ [x, x ~ 'y'] }})J", R"J({"x": "q"})J", "[1, 2, 3] ab (1, 2) {'a': 1, 'b': [1, 2]} ['q', 'qy']", "", ""},
    {R"J({{ x.y is defined }} {{ x is defined and x.y }} {{ (x or {}).y|default('d') }})J", R"J({"x": null})J", "False  d", "", ""},
    {R"J({{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b=2) }} {{ namespace(x=1).x }})J", "", "[0, 1, 2] [1, 4, 7] [5, 3, 1] {'a': 1, 'b': 2} 1", "", ""},
    {R"J({{ m == {'b': 2, 'a': 1} }} {{ [1, (2, 3)] == [1, [2, 3]] }} {{ none == none }} {{ x == y }})J", R"J({"m": {"a": 1, "b": 2}})J", "True False True True", "", ""},
};
TEST(JinjaConstructs, Expressions) { run_cases(kExpressions); }

const Case kStringMethods[] = {
    {R"J({{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|{{ '\u3000a\xa0'.strip() }}|)J", "", "a b|a|a | a|a|", "", ""},
    {R"J({{ ' a  b\tc\n'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a\nb\r\nc'.splitlines() }})J", "", "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b c'] ['a b', 'c'] [] [''] ['a', 'b', 'c']", "", ""},
    {R"J({{ 'hello'.startswith('he') }} {{ 'hello'.startswith(('x', 'hel')) }} {{ 'hello'.endswith('lo') }} {{ 'hello'.endswith('x') }} {{ 'hello'.startswith('l', 2) }})J", "", "True True True False True", "", ""},
    {R"J({{ 'Hello World'.upper() }} {{ 'Hello World'.lower() }} {{ 'hello wORLD'.title() }} {{ 'hELLO'.capitalize() }} {{ 'a-b'.replace('-', '+') }} {{ 'aaa'.replace('a', 'b', 2) }})J", "", "HELLO WORLD hello world Hello World Hello a+b bba", "", ""},
    {R"J({{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ 'banana'.count('an') }} {{ ', '.join(['a', 'b']) }} {{ 'a{}b{x}'.format(1, x=2) }})J", "", "2 3 -1 2 2 a, b a1b2", "", ""},
    {R"J({{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'a1'.isalnum() }} {{ 'x'.removeprefix('x') }}|)J", "", "True True True True True True |", "", ""},
    {R"J({{ content.split('</think>')[-1].lstrip('\n') }}|{{ content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }})J", R"J({"content": "<think>\nreason\n</think>\n\nanswer"})J", "answer|reason", "", ""},
    {R"J({{ '%s is %d years, %.2f%%'|format('Ann', 30, 1.5) }} {{ '%s-%s' % ('a', 'b') }} {{ '%(x)s' % {'x': 1} }})J", "", "Ann is 30 years, 1.50% a-b 1", "", ""},
};
TEST(JinjaConstructs, StringMethods) { run_cases(kStringMethods); }

const Case kTests[] = {
    {R"J({{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is sequence }}{{ s is sequence }}{{ d is sequence }}{{ i is sequence }})J", R"J({"x": 1, "n": null, "s": "a", "d": {}, "l": [], "i": 3})J", "TrueFalseTrueTrueTrueTrueTrueTrueTrueFalse", "", ""},
    {R"J({{ l is iterable }}{{ s is iterable }}{{ i is iterable }}{{ y is iterable }}{{ i is number }}{{ f is number }}{{ b is number }}{{ i is integer }}{{ b is integer }}{{ f is float }}{{ i is float }})J", R"J({"l": [], "s": "a", "i": 3, "f": 1.5, "b": true})J", "TrueTrueFalseTrueTrueTrueTrueTrueFalseTrueFalse", "", ""},
    {R"J({{ b is boolean }}{{ i is boolean }}{{ b is true }}{{ b is false }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }})J", R"J({"b": true, "i": 1})J", "TrueFalseTrueFalseFalseTrueTrueTrueTrueFalse", "", ""},
    {R"J({{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ 1 is ne 2 }}{{ 2 is in [1, 2] }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ x is not none }}{{ none is sameas none }}{{ 'upper' is filter }}{{ 'odd' is test }})J", R"J({"x": 0})J", "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue", "", ""},
};
TEST(JinjaConstructs, Tests) { run_cases(kTests); }

const Case kFilters[] = {
    {R"J([{{ '  a \n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ undefined_thing|trim }}] [{{ 5|trim }}])J", "", "[a] [a] [] [5]", "", ""},
    {R"J({{ d|tojson }} {{ [1, 'é', none, true, 2.5, '"q"\n'] | tojson }} {{ 'x'|tojson }} {{ {}|tojson(indent=2) }} {{ []|tojson(indent=2) }})J", R"J({"d": {"b": 1, "a": [1, {"c": null}]}})J", "{\"b\": 1, \"a\": [1, {\"c\": null}]} [1, \"é\", null, true, 2.5, \"\\\"q\\\"\\n\"] \"x\" {} []", "", ""},
    {R"J({{ d|tojson(indent=2) }}|{{ d|tojson(indent=0) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(ensure_ascii=true) }}|{{ d|tojson(indent='\t') }})J", R"J({"d": {"z": [1, 2], "é": {"k": "😀"}}})J", "{\n  \"z\": [\n    1,\n    2\n  ],\n  \"é\": {\n    \"k\": \"😀\"\n  }\n}|{\n\"z\": [\n1,\n2\n],\n\"é\": {\n\"k\": \"😀\"\n}\n}|{\"z\": [1, 2], \"é\": {\"k\": \"😀\"}}|{\"z\":[1,2],\"é\":{\"k\":\"😀\"}}|{\"z\": [1, 2], \"\\u00e9\": {\"k\": \"\\ud83d\\ude00\"}}|{\n\t\"z\": [\n\t\t1,\n\t\t2\n\t],\n\t\"é\": {\n\t\t\"k\": \"😀\"\n\t}\n}", "", ""},
    {R"J({{ 'abc'|length }} {{ 'héllo'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ undefined_thing|length }})J", "", "3 5 2 1 0", "", ""},
    {R"J({{ ['a', 1, none]|join }} {{ ['a', 'b']|join(', ') }} {{ users|join('/', attribute='name') }})J", R"J({"users": [{"name": "x"}, {"name": "y"}]})J", "a1None a, b x/y", "", ""},
    {R"J({{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ 0|d('z', boolean=true) }} {{ y|d }}|)J", R"J({"y": 0})J", "d  d None z 0|", "", ""},
    {R"J({{ d|items|list }} {{ undefined_thing|items|list }} {% for k, v in d|items %}{{ k }}{{ v }}{% endfor %})J", R"J({"d": {"a": 1, "b": 2}})J", "[('a', 1), ('b', 2)] [] a1b2", "", ""},
    {R"J({{ users|map(attribute='name')|list }} {{ users|map(attribute='age', default=0)|list }} {{ ['a', 'b']|map('upper')|join }} {{ [' a ', 'b ']|map('trim')|list }} {{ users|map(attribute='tags.0')|list }})J", R"J({"users": [{"name": "x", "age": 3, "tags": ["t1"]}, {"name": "y", "tags": ["t2"]}]})J", "['x', 'y'] [3, 0] AB ['a', 'b'] ['t1', 't2']", "", ""},
    {R"J({{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ [1, 5, 3]|select('gt', 2)|list }})J", "", "[1, 3] [2, 4] [1, 'a'] [5, 3]", "", ""},
    {R"J({{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ ms|selectattr('name', 'defined')|list|length }} {{ ms|selectattr('name', 'undefined')|list|length }} {{ ms|selectattr('content', 'none')|list|length }} {{ ms|selectattr('content')|list|length }})J", R"J({"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": null, "name": "n"}, {"role": "user", "content": "b"}]})J", "['a', 'b'] 1 1 2 1 2", "", ""},
    {R"J({{ 'hELLo wOrld'|upper }} {{ 'HeLLo'|lower }} {{ 'hello wORLD-foo(bar'|title }} {{ 'hELLO wORLD'|capitalize }} {{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }})J", "", "HELLO WORLD hello Hello World-Foo(Bar Hello world a+b+c bba", "", ""},
    {R"J({{ [3, 1, 2]|first }} {{ [3, 1, 2]|last }} {{ 'abc'|first }} {{ []|first }}| {{ 'ab'|list }} {{ {'a': 1}|list }} {{ 12|string ~ 'x' }} {{ [1]|string }})J", "", "3 2 a | ['a', 'b'] ['a'] 12x [1]", "", ""},
    {R"J({{ '42'|int }} {{ ' 7 '|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ true|int }} {{ '3.5'|float }} {{ 3|float }} {{ 'x'|float }} {{ none|int }})J", "", "42 7 3 0 5 3 1 3.5 3.0 0.0 0", "", ""},
    {R"J({{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 5|round }} {{ 2.1|round(method='ceil') }} {{ 2.9|round(0, 'floor') }} {{ 1234.5|round(-2) }})J", "", "3 2.5 2.0 4.0 2.67 5 3.0 2.0 1200.0", "", ""},
    {R"J({{ ['b', 'A', 'a', 'B']|unique|list }} {{ ['b', 'A', 'a']|unique(case_sensitive=true)|list }} {{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }})J", "", "['b', 'A'] ['b', 'A', 'a'] [1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] [3, 2, 1]", "", ""},
    {R"J({{ users|sort(attribute='age')|map(attribute='name')|join }} {{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|dictsort(reverse=true) }})J", R"J({"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "z", "age": 2}], "d": {"b": 1, "A": 3, "c": 2}})J", "yzx [('A', 3), ('b', 1), ('c', 2)] [('b', 1), ('c', 2), ('A', 3)] [('c', 2), ('b', 1), ('A', 3)]", "", ""},
    {R"J([{{ 'a\nb\n\nc'|indent }}] [{{ 'a\nb'|indent(2, true) }}] [{{ 'a\n\nb\n'|indent(2, blank=true) }}] [{{ 'x\ny'|indent('> ') }}])J", "", "[a\n    b\n\n    c] [  a\n  b] [a\n  \n  b\n  ] [x\n> y]", "", ""},
    {R"J({{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 0)|list }} {{ 'one two  three'|wordcount }} {{ [1, 2, 3]|sum }} {{ [1, 5, 3]|max }} {{ [4, 2, 8]|min }} {{ ['b', 'A']|max }} {{ []|max }}|)J", "", "[[1, 2], [3, 4], [5]] [[1, 2], [3, 0]] 3 6 5 2 b |", "", ""},
    {R"J({{ 'abc'|reverse }} {{ [1, 2, 3]|reverse|list }} [{{ 'ab'|center(6) }}] {{ '<a href="x">&</a>'|escape }} {{ '<b>'|safe }} {{ 'a'|safe + '<b>' }} {{ '<b>' + 'a'|safe }} {{ 'a'|safe ~ '<b>' }})J", "", "cba [3, 2, 1] [  ab  ] &lt;a href=&#34;x&#34;&gt;&amp;&lt;/a&gt; <b> a&lt;b&gt; &lt;b&gt;a a<b>", "", ""},
    {R"J({{ [{'a': 1}, {'a': 2}]|sum(attribute='a') }} {{ users|min(attribute='age') }} {{ users|attr('name') }}|)J", R"J({"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}]})J", "3 {'name': 'y', 'age': 1} |", "", ""},
};
TEST(JinjaConstructs, Filters) { run_cases(kFilters); }

const Case kErrors[] = {
    {R"J({{ raise_exception('Roles must alternate: ' ~ n) }})J", R"J({"n": 3})J", "", "TemplateError", "Roles must alternate: 3"},
    {R"J({{ x.y }})J", "", "", "UndefinedError", "'x' is undefined"},
    {R"J({{ d.q.z }})J", R"J({"d": {}})J", "", "UndefinedError", "'dict object' has no attribute 'q'"},
    {R"J({{ l[5].a }})J", R"J({"l": [1]})J", "", "UndefinedError", "list object has no element 5"},
    {R"J({{ 'a' + 1 }})J", "", "", "TypeError", "can only concatenate str (not \"int\") to str"},
    {R"J({{ 1 + 'a' }})J", "", "", "TypeError", "unsupported operand type(s) for +: 'int' and 'str'"},
    {R"J({{ none + 'a' }})J", "", "", "TypeError", "unsupported operand type(s) for +: 'NoneType' and 'str'"},
    {R"J({{ [1] + 'a' }})J", "", "", "TypeError", "can only concatenate list (not \"str\") to list"},
    {R"J({{ 'a' + u }})J", "", "", "UndefinedError", "'u' is undefined"},
    {R"J({{ 1 < 'a' }})J", "", "", "TypeError", "'<' not supported between instances of 'int' and 'str'"},
    {R"J({{ 1 in 'a' }})J", "", "", "TypeError", "'in <string>' requires string as left operand, not int"},
    {R"J({{ 'a' in none }})J", "", "", "TypeError", "argument of type 'NoneType' is not iterable"},
    {R"J({% for x in none %}{% endfor %})J", "", "", "TypeError", "'NoneType' object is not iterable"},
    {R"J({% for x in 3 %}{% endfor %})J", "", "", "TypeError", "'int' object is not iterable"},
    {R"J({% set x = 1 %}{% set x.a = 2 %})J", "", "", "TemplateRuntimeError", "cannot assign attribute on non-namespace object"},
    {R"J({% set l = [1] %}{{ l.append(2) }})J", "", "", "SecurityError", "access to attribute 'append' of 'list' object is unsafe."},
    {R"J({{ 1 / 0 }})J", "", "", "ZeroDivisionError", "division by zero"},
    {R"J({{ 1 // 0 }})J", "", "", "ZeroDivisionError", "integer division or modulo by zero"},
    {R"J({{ undefined_fn() }})J", "", "", "UndefinedError", "'undefined_fn' is undefined"},
    {R"J({{ 'abc'() }})J", "", "", "TypeError", "'str' object is not callable"},
    {R"J({{ u|tojson }})J", "", "", "TypeError", "Object of type Undefined is not JSON serializable"},
    {R"J({{ (1 if false).b }})J", "", "", "UndefinedError", "the inline if-expression on line 1 evaluated to false and no else section was defined."},
    {R"J({{ [1, 2]|first + 'a' }})J", "", "", "TypeError", "unsupported operand type(s) for +: 'int' and 'str'"},
    {R"J({% for a, b in [[1, 2, 3]] %}{% endfor %})J", "", "", "ValueError", "too many values to unpack (expected 2)"},
    {R"J({{ 5|items|list }})J", "", "", "TypeError", "Can only get item pairs from a mapping."},
    {R"J({{ ', '.join([1, 2]) }})J", "", "", "TypeError", "sequence item 0: expected str instance, int found"},
    {R"J({{ 3|length }})J", "", "", "TypeError", "object of type 'int' has no len()"},
    {R"J({{ x.y.z }})J", R"J({"x": {"y": null}})J", "", "", ""},
    {R"J({{ messages[0]['role'] }})J", R"J({"messages": []})J", "", "UndefinedError", "list object has no element 0"},
    {R"J({{ loop.previtem.x }}{% for i in [1] %}{{ loop.previtem.x }}{% endfor %})J", "", "", "UndefinedError", "'loop' is undefined"},
    {R"J({{ x[1:] }})J", R"J({"x": null})J", "", "TypeError", "'NoneType' object is not subscriptable"},
    {R"J({{ d[1:] }})J", R"J({"d": {}})J", "", "TypeError", "unhashable type: 'slice'"},
    {R"J({{ 1 % 0 }}{{ 1.0 / 0 }})J", "", "", "ZeroDivisionError", "integer modulo by zero"},
    {R"J({{ 1.0 / 0 }})J", "", "", "ZeroDivisionError", "float division by zero"},
    {R"J({{ 2 ** none }})J", "", "", "TypeError", "unsupported operand type(s) for ** or pow(): 'int' and 'NoneType'"},
    {R"J({{ x|int }})J", "", "", "UndefinedError", "'x' is undefined"},
    {R"J({{ x|indent }})J", "", "", "UndefinedError", "'x' is undefined"},
    {R"J({{ 'abc'.find(1) }})J", "", "", "TypeError", "must be str, not int"},
    {R"J({{ 'a b'.split(' ', 'x') }})J", "", "", "TypeError", "'str' object cannot be interpreted as an integer"},
    {R"J({{ x is defined(1) }})J", R"J({"x": 1})J", "", "TypeError", "test_defined() takes 1 positional argument but 2 were given"},
    {R"J({{ true|last }})J", "", "", "TypeError", "'bool' object is not reversible"},
};
TEST(JinjaConstructs, Errors) { run_cases(kErrors); }

const Case kIterators[] = {
    {R"J({{ not ([]|select('odd')) }} {{ [1, 2]|map('int') is sequence }} {{ [1, 2]|map('int') is iterable }} {{ 2 in [1, 2, 3]|map('int') }} {{ [1, 2]|map('int') == [1, 2]|map('int') }})J", "", "False False True True False", "", ""},
    {R"J({% set g = [1, 2, 3]|map('string') %}{{ g|first }}{{ g|list }}{{ g|list }}|{% set h = [1, 2, 3]|select %}{% for x in h %}{{ x }}{{ loop.length }}{% endfor %}{% for x in h %}{{ x }}{% else %}empty{% endfor %})J", "", "1['2', '3'][]|132333empty", "", ""},
    {R"J({% if ms|selectattr('role', 'equalto', 'system') %}always{% endif %}|{% if ms|selectattr('role', 'equalto', 'system')|list %}never{% endif %})J", R"J({"ms": [{"role": "user"}]})J", "always|", "", ""},
    {R"J({{ [1, 2]|select('odd')|length }})J", "", "", "TypeError", "object of type 'generator' has no len()"},
    {R"J({{ [1, 2]|select('odd')|last }})J", "", "", "TypeError", "'generator' object is not reversible"},
    {R"J({{ ([1, 2]|select('odd'))[0] }}|{{ d.items()[0] }}|{{ d.keys() }} {{ d.values() }})J", R"J({"d": {"a": 1}})J", "||dict_keys(['a']) dict_values([1])", "", ""},
    {R"J({{ ([1, 2]|select('odd'))[1:] }})J", "", "", "TypeError", "'generator' object is not subscriptable"},
    {R"J({{ [1, 2]|map('int')|tojson }})J", "", "", "TypeError", "Object of type generator is not JSON serializable"},
    {R"J({% set g = 5|map('upper') %}lazy{{ g is iterable }}{{ g|list }})J", "", "", "TypeError", "'int' object is not iterable"},
    {R"J({{ [1, 2]|reverse|list }} {{ [1, 2]|reverse is sequence }} {{ 'abc'|reverse }} {{ {'a': 1, 'b': 2}|reverse|list }} {{ [1, 2]|map('int')|reverse }})J", "", "[2, 1] False cba ['b', 'a'] [2, 1]", "", ""},
};
TEST(JinjaConstructs, Iterators) { run_cases(kIterators); }

TEST(JinjaConstructs, StrftimeNowUsesInjectedClock) {
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d %a %d %b %Y') }}"), "2024-07-26 Fri 26 Jul 2024");
  const std::string today = ChatTemplate::parse("{{ strftime_now('%Y') }}").render(nlohmann::ordered_json::object());
  EXPECT_EQ(today.size(), 4u);
}

TEST(JinjaConstructs, ContextTypesAndMissingKeys) {
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"add_generation_prompt", true}, {"n", 3}, {"f", 1.0}, {"u", 18446744073709551615ull}};
  EXPECT_EQ(render("{{ messages[0].role }}{{ add_generation_prompt }}{{ n + 1 }}{{ f }}{{ tools is defined }}", ctx),
            "userTrue41.0False");
  EXPECT_EQ(render("{{ u }}", ctx), "1.8446744073709552e+19");
  EXPECT_THROW(ChatTemplate::parse("x").render(nlohmann::ordered_json::array()), Error);
}

void expect_unsupported(const std::string& tmpl, const std::string& message) {
  SCOPED_TRACE(tmpl);
  try {
    ChatTemplate::parse(tmpl);
    ADD_FAILURE() << "parsed without error";
  } catch (const TemplateError& e) {
    ADD_FAILURE() << "parse raised a render error: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(JinjaConstructs, UnsupportedConstructNamesItselfAndLine) {
  expect_unsupported("{% extends 'base.html' %}", "unsupported construct tag 'extends' at line 1");
  expect_unsupported("a\n\n{% include 'x' %}", "unsupported construct tag 'include' at line 3");
  expect_unsupported("{% import 'x' as y %}", "unsupported construct tag 'import' at line 1");
  expect_unsupported("{% block body %}{% endblock %}", "unsupported construct tag 'block' at line 1");
  expect_unsupported("{% macro m() %}{{ caller() }}{% endmacro %}\n{% call m() %}x{% endcall %}",
                     "unsupported construct tag 'call' at line 2");
  expect_unsupported("{% do x.append(1) %}", "unsupported construct tag 'do' at line 1");
  expect_unsupported("line\n{{ x | wordwrap(10) }}", "unsupported construct filter 'wordwrap' at line 2");
  expect_unsupported("{{ x|groupby('a') }}", "unsupported construct filter 'groupby' at line 1");
  expect_unsupported("{% if x is prime %}{% endif %}", "unsupported construct test 'prime' at line 1");
  expect_unsupported("{% for x in y recursive %}{{ loop(x) }}{% endfor %}",
                     "unsupported construct 'recursive for loop' at line 1");
  expect_unsupported("{{ f(*args) }}", "unsupported construct '*args / **kwargs in a call' at line 1");
  expect_unsupported("\n{% if x %}never closed", "unsupported construct 'unexpected end of template, expected elif' at line 2");
  expect_unsupported("{% endif %}", "unsupported construct tag 'endif' at line 1");
  expect_unsupported("{{ 1 + }}", "unsupported construct 'expected an expression, got end of print statement' at line 1");
  expect_unsupported("{{ (1 }}", "unsupported construct 'unexpected }' at line 1");
  expect_unsupported("ok\n{# never closed", "unsupported construct 'missing end of comment tag' at line 2");
  expect_unsupported("{{ 'open }}", "unsupported construct 'unterminated string literal' at line 1");
  expect_unsupported("{{ a ? b }}", "unsupported construct 'unexpected char ?' at line 1");
  expect_unsupported("{% for %}", "unsupported construct 'expected a name, got end of statement block' at line 1");
}

TEST(JinjaConstructs, ParsedTemplateIsReusable) {
  const ChatTemplate t = ChatTemplate::parse("{% for m in messages %}{{ m }},{% endfor %}");
  EXPECT_EQ(t.render({{"messages", {1, 2}}}), "1,2,");
  EXPECT_EQ(t.render({{"messages", {"a"}}}), "a,");
  EXPECT_EQ(t.source(), "{% for m in messages %}{{ m }},{% endfor %}");
}

TEST(JinjaConstructs, DeepMacroRecursionIsAnErrorNotACrash) {
  try {
    render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    ADD_FAILURE() << "expected RecursionError";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), "RecursionError");
  }
}

}  // namespace
}  // namespace vllm
