// Unit tests of the Jinja engine: expressions, statements, filters, tests, whitespace rules, errors and limits.
// The expected strings of the table-like cases were produced by Python's Jinja2 3.1 configured the way Hugging Face
// transformers renders chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// tojson = json.dumps), so each CHECK pins the engine to the reference behaviour.
#include <doctest/doctest.h>

#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/json.hpp"
#include "text/jinja/template.hpp"

namespace {

namespace jinja = actorllm::text::jinja;

std::string render(std::string_view source, std::string_view variables_json = "{}") {
  return jinja::compiled_template::parse(source).render(jinja::parse_json(variables_json));
}

// The error that parsing or rendering `source` raises, if any.
std::optional<jinja::template_error> error_of(std::string_view source, std::string_view variables_json = "{}",
                                              const jinja::render_limits& limits = {}) {
  try {
    jinja::render_options options;
    options.limits = limits;
    jinja::compiled_template::parse(source).render(jinja::parse_json(variables_json), options);
  } catch (const jinja::template_error& e) {
    return e;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("jinja: literals print the way Python's str() does") {
  CHECK(
      render(
          R"({{ 1 }}|{{ -7 }}|{{ 1.5 }}|{{ 1.0 }}|{{ 1e20 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 123456789.125 }})") ==
      "1|-7|1.5|1.0|1e+20|1e-05|0.30000000000000004|1e+16|123456789.125");
  CHECK(render(R"({{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ 2.5e-3 }})") == "31|15|5|1000|0.0025");
  CHECK(render(R"({{ 'a\tb' }}|{{ "it's" }}|{{ 'x' 'y' }}|{{ '\u00e9\x41\101' }}|{{ '\q' }})") ==
        "a\tb|it's|xy|éAA|\\q");
  CHECK(render(R"({{ [1, 'a', none, true, 1.0, [2], {'k': 'v'}] }})") == "[1, 'a', None, True, 1.0, [2], {'k': 'v'}]");
  CHECK(render(R"({{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ ['it\'s', 'a"b', 'a\'b"c'] }})") ==
        "(1, 2)|(1,)|()|[\"it's\", 'a\"b', 'a\\'b\"c']");
  CHECK(render(R"({{ none }}|{{ true }}|{{ false }}|{{ None }}|{{ True }}|{{ False }})") ==
        "None|True|False|None|True|False");
  CHECK(render(R"({{ x }}|{{ l }}|{{ d }})", R"({"x": "é中", "l": [1, "a", null], "d": {"k": [1.5, true]}})") ==
        "é中|[1, 'a', None]|{'k': [1.5, True]}");
}

TEST_CASE("jinja: arithmetic follows Python") {
  CHECK(
      render(
          R"({{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }})") ==
      "3 -4 2 -2 3.5 2.0 1024 0.5");
  CHECK(
      render(
          R"({{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ true + 1 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'ab' * 0 }})") ==
      "3.0 0.5 2.5 2 ababab [1, 1, 1] ");
  CHECK(render(R"({{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 'a' ~ 1 ~ none ~ missing ~ [1] }})") == "ab|[1, 2]|a1None[1]");
  CHECK(render(R"({{ - 2 ** 2 }}|{{ (-2) ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ -x }})", R"({"x": 3})") ==
        "4|4|64|5.0|-3");
  CHECK(
      render(
          R"({{ '%s-%d' % ('a', 3) }}|{{ 'a%sb' % 'X' }}|{{ '%5.2f|%-4d|%03d|%x|%r' % (3.14159, 7, 5, 255, 'q') }}|{{ '%(k)s!' % {'k': 1} }})") ==
      "a-3|aXb| 3.14|7   |005|ff|'q'|1!");
}

TEST_CASE("jinja: comparisons and boolean logic follow Python") {
  CHECK(
      render(
          R"({{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' != 'a' }})") ==
      "TrueFalseTrueTrueTrueTrueFalse");
  CHECK(render(R"({{ 1 and 2 }}|{{ 0 and 2 }}|{{ 0 or 'x' }}|{{ '' or [] }}|{{ not 1 }}|{{ not not 'a' }})") ==
        "2|0|x|[]|False|True");
  CHECK(
      render(
          R"({{ 'a' in 'cat' }}{{ 1 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}{{ 'z' not in 'abc' }}{{ (1, 2) in {(1, 2): 0} }})") ==
      "TrueTrueTrueTrueTrueTrue");
  CHECK(
      render(
          R"({{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}{{ [1, [2]] == [1, [2]] }}{{ (1, 2) == [1, 2] }}{{ missing == missing }})") ==
      "TrueTrueFalseTrue");
  CHECK(
      render(
          R"({{ 'a' if x else 'b' }}|{{ 'a' if not x else 'b' }}|{{ 'a' if x }}|{{ 1 if false else 2 if false else 3 }})",
          R"({"x": 0})") == "b|a||3");
}

TEST_CASE("jinja: attribute, item and slice access") {
  CHECK(render(
            R"({{ d.a }}|{{ d['a'] }}|{{ d.b }}|{{ d['b'] }}|{{ l[0] }}|{{ l[-1] }}|{{ l[5] }}|{{ s[1] }}|{{ s[-1] }})",
            R"({"d": {"a": 1}, "l": [1, 2, 3], "s": "héllo"})") == "1|1|||1|3||é|o");
  CHECK(render(
            R"({{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[-2:] }}|{{ l[5:] }}|{{ l[3:0:-1] }}|{{ l.0 }})",
            R"({"l": [1, 2, 3, 4]})") == "[2, 3, 4]|[1, 2, 3]|[4, 3, 2, 1]|[1, 3]|[3, 4]|[]|[4, 3, 2]|1");
  CHECK(render(R"({{ s[1:] }}|{{ s[::-1] }}|{{ s[:-1] }}|{{ s[1:3] }})", R"({"s": "héllo wörld"})") ==
        "éllo wörld|dlröw olléh|héllo wörl|él");
  CHECK(render(R"({{ none.x }}|{{ none['x'] }}|{{ 'abc'.nothing }}|{{ m.content.missing is defined }})",
               R"({"m": {"content": "x"}})") == "|||False");
  CHECK(
      render(
          R"({{ d.items()|list }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 7) }})",
          R"({"d": {"a": 1, "b": [2]}})") == "[('a', 1), ('b', [2])]|['a', 'b']|[1, [2]]|1|None|7");
}

TEST_CASE("jinja: str, list and dict methods") {
  CHECK(
      render(
          R"({{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|{{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\n a\n'.lstrip() }}|{{ 'a\n\n'.rstrip('\n') }})") ==
      "ABC|abc|a|a|a\n|a");
  CHECK(
      render(
          R"({{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a b '.split(None, 1) }}|{{ ''.split() }})") ==
      "['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|['a,b', 'c']|['a', 'b ']|[]");
  CHECK(
      render(
          R"({{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.startswith('b', 1) }})") ==
      "TrueTrueTrueTrue");
  CHECK(
      render(
          R"({{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'a-b c1d'.title() }}|{{ 'aXb'.swapcase() }})") ==
      "Hello World|Hello|A-B C1D|AxB");
  CHECK(
      render(
          R"({{ 'aaa'.replace('a', 'b') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.replace('', '-') }}|{{ 'hello'.find('l') }}|{{ 'héllo'.rfind('l') }}|{{ 'hello'.count('l') }})") ==
      "bbb|bba|-a-b-c-|2|3|2");
  CHECK(
      render(
          R"({{ ', '.join(['a', 'b']) }}|{{ '{} and {}'.format('a', 1) }}|{{ '{1}{0}'.format('a', 'b') }}|{{ '{x}!'.format(x=3) }}|{{ '{:>5}|{:05d}|{:.2f}'.format('a', 42, 3.14159) }})") ==
      "a, b|a and 1|ba|3!|    a|00042|3.14");
  CHECK(
      render(
          R"({{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}|{{ 'a\nb\r\nc'.splitlines() }}|{{ '42'.zfill(5) }}|{{ 'ab'.center(6, '*') }})") ==
      "TrueTrueTrueTrueTrue|['a', 'b', 'c']|00042|**ab**");
  CHECK(
      render(
          R"({% set l = [3] %}{% set _ = l.append(1) %}{% set _ = l.extend([2, 0]) %}{{ l }}|{{ l.pop() }}|{{ l.index(1) }}|{{ l.count(3) }}|{% set d = {} %}{% set _ = d.update({'a': 1}, b=2) %}{{ d }}|{{ d.pop('a') }}|{{ d.setdefault('c', 3) }}|{{ d }})") ==
      "[3, 1, 2, 0]|0|1|1|{'a': 1, 'b': 2}|1|3|{'b': 2, 'c': 3}");
}

TEST_CASE("jinja: filters") {
  CHECK(
      render(
          R"({{ ' x '|trim }}|{{ 'xax'|trim('x') }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ 'hello world'|capitalize }}|{{ 'hello wOrld-foo (bar'|title }})") ==
      "x|a|AB|ab|Hello world|Hello World-Foo (Bar");
  CHECK(
      render(
          R"({{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ items|sort(attribute='n')|map(attribute='n')|list }})",
          R"({"items": [{"n": 2}, {"n": 1}, {"n": 3}]})") ==
      "[1, 2, 3]|[3, 2, 1]|['A', 'b', 'c']|['A', 'b', 'c']|[1, 2, 3]");
  CHECK(
      render(
          R"({{ [1, 2, 3]|first }}|{{ [1, 2, 3]|last }}|{{ 'abc'|first }}|{{ 'abc'|last }}|{{ []|first }}|{{ {'a': 1, 'b': 2}|first }})") ==
      "1|3|a|c||a");
  CHECK(
      render(
          R"({{ [1, 2, 3]|length }}|{{ 'héllo'|length }}|{{ {'a': 1}|length }}|{{ missing|length }}|{{ [1, 2]|count }})") ==
      "3|5|1|0|2");
  CHECK(render(R"({{ [1, 2, 3]|join }}|{{ [1, 2, 3]|join(', ') }}|{{ users|join(', ', attribute='name') }})",
               R"({"users": [{"name": "a"}, {"name": "b"}]})") == "123|1, 2, 3|a, b");
  CHECK(
      render(
          R"({{ missing|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ none|default('d') }}|{{ missing|d('e') }})") ==
      "d||d|None|e");
  CHECK(
      render(
          R"({{ 'abc'|reverse }}|{{ [1, 2, 3]|reverse|list }}|{{ '42'|int }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 4.9|int }}|{{ '4.5'|float }}|{{ 'x'|float }})") ==
      "cba|[3, 2, 1]|42|4|0|7|4|4.5|0.0");
  CHECK(
      render(
          R"({{ 3|string }}|{{ [1, 'a']|string }}|{{ none|string }}|{{ missing|string }}|{{ 'abc'|list }}|{{ {'a': 1}|list }})") ==
      "3|[1, 'a']|None||['a', 'b', 'c']|['a']");
  CHECK(
      render(
          R"({{ {'b': 1, 'a': 2}|items|list }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ {'b': 1, 'a': 2}|dictsort(by='value') }})") ==
      "[('b', 1), ('a', 2)]|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]");
  CHECK(
      render(
          R"({{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '', 2]|select|list }}|{{ [1, 5, 3]|select('gt', 2)|list }})") ==
      "[1, 3]|[2, 4]|[1, 2]|[5, 3]");
  CHECK(
      render(
          R"({{ ms|selectattr('role', 'equalto', 'user')|list|length }}|{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='content')|join(',') }}|{{ ms|selectattr('x')|list }})",
          R"({"ms": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b", "x": 1}]})") ==
      "1|b|[{'role': 'bot', 'content': 'b', 'x': 1}]");
  CHECK(
      render(
          R"({{ ['a', 'b']|map('upper')|list }}|{{ [1, 2]|map('string')|join('-') }}|{{ ms|map(attribute='x', default='?')|list }})",
          R"({"ms": [{"x": 1}, {}]})") == "['A', 'B']|1-2|[1, '?']");
  CHECK(
      render(
          R"({{ [1, 2, 3]|sum }}|{{ [1.5, 2]|sum }}|{{ [1, 2]|sum(start=10) }}|{{ [3, 1, 2]|max }}|{{ [3, 1, 2]|min }}|{{ [1, 2, 1, 3]|unique|list }}|{{ ['a', 'A', 'b']|unique|list }})") ==
      "6|3.5|13|3|1|[1, 2, 3]|['a', 'b']");
  CHECK(
      render(
          R"({{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x\ny'|indent('> ') }})") ==
      "a\n    b\n\n    c|  a\n  b|a\n  \n  b|x\n> y");
  CHECK(
      render(
          R"({{ '<a href="x">&\'</a>'|escape }}|{{ '<b>'|safe }}|{{ 3.14159|round }}|{{ 3.14159|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 3.14159|round(1, 'floor') }}|{{ 5|round }})") ==
      "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;|<b>|3.0|3.14|2.0|4.0|3.1|5");
  CHECK(
      render(
          R"({{ -3|abs }}|{{ 'abc'|center(7) }}|{{ 'a b  c'|wordcount }}|{{ 'hello world foo bar'|truncate(9) }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ '%s-%s'|format(1, 'a') }})") ==
      "3|  abc  |3|hello...|[[1, 2], [3, 4], [5]]|1-a");
}

