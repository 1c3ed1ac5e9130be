// Language features of the chat-template interpreter with hand-written expected output: loop
// variables, namespace, macros, filters, whitespace control, slices, error positions and the
// limits that stop runaway templates.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "engine/chat/chat_template.h"
#include "engine/common/error.h"

namespace cypris {
namespace {

using ::testing::HasSubstr;

std::string render(const std::string& source, nlohmann::ordered_json vars = nlohmann::ordered_json::object()) {
  ChatTemplateInputs in;
  in.extra = std::move(vars);
  return ChatTemplate(source).render(nlohmann::ordered_json::array(), in);
}

// The message of the cypris::Error that rendering (or parsing) throws; "" when none.
std::string error_of(const std::string& source, nlohmann::ordered_json vars = nlohmann::ordered_json::object()) {
  try {
    render(source, std::move(vars));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaLanguage, LoopVariables) {
  EXPECT_EQ(render("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.length }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} "
                   "{% endfor %}"),
            "10323F 21213 32103L ");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}"),
            "<1>2|1<2>3|2<3>|");
  EXPECT_EQ(render("{% for x in range(5) %}{{ loop.cycle('x', 'y') }}{% endfor %}"), "xyxyx");
  EXPECT_EQ(render("{% for x in range(6) if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "0/3 2/3 4/3 ");
  EXPECT_EQ(render("{% for x in [] %}no{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"z", 1}, {"a", 2}}}}),
            "z=1;a=2;");
  EXPECT_EQ(render("{% for i in range(9) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 5 %}{% break %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "024");
  // A set inside the loop does not leak out of it, nor into the next iteration.
  EXPECT_EQ(render("{% set n = 0 %}{% for i in [1, 2] %}{% set n = n + i %}{{ n }}{% endfor %}{{ n }}"), "120");
}

TEST(JinjaLanguage, NamespaceCarriesStateOutOfLoops) {
  EXPECT_EQ(render("{% set ns = namespace(total=0, seen=false) %}{% for i in [3, 4] %}{% set ns.total = ns.total + i %}"
                   "{% set ns.seen = true %}{% endfor %}{{ ns.total }} {{ ns.seen }}"),
            "7 True");
  EXPECT_THAT(error_of("{% set x = 1 %}{% set x.a = 2 %}"), HasSubstr("not a namespace"));
}

TEST(JinjaLanguage, MacrosWithDefaultsAndCaller) {
  EXPECT_EQ(render("{% macro tag(name, open='<', close='>') %}{{ open }}{{ name }}{{ close }}{% endmacro %}"
                   "{{ tag('a') }}{{ tag('b', '[', ']') }}{{ tag(close=')', name='c', open='(') }}"),
            "<a>[b](c)");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}x{{ 1 + 1 }}{% endcall %}"), "[x2]");
  // A macro's own sets stay inside; its result is a string usable in expressions.
  EXPECT_EQ(render("{% macro m() %}{% set inner = 1 %}ab{% endmacro %}{{ m()|length }}{{ inner is defined }}"),
            "2False");
}

TEST(JinjaLanguage, Filters) {
  EXPECT_EQ(
      render("{{ '  x  '|trim }}|{{ [3, 1, 2]|sort|join(',') }}|{{ 'abc'|upper|reverse }}|{{ none|default('d') }}"),
      "x|1,2,3|CBA|None");
  EXPECT_EQ(render("{{ ''|default('d', true) }}|{{ [1, 2, 2, 1]|unique|list }}|{{ 'a b'|replace(' ', '_') }}"),
            "d|[1, 2]|a_b");
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(' ') }}",
                   {{"ms",
                     {{{"role", "user"}, {"content", "a"}},
                      {{"role", "bot"}, {"content", "b"}},
                      {{"role", "user"}, {"content", "c"}}}}}),
            "a c");
  EXPECT_EQ(render("{{ d|tojson }}", {{"d", {{"z", {1, 2.5, nullptr}}, {"a", "é\"\n"}}}}),
            "{\"z\": [1, 2.5, null], \"a\": \"é\\\"\\n\"}");
  EXPECT_EQ(render("{{ d|tojson(indent=2) }}", {{"d", {{"k", {true}}}}}), "{\n  \"k\": [\n    true\n  ]\n}");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2) }}|{{ 7.5|int }}|{{ '3'|int + 1 }}|{{ -2|abs }}|{{ 2.5|round }}"),
            "a\n  b|7|4|2|2.0");
}

TEST(JinjaLanguage, PrintsValuesLikePython) {
  EXPECT_EQ(render("{{ none }} {{ true }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e100 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }}"),
            "None True 1.0 0.30000000000000004 1e+100 3 2 0.25");
  EXPECT_EQ(render("{{ [1, 'a', none] }} {{ {'k': \"it's\"} }} {{ (1,) }}"), "[1, 'a', None] {'k': \"it's\"} (1,)");
}