TEST_CASE("jinja: tojson matches Python's json.dumps as HF calls it") {
  CHECK(render(R"({{ d|tojson }})", R"({"d": {"a": [1, 2.5, null, true, "x\"y\né中"], "b": {}, "c": []}})") ==
        "{\"a\": [1, 2.5, null, true, \"x\\\"y\\né中\"], \"b\": {}, \"c\": []}");
  CHECK(render(R"({{ d|tojson(indent=2) }})", R"({"d": {"a": [1, {"b": []}], "c": {"d": 1}}})") ==
        "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {\n    \"d\": 1\n  }\n}");
  CHECK(render(R"({{ d|tojson(indent=4) }}|{{ d|tojson(indent=0) }}|{{ d|tojson(indent='\t') }})",
               R"({"d": {"a": [1]}})") ==
        "{\n    \"a\": [\n        1\n    ]\n}|{\n\"a\": [\n1\n]\n}|{\n\t\"a\": [\n\t\t1\n\t]\n}");
  CHECK(render(R"({{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }})",
               R"({"d": {"b": 1, "a": [1, 2]}})") == "{\"a\": [1, 2], \"b\": 1}|{\"b\":1,\"a\":[1,2]}");
  CHECK(
      render(
          R"({{ 'é\u0001\u007f\\'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ '😀'|tojson(ensure_ascii=true) }}|{{ 1e100|tojson }}|{{ 1.0|tojson }}|{{ (1, 2)|tojson }})") ==
      "\"é\\u0001\\\\\"|\"\\u00e9\"|\"\\ud83d\\ude00\"|1e+100|1.0|[1, 2]");
  CHECK(render(R"({{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }})") ==
        "{\"1\": \"b\", \"null\": \"c\", \"2.5\": \"d\"}");
}

TEST_CASE("jinja: tests") {
  CHECK(
      render(
          R"({{ 'abc' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 'a' is sequence }}{{ 1 is iterable }})") ==
      "TrueTrueTrueTrueFalseTrueTrueTrueTrueTrueFalse");
  CHECK(
      render(
          R"({{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }})") ==
      "TrueFalseTrueFalseTrueFalseTrueTrueTrueFalse");
  CHECK(
      render(
          R"({{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ x is not none }}{{ not x is defined }})",
          R"({"x": 1})") == "TrueFalseTrueTrueTrueFalse");
  CHECK(
      render(
          R"({{ 'a' is lower }}{{ 'A' is upper }}{{ 2 is in [1, 2] }}{{ 3 is eq 3 }}{{ 3 is ne 3 }}{{ 3 is lt 4 }}{{ 3 is ge 4 }}{{ range is callable }}{{ 'x' is callable }}{{ [1] is sameas [1] }})") ==
      "TrueTrueTrueTrueFalseTrueFalseTrueFalseFalse");
}

TEST_CASE("jinja: for loops: loop variables, else, filtering, unpacking, break and continue") {
  CHECK(
      render(
          R"({% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %})") ==
      "10TrueFalse332;21FalseFalse321;32FalseTrue310;");
  CHECK(render(R"({% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] %}a{% else %}empty{% endfor %})") ==
        "empty|a");
  CHECK(render(R"({% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.index }}{{ loop.last }};{% endfor %})") ==
        "21False;42True;");
  CHECK(
      render(
          R"({% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}|{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{% endfor %})") ==
      "-2;1-3;2-;|aba");
  CHECK(render(R"({% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %})") == "121");
  CHECK(
      render(
          R"({% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d|items %}{{ k }}{% endfor %})",
          R"({"d": {"x": 1, "y": 2}})") == "37|x=1;y=2;|xy");
  CHECK(
      render(
          R"({% for c in 'héllo' %}[{{ c }}]{% endfor %}|{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}|{% for x in missing %}x{% endfor %})") ==
      "[h][é][l][l][o]|ab|");
  CHECK(
      render(
          R"({% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %})") ==
      "13");
  CHECK(
      render(
          R"({% for i in range(3) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }},{% endfor %}{{ loop.index }};{% endfor %})") ==
      "001,012,1;101,112,2;201,212,3;");
  CHECK(render(R"({{ range(5)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }})") ==
        "[0, 1, 2, 3, 4]|[1, 4, 7]|[5, 3, 1]|[]");
  CHECK(
      render(
          R"({% for m in messages[::-1] %}{{ m }}{% endfor %}|{% for m in messages if m != 2 %}{{ m }}{{ loop.length }}{% endfor %})",
          R"({"messages": [1, 2, 3]})") == "321|1232");
}