TEST(JinjaLanguage, UndefinedIsLenient) {
  EXPECT_EQ(render("[{{ missing }}][{{ missing.attr.deeper }}]{{ missing is defined }}{{ missing.attr is defined }}"
                   "{% for x in missing %}x{% endfor %}{{ missing|length }}"),
            "[][]FalseFalse0");
  EXPECT_THAT(error_of("{{ missing + 1 }}"), HasSubstr("'missing' is undefined"));
}

TEST(JinjaLanguage, SlicesAndIndexing) {
  nlohmann::ordered_json v = {{"xs", {0, 1, 2, 3, 4}}, {"s", "héllo"}};
  EXPECT_EQ(render("{{ xs[1:] }} {{ xs[:-2] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-1] }} {{ xs[3:1:-1] }}", v),
            "[1, 2, 3, 4] [0, 1, 2] [4, 3, 2, 1, 0] [0, 2, 4] 4 [3, 2]");
  EXPECT_EQ(render("{{ s[1:] }} {{ s[::-1] }} {{ s[1] }} {{ s|length }} {{ xs[10] is defined }}", v),
            "éllo olléh é 5 False");
}

TEST(JinjaLanguage, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("<ul>\n  {% for x in [1, 2] %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>"),
            "<ul>\n  <li>1</li>\n  <li>2</li>\n</ul>");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}\n  c {{- ' d ' -}} e"), "ab  c d e");
  EXPECT_EQ(render("x {% if true %}y{% endif %}\n  {%+ if true %}z{% endif +%}\nw"), "x y  z\nw");
  EXPECT_EQ(render("A\n  {# comment #}\nB\n"), "A\nB");  // one trailing newline is dropped, like Jinja
  EXPECT_EQ(render("{% raw %}{{ kept }}{% endraw %}"), "{{ kept }}");
}

TEST(JinjaLanguage, SyntaxErrorsNameLineAndColumn) {
  EXPECT_THAT(error_of("line one\nline two\nsee: {{ x | foo }}"),
              HasSubstr("chat template: line 3, column 13: unknown filter 'foo'"));
  EXPECT_THAT(error_of("{% if x %}never closed"), HasSubstr("expected 'elif' or 'else' or 'endif'"));
  EXPECT_THAT(error_of("ok\n  {% endfor %}"), HasSubstr("line 2, column 6: unexpected 'endfor'"));
  EXPECT_THAT(error_of("{{ 1 + }}"), HasSubstr("line 1, column 8: expected an expression"));
  EXPECT_THAT(error_of("{{ 'open }}"), HasSubstr("unterminated string"));
  EXPECT_THAT(error_of("{% frobnicate %}"), HasSubstr("unknown or unsupported tag 'frobnicate'"));
  EXPECT_THAT(error_of("{{ x is frob }}"), HasSubstr("unknown test 'frob'"));
  EXPECT_THAT(error_of("{{ x"), HasSubstr("missing '}}'"));
}

TEST(JinjaLanguage, RuntimeErrorsNameLineAndColumn) {
  EXPECT_THAT(error_of("a\n  {{ 'text' + 1 }}"),
              HasSubstr("line 2, column 13: unsupported operand type(s) for +: 'str' and 'int'"));
  EXPECT_THAT(error_of("{{ raise_exception('Roles must alternate') }}"), HasSubstr("Roles must alternate"));
  EXPECT_THAT(error_of("{% for x in 3 %}{% endfor %}"), HasSubstr("'int' object is not iterable"));
  EXPECT_THAT(error_of("{{ 1 // 0 }}"), HasSubstr("division by zero"));
  EXPECT_THAT(error_of("{{ nothing() }}"), HasSubstr("'nothing' is undefined"));
}

TEST(JinjaLanguage, RunawayTemplatesStopWithAnError) {
  EXPECT_THAT(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), HasSubstr("nested too deeply"));
  EXPECT_THAT(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
              HasSubstr("evaluation steps"));
  EXPECT_THAT(error_of("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}"),
              HasSubstr("exceeds"));
  EXPECT_THAT(error_of("{{ 'x' * 10000000000 }}"), HasSubstr("exceeds"));
  EXPECT_THAT(error_of("{{ range(1000000000)|length }}"), HasSubstr("range too big"));
  // A namespace can wrap a value in itself without end; nesting is capped instead of crashing.
  EXPECT_THAT(error_of("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
              HasSubstr("nested more than"));
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ (ns|string)[:30] }}"),
            "<Namespace {'me': <Namespace {");
  std::string deep(500, '(');
  EXPECT_THAT(error_of("{{ " + deep + "1" + std::string(500, ')') + " }}"), HasSubstr("nested too deeply"));
}

TEST(JinjaLanguage, StrftimeNowUsesTheClock) {
  ChatTemplateInputs in;
  in.clock = [] {
    std::tm tm{};
    tm.tm_year = 2024 - 1900;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_wday = 5;
    return tm;
  };
  EXPECT_EQ(ChatTemplate("{{ strftime_now('%d %b %Y, %A %B %-d') }}").render(nlohmann::ordered_json::array(), in),
            "26 Jul 2024, Friday July 26");
}

}  // namespace
}  // namespace cypris