TEST_CASE("jinja: if, set scoping, block set and namespace") {
  CHECK(render(R"({% if x %}a{% elif y %}b{% else %}c{% endif %}|{% if not x and not y %}none{% endif %})",
               R"({"x": 0, "y": 1})") == "b|");
  CHECK(render(R"({% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }})") == "12121");
  CHECK(
      render(
          R"({% for i in range(3) %}{% if i == 0 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}|{% if true %}{% set z = 1 %}{% endif %}{{ z }})") ==
      "[a][][]|1");
  CHECK(
      render(
          R"({% set ns = namespace(count=0, items=[]) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }}|{{ ns.items }})") ==
      "6|[]");
  CHECK(
      render(
          R"({% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}|{{ ns.b }}|{{ ns }}|{% set ns2 = namespace({'k': 2}, j=3) %}{{ ns2.k }}{{ ns2.j }})") ==
      "1||<Namespace {'a': 1}>|23");
  CHECK(render(R"({% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set (c, d) = [3, 4] %}{{ c }}{{ d }})") == "12|34");
  CHECK(
      render(
          R"({% set x %}  hello {{ 1 + 1 }}  {% endset %}[{{ x }}]|{% set y | upper | trim %} abc {% endset %}[{{ y }}])") ==
      "[  hello 2  ]|[ABC]");
  CHECK(render(R"({% set messages = messages[1:] %}{{ messages }})", R"({"messages": [1, 2, 3]})") == "[2, 3]");
  CHECK(
      render(
          R"({% with a = 1, b = 2 %}{{ a + b }}{% endwith %}|{{ a }}|{% filter upper %}hello {{ 'x' }}{% endfilter %})") ==
      "3||HELLO X");
}

TEST_CASE("jinja: macros and call blocks") {
  CHECK(
      render(
          R"({% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Bob') }}|{{ greet('Al', greeting='Hi') }}|{{ greet(greeting='Yo', name='X') }})") ==
      "Hello, Bob!|Hi, Al!|Yo, X!");
  CHECK(
      render(
          R"({% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, x=3) }})") ==
      "11!|12|(1, 2){'x': 3}");
  CHECK(
      render(
          R"({% macro list_items(items) %}{% for i in items %}<{{ caller(i) }}>{% endfor %}{% endmacro %}{% call(x) list_items([1, 2]) %}item {{ x }}{% endcall %})") ==
      "<item 1><item 2>");
  CHECK(
      render(
          R"({% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inner{% endcall %}|{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }})") ==
      "[inner]|120");
  CHECK(
      render(
          R"({% set g = 'global' %}{% macro show() %}{{ g }}{% endmacro %}{% for g in ['loop'] %}{{ show() }}{% endfor %})") ==
      "global");
}

TEST_CASE("jinja: whitespace control, trim_blocks and lstrip_blocks as HF configures them") {
  CHECK(render("a\n  {% if true %}\n  x\n  {% endif %}\nb\n") == "a\n  x\nb");
  CHECK(render(R"(a  {%- if true -%}  x  {%- endif -%}  b)") == "axb");
  CHECK(render("a {{- 1 -}} b|a {{ 1 }} b|a\n{{ 1 }}\nb") == "a1b|a 1 b|a\n1\nb");
  CHECK(render("<ul>\n{% for i in [1, 2] %}\n    <li>{{ i }}</li>\n{% endfor %}\n</ul>") ==
        "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>");
  CHECK(render("  {% if true %}x{% endif %}  \n  {%+ if true %}y{% endif %}\n{% if true +%}\nz{% endif %}") ==
        "x  \n  y\nz");
  CHECK(render("a\n{# c #}\nb\n  {# d #}\nc{#- e -#}  d") == "a\nb\ncd");
  CHECK(render("x {%- if true %} y {% endif -%}\n\n z") == "x y z");
  CHECK(render("{% for m in ms %}\n  {{- m }}\n{% endfor %}", R"({"ms": [1, 2]})") == "1\n2\n");
  CHECK(render("line1\r\nline2\r{% if true %}\r\nz{% endif %}\n\n") == "line1\nline2\nz");
  CHECK(render("\t{% if true %}\n\tX\n\t{% endif %}\n") == "\tX\n");
  CHECK(render(R"({% raw %}{{ not rendered }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw %}|)") ==
        "{{ not rendered }}|{% x %}|");
  CHECK(render(R"({{ '}}' }}{{ {'a': {'b': 1}} }}{% if '%}' %}ok{% endif %})") == "}}{'a': {'b': 1}}ok");
}

TEST_CASE("jinja: trim_blocks, lstrip_blocks and keep_trailing_newline can be set") {
  const std::string source = "a\n  {% if true %}\n  x\n  {% endif %}\nb\n";
  jinja::parse_options plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  CHECK(jinja::compiled_template::parse(source, plain).render(jinja::value()) == "a\n  \n  x\n  \nb");
  jinja::parse_options keep;
  keep.keep_trailing_newline = true;
  CHECK(jinja::compiled_template::parse(source, keep).render(jinja::value()) == "a\n  x\nb\n");
}

TEST_CASE("jinja: undefined values behave like Jinja's default Undefined") {
  CHECK(render("{{ missing }}|{{ missing|length }}|{{ missing ~ 'a' }}|{{ missing is defined }}|"
               "{% if missing %}x{% endif %}|{{ missing == missing }}|{{ missing|default('d') }}|"
               "{% for x in missing %}x{% endfor %}|{{ missing|list }}|{{ d.nokey }}",
               R"({"d": {}})") == "|0|a|False||True|d||[]|");
  // Attribute, item, call and arithmetic on Undefined fail, naming what was undefined.
  for (const char* source : {"{{ missing.attr }}", "{{ missing['k'] }}", "{{ missing() }}", "{{ missing + 1 }}",
                             "{{ missing < 1 }}", "{{ -missing }}"}) {
    auto error = error_of(source);
    REQUIRE_MESSAGE(error, std::string(source));
    CHECK(error->kind() == jinja::error_kind::runtime);
    CHECK(error->reason() == "'missing' is undefined");
  }
  auto error = error_of("{{ d.nokey.sub }}", R"({"d": {}})");
  REQUIRE(error);
  CHECK(error->reason() == "'dict object' has no attribute 'nokey'");
  error = error_of("{{ tools|tojson }}");
  REQUIRE(error);
  CHECK(error->reason() == "Object of type Undefined is not JSON serializable");
}

TEST_CASE("jinja: syntax errors carry line and column") {
  struct syntax_case {
    const char* source;
    uint32_t line;
    uint32_t column;
    const char* reason_prefix;
  };
  const syntax_case cases[] = {
      {"{% for m in x %}\n  {{ m }}\n{% endif %}", 3, 4,
       "unexpected token 'endif', expected 'endfor' to close the 'for' at 1:4"},
      {"{{ 1 + }}", 1, 8, "unexpected token '}}'"},
      {"line\n  {{ 'abc }}", 2, 6, "unterminated string literal"},
      {"{% if x %}\nbody", 2, 5, "unexpected end of template, expected 'endif' to close the 'if' at 1:4"},
      {"{{ x | nofilter }}", 1, 8, "no filter named 'nofilter'"},
      {"{{ x is nottest }}", 1, 9, "no test named 'nottest'"},
      {"{% include 'other.jinja' %}", 1, 4, "'include' tags are not supported"},
      {"{% break %}", 1, 4, "'break' outside of a loop"},
      {"ok\n{# never closed", 2, 1, "missing end of comment tag"},
      {"é{{ 1 + }}", 1, 9, "unexpected token '}}'"},  // columns count characters, not bytes
      {"{{ (1 }}", 1, 7, "unexpected '}', expected ')'"},
      {"{{ 1 ) }}", 1, 6, "unexpected ')'"},
      {"{% set true = 1 %}", 1, 8, "cannot assign to 'true'"},
      {"{{ 99999999999999999999 }}", 1, 4, "integer literal too large"},
      {"{% macro m(a=1, b) %}{% endmacro %}", 1, 17, "non-default argument 'b' follows default argument"},
      {"{{ f(a=1, 2) }}", 1, 11, "positional argument follows keyword argument"},
      {"{% for x in y recursive %}{% endfor %}", 1, 15, "recursive loops are not supported"},
  };
  for (const auto& c : cases) {
    INFO(std::string(c.source));
    try {
      jinja::parse_options options;
      options.name = "chat template";
      jinja::compiled_template::parse(c.source, options);
      FAIL("expected a syntax error");
    } catch (const jinja::template_error& e) {
      CHECK(e.kind() == jinja::error_kind::syntax);
      CHECK(e.line() == c.line);
      CHECK(e.column() == c.column);
      CHECK(e.reason().rfind(c.reason_prefix, 0) == 0);
      std::string expected_prefix = "chat template:" + std::to_string(c.line) + ":" + std::to_string(c.column) + ": ";
      CHECK(std::string(e.what()).rfind(expected_prefix, 0) == 0);
    }
  }
}

TEST_CASE("jinja: runtime errors carry the line and column of the failing expression") {
  auto error = error_of("a\n  {{ 'x' + 1 }}");
  REQUIRE(error);
  CHECK(error->kind() == jinja::error_kind::runtime);
  CHECK(error->line() == 2);
  CHECK(error->column() == 10);
  CHECK(error->reason() == R"(can only concatenate str (not "int") to str)");
  CHECK(std::string(error->what()) == R"(template:2:10: can only concatenate str (not "int") to str)");
  error = error_of("{{ 1 + 'x' }}");
  REQUIRE(error);
  CHECK(error->reason() == "unsupported operand type(s) for +: 'int' and 'str'");

  error = error_of("{% for m in messages %}{{ m.content.strip() }}{% endfor %}", R"({"messages": [{"content": 3}]})");
  REQUIRE(error);
  CHECK(error->reason() == "'int object' has no attribute 'strip'");
  error = error_of("{{ 1 / 0 }}");
  REQUIRE(error);
  CHECK(error->reason() == "division by zero");
  error = error_of("{% set a, b = [1, 2, 3] %}");
  REQUIRE(error);
  CHECK(error->reason() == "too many values to unpack (expected 2)");
  error = error_of("{% set x = 1 %}{% set x.y = 2 %}");
  REQUIRE(error);
  CHECK(error->reason() == "cannot assign attribute on non-namespace object 'x'");
}

TEST_CASE("jinja: raise_exception stops the render with the template's message") {
  auto error = error_of(
      "{% for m in messages %}\n{% if m.role == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}",
      R"({"messages": [{"role": "user"}, {"role": "system"}]})");
  REQUIRE(error);
  CHECK(error->kind() == jinja::error_kind::raised);
  CHECK(error->reason() == "System role not supported");
  CHECK(error->line() == 2);
  CHECK(std::string(error->what()) == "template:2:46: System role not supported");
}

TEST_CASE("jinja: strftime_now formats the render's clock") {
  std::tm when{};
  when.tm_year = 2024 - 1900;
  when.tm_mon = 6;
  when.tm_mday = 26;
  when.tm_hour = 9;
  when.tm_min = 5;
  when.tm_isdst = -1;
  jinja::render_options options;
  options.now = std::chrono::system_clock::from_time_t(std::mktime(&when));
  auto tmpl = jinja::compiled_template::parse("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}");
  CHECK(tmpl.render(jinja::value(), options) == "26 Jul 2024|2024-07-26 09:05");
}

TEST_CASE("jinja: the caller's values are read-only, containers the template builds are not") {
  jinja::value variables = jinja::parse_json(R"({"messages": [{"role": "user"}], "d": {}})");
  auto error = error_of("{% set _ = messages.append(1) %}", R"({"messages": []})");
  REQUIRE(error);
  CHECK(error->reason() == "cannot modify a list that was passed to the template");
  error = error_of("{% set _ = d.update(a=1) %}", R"({"d": {}})");
  REQUIRE(error);
  CHECK(error->reason() == "cannot modify a dict that was passed to the template");
  CHECK(jinja::compiled_template::parse("{% set l = messages[:] %}{% set _ = l.append(2) %}{{ l|length }}"
                                        "{{ messages|length }}")
            .render(variables) == "21");
  CHECK(variables.as_dict().find("messages")->as_list().items.size() == 1);
}

TEST_CASE("jinja: one parsed template renders many times, with separate scopes") {
  auto tmpl = jinja::compiled_template::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  CHECK(tmpl.render(jinja::parse_json(R"({"messages": [1, 2, 3]})")) == "3");
  CHECK(tmpl.render(jinja::parse_json(R"({"messages": []})")) == "0");
  auto copy = tmpl;
  CHECK(copy.render(jinja::parse_json(R"({"messages": [1]})")) == "1");
  CHECK(copy.name() == "template");
  CHECK_THROWS_AS(tmpl.render(jinja::value::list()), std::invalid_argument);
}

TEST_CASE("jinja: limits turn runaway templates into limit errors [asan]") {
  auto expect_limit = [](std::string_view source, const jinja::render_limits& limits, std::string_view reason_part) {
    INFO(std::string(source));
    auto error = error_of(source, "{}", limits);
    REQUIRE(error);
    CHECK(error->kind() == jinja::error_kind::limit);
    CHECK(error->reason().find(reason_part) != std::string::npos);
  };
  jinja::render_limits defaults;
  expect_limit("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", defaults, "nested too deeply");
  expect_limit("{{ 'x' * 100000000000 }}", defaults, "exceeds the limit");
  expect_limit("{{ range(10000000000)|length }}", defaults, "exceeds the limit");
  expect_limit("{{ [1, 2] * 10000000 }}", defaults, "exceeds the limit");
  jinja::render_limits small;
  small.max_steps = 100000;
  expect_limit("{% for i in range(1000) %}{% for j in range(1000) %}{{ i }}{% endfor %}{% endfor %}", small,
               "evaluation steps");
  small = {};
  small.max_output_bytes = 10000;
  expect_limit("{% for i in range(100) %}{{ 'x' * 1000 }}{% endfor %}", small, "rendered output exceeds");
  small = {};
  small.max_string_bytes = 1000;
  expect_limit(
      "{% set ns = namespace(s='') %}{% for i in range(100) %}{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxx' %}"
      "{% endfor %}",
      small, "exceeds the limit");

  // Containers are shared, so sixty levels of [x, x] describe 2^60 items: walking them must hit the budget.
  small = {};
  small.max_steps = 200000;
  const std::string dag =
      "{% set ns = namespace(a=[1], b=[1], t=(1,)) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
      "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{% for i in range(30) %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}";
  for (const char* use : {"{{ ns.a }}", "{{ ns.a|tojson }}", "{{ ns.a == ns.b }}", "{{ ns.a < ns.b }}",
                          "{{ {ns.t: 1} }}", "{{ ns.t in {} }}"})
    expect_limit(dag + use, small, "evaluation steps");
  CHECK(jinja::compiled_template::parse(dag + "{{ ns.a == ns.a }}").render(jinja::value()) == "True");
  expect_limit("{{ ('a' * 2000000).split('a')|length }}", defaults, "more than");
  expect_limit("{% for i in range(100000) %}{{ ('x' * 60000000)[0] }}{% endfor %}", defaults, "evaluation steps");

  // Nesting deeper than the parser accepts is a syntax error, not a stack overflow.
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  auto error = error_of(deep);
  REQUIRE(error);
  CHECK(error->kind() == jinja::error_kind::syntax);
  CHECK(error->reason().find("nested too deeply") != std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i)
    deep_ifs += "{% if true %}";
  error = error_of(deep_ifs);
  REQUIRE(error);
  CHECK(error->reason().find("nested too deeply") != std::string::npos);
  // Long chains built in loops nest as deeply as they are long.
  for (const char* link : {" + 1", " ~ 'a'", " | trim", ".a", "[0]", " and x", " if x else 1"}) {
    std::string chain = "{{ x";
    for (int i = 0; i < 5000; ++i)
      chain += link;
    error = error_of(chain + " }}");
    REQUIRE_MESSAGE(error, std::string(link));
    CHECK(error->kind() == jinja::error_kind::syntax);
    CHECK(error->reason().find("nested too deeply") != std::string::npos);
  }
  // A long chain within the limits renders.
  std::string sum = "{{ 0";
  for (int i = 0; i < 100; ++i)
    sum += " + 1";
  CHECK(render(sum + " }}") == "100");
}

TEST_CASE("jinja: deeply nested and self-referencing values are handled without crashing [asan]") {
  // 100000 nested lists (recursive destruction would need tens of MB of stack): destroyed iteratively, printed
  // with a clear error.
  const std::string nest =
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  CHECK(render(nest + "{{ ns.x|length }}") == "1");
  auto error = error_of(nest + "{{ ns.x }}");
  REQUIRE(error);
  CHECK(error->reason() == "value nested too deeply to print");
  error = error_of(nest + "{{ ns.x|tojson }}");
  REQUIRE(error);
  CHECK(error->reason() == "value nested too deeply for tojson");
  error = error_of(nest + "{{ ns.x == ns.x[0] }}");
  REQUIRE(error);
  CHECK(error->reason() == "values nested too deeply to compare");
  // Reference cycles through lists, dicts, namespaces and macros; the render frees them (ASan checks for leaks).
  CHECK(render("{% set l = [] %}{% set _ = l.append(l) %}{{ l|length }}") == "1");
  CHECK(render("{% set d = {} %}{% set _ = d.update(me=d) %}{{ d.me.me|length }}") == "1");
  CHECK(render("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns.self.self is defined }}") == "True");
  CHECK(render("{% macro m() %}{{ m is defined }}{% endmacro %}{% set ns = namespace(f=m) %}{{ ns.f() }}") == "True");
}

TEST_CASE("jinja: 100,000 variables are set and looked up in linear time, a later one shadowing a builtin") {
  // Chat requests' chat_template_kwargs become template variables: the globals frame used to scan every name per
  // assignment (24 s for 100,000 of them).
  jinja::value vars = jinja::value::dict();
  auto& d = vars.mutable_dict();
  for (int i = 0; i < 100000; ++i) {
    std::string name = std::to_string(i);
    name.insert(0, 1, 'k');
    d.set(jinja::value(std::move(name)), jinja::value(int64_t{i}));
  }
  d.set(jinja::value("range"), jinja::value("shadowed"));  // a builtin global, overridden by the caller's variable
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out =
      jinja::compiled_template::parse("{{ k0 }} {{ k99999 }} {{ k500 + k1 }} {{ range }} {{ missing is defined }}")
          .render(vars);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out == "0 99999 501 shadowed False");
  MESSAGE("render with 100,000 variables: " << seconds << " s");
  CHECK(seconds < 1.0);
}
