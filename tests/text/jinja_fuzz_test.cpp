// Robustness of the Jinja engine against broken and hostile templates: real chat templates truncated, spliced and
// sprinkled with template syntax, plus constructs built to exhaust the stack, memory or time. Every input must end
// in a rendered string or a template_error, never a crash, a hang or another exception. Tagged [asan]: CI also
// runs it under AddressSanitizer and UndefinedBehaviorSanitizer (with leak checks).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_paths.hpp"
#include "text/jinja/json.hpp"
#include "text/jinja/template.hpp"

namespace {

namespace jinja = actorllm::text::jinja;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Variables that let most of a chat template's branches run: a system prompt, turns with tool calls and
// reasoning, a tool result, tools.
const char* const variables_json = R"({
  "messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <b>there</b>\n"},
    {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello", "reasoning_content": null,
     "tool_calls": [{"id": "call12345", "type": "function", "function": {"name": "f", "arguments": {"x": [1, 2.5]}}}]},
    {"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "call12345"},
    {"role": "user", "content": "Thanks"}
  ],
  "tools": [{"type": "function", "function": {"name": "f", "description": "d",
             "parameters": {"type": "object", "properties": {"x": {"type": "array"}}}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "date_string": "1 Jan 2025",
  "enable_thinking": false
})";

// Fragments of template syntax that mutations splice in.
const std::vector<std::string> fragments = {"{%",
                                            "%}",
                                            "{{",
                                            "}}",
                                            "{#",
                                            "#}",
                                            "{%-",
                                            "-%}",
                                            "{{-",
                                            "-}}",
                                            "{% endfor %}",
                                            "{% endif %}",
                                            "{% else %}",
                                            "{% for x in messages %}",
                                            "{% if x %}",
                                            "{% set ns.x = 1 %}",
                                            "{% macro m(a) %}",
                                            "{% endmacro %}",
                                            "{% raw %}",
                                            "(",
                                            ")",
                                            "[",
                                            "]",
                                            "{",
                                            "}",
                                            "'",
                                            "\"",
                                            "\\",
                                            "|",
                                            "| tojson(indent=2)",
                                            "|length",
                                            " is defined",
                                            " not ",
                                            " in ",
                                            "~",
                                            "**",
                                            "//",
                                            "%",
                                            ".",
                                            ",",
                                            ":",
                                            "=",
                                            "==",
                                            "loop.",
                                            "ns.",
                                            "[::-1]",
                                            "[1:]",
                                            "\n",
                                            " ",
                                            "\t",
                                            "\r",
                                            "\xC3\xA9",
                                            "\xE4\xB8\xAD",
                                            "\xFF",
                                            "\x80",
                                            std::string(1, '\0'),
                                            "1e999",
                                            "99999999999999999999",
                                            "-9223372036854775808",
                                            "raise_exception('x')",
                                            "range(100000)",
                                            "namespace(",
                                            "caller()",
                                            "{% break %}",
                                            "{% continue %}",
                                            "{% call m(1) %}",
                                            "{% endcall %}",
                                            "{% filter upper %}",
                                            "{% endfilter %}",
                                            "{% generation %}",
                                            "{% endgeneration %}"};

// Templates written to break an engine: runaway recursion, huge outputs, cycles, deep nesting.
const std::vector<std::string> hostile = {
    "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(0) }}",
    "{% macro f() %}{% call f() %}{% endcall %}{% endmacro %}{{ f() }}",
    "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
    "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
    "{{ 'x' * 9223372036854775807 }}",
    "{{ [0] * 9223372036854775807 }}",
    "{{ range(-9223372036854775807, 9223372036854775807)|list }}",
    "{{ 9223372036854775807 + 1 }}",
    "{{ -9223372036854775807 - 2 }}",
    "{{ 3 ** 99 }}",
    "{{ (-9223372036854775807 - 1) // -1 }}",
    "{{ (-9223372036854775807 - 1)|abs }}",
    "{{ [1, 2, 3][::-9223372036854775807] }}",
    "{{ 'abc'[-9223372036854775807:9223372036854775807:9223372036854775807] }}",
    "{{ 1e308 * 10 }}{{ (1e308 * 10)|int }}{{ (0.0 * 1e309)|round }}{{ '%d' % 1e300 }}",
    "{{ '%999999999d' % 1 }}",
    "{{ '{:99999999}'.format(1) }}",
    "{{ 'x'.center(9223372036854775807) }}",
    "{{ 'a'|indent(9223372036854775807) }}",
    "{{ 'a'|truncate(-5) }}",
    "{{ [1]|batch(0) }}",
    "{{ 'x'.zfill(9223372036854775807) }}",
    "{{ 'ab'.replace('', 'x' * 1000000) }}",
    "{% set l = [] %}{% for i in range(100) %}{% set _ = l.append(l) %}{% endfor %}{{ l|length }}{{ l }}",
    "{% set d = {} %}{% set _ = d.update(a=d) %}{{ d|tojson }}",
    "{% set ns = namespace() %}{% set ns.ns = ns %}{{ ns }}{{ ns == ns }}",
    "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|string }}",
    "{% set ns = namespace(x=()) %}{% for i in range(1000) %}{% set ns.x = (ns.x,) %}{% endfor %}{{ {ns.x: 1} }}",
    "{% set ns = namespace(d={}) %}{% for i in range(1000) %}{% set ns.d = {'k': ns.d} %}{% endfor %}{{ ns.d == ns.d "
    "}}",
    "{{ " + std::string(100000, '(') + " }}",
    "{{ " + std::string(100000, '[') + " }}",
    std::string(100000, '{'),
    "{{ " + std::string(50000, '-') + "1 }}",
    "{{ " + std::string(50000, '~') + " }}",
    "{% if " + std::string(30000, '(') + "x %}",
    [] {
      std::string s;
      for (int i = 0; i < 400; ++i)
        s += "{% for x in [1] %}";
      return s;
    }(),
    [] {
      std::string s = "{{ x";
      for (int i = 0; i < 20000; ++i)
        s += " | trim";
      return s + " }}";
    }(),
    [] {
      std::string s = "{{ 1";
      for (int i = 0; i < 20000; ++i)
        s += " + 1";
      return s + " }}";
    }(),
    [] {
      std::string s = "{{ x";
      for (int i = 0; i < 20000; ++i)
        s += ".a";
      return s + " }}";
    }(),
};

struct outcome_counts {
  int rendered = 0;
  int syntax_errors = 0;
  int render_errors = 0;
};

// Renders or fails with template_error; anything else fails the test.
void exercise(const std::string& source, const jinja::value& variables, const jinja::render_options& options,
              outcome_counts& counts) {
  try {
    jinja::compiled_template tmpl = jinja::compiled_template::parse(source);
    tmpl.render(variables, options);
    ++counts.rendered;
  } catch (const jinja::template_error& e) {
    CHECK(e.line() >= 1);
    ++(e.kind() == jinja::error_kind::syntax ? counts.syntax_errors : counts.render_errors);
  }
}

std::string mutate(std::string s, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  int edits = pick(3) == 0 ? 2 : 1;
  for (int i = 0; i < edits; ++i) {
    switch (pick(6)) {
      case 0:
        s.resize(pick(s.size() + 1));
        break;   // truncate
      case 1: {  // delete a range
        size_t at = pick(s.size() + 1);
        s.erase(at, pick(64));
        break;
      }
      case 2:
        s.insert(pick(s.size() + 1), fragments[pick(fragments.size())]);
        break;
      case 3: {  // duplicate a chunk elsewhere
        size_t at = pick(s.size() + 1);
        std::string chunk = s.substr(at, pick(200));
        s.insert(pick(s.size() + 1), chunk);
        break;
      }
      case 4:
        if (!s.empty())
          s[pick(s.size())] = static_cast<char>(pick(256));  // flip a byte
        break;
      default: {  // swap two chunks
        size_t a = pick(s.size() + 1);
        size_t b = pick(s.size() + 1);
        if (a > b)
          std::swap(a, b);
        size_t len = std::min(pick(100), b - a);
        std::string first = s.substr(a, len);
        std::string second = s.substr(b, len);
        s.replace(b, second.size(), first);
        s.replace(a, first.size(), second);
      }
    }
  }
  return s;
}

}  // namespace

TEST_CASE("jinja: garbled and hostile templates end in a render or a template_error [asan]") {
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(actorllm::test::model_dir("chat-templates")))
    if (entry.path().extension() == ".jinja")
      seeds.push_back(read_file(entry.path()));
  REQUIRE(seeds.size() >= 8);
  seeds.push_back(
      "{% macro m(a, b=2) %}{{ a ~ b }}{{ caller() if caller is defined }}{% endmacro %}{% call(x) m(1) %}[{{ x }}]"
      "{% endcall %}{% set ns = namespace(i=0) %}{% for k, v in {'a': 1}.items() if v %}{{ loop.index }}{{ k|upper }}"
      "{% set ns.i = ns.i + 1 %}{% else %}none{% endfor %}{% filter trim %} {{ '%s' % ns.i }} {% endfilter %}"
      "{% raw %}{{ raw }}{% endraw %}{{ [1, 2, 3]|select('odd')|map('string')|join(',') }}{# note #}");

  const jinja::value variables = jinja::parse_json(variables_json);
  // Small budgets keep each render short, so the whole case stays within seconds under ASan.
  jinja::render_options options;
  options.limits.max_steps = 20000;
  options.limits.max_output_bytes = size_t{1} << 16;
  options.limits.max_string_bytes = size_t{1} << 16;
  options.limits.max_items = size_t{1} << 14;

  outcome_counts seed_counts;
  for (const auto& seed : seeds)
    exercise(seed, variables, options, seed_counts);
  // The seeds parse; most render (Gemma rejects this conversation's system message with raise_exception).
  CHECK(seed_counts.syntax_errors == 0);
  CHECK(seed_counts.rendered >= static_cast<int>(seeds.size()) - 2);

  outcome_counts hostile_counts;
  for (const auto& source : hostile) {
    INFO(source.substr(0, 120));
    exercise(source, variables, options, hostile_counts);
  }

  std::mt19937 rng(20261122);
  constexpr int mutants = 8000;
  outcome_counts counts;
  for (int i = 0; i < mutants; ++i) {
    const std::string& seed = seeds[static_cast<size_t>(i) % seeds.size()];
    std::string source = mutate(seed, rng);
    INFO("mutant " << i << " of seed " << i % seeds.size());
    exercise(source, variables, options, counts);
  }
  MESSAGE("mutants: " << counts.rendered << " rendered, " << counts.syntax_errors << " syntax errors, "
                      << counts.render_errors << " render errors");
  // The mutations must leave enough templates intact for the renderer, not only the parser, to be exercised.
  CHECK(counts.rendered > mutants / 10);
  CHECK(counts.render_errors > 0);
}

TEST_CASE("jinja: hostile templates fail with limit errors under the default limits [asan]") {
  // With the default limits too, each of these stops with an error instead of exhausting the machine.
  const jinja::value variables = jinja::parse_json(variables_json);
  for (const char* source : {
           "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(0) }}",
           "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
           "{{ range(9223372036854775807)|length }}",
       }) {
    INFO(std::string(source));
    try {
      jinja::compiled_template::parse(source).render(variables);
      FAIL("expected a limit error");
    } catch (const jinja::template_error& e) {
      CHECK(e.kind() == jinja::error_kind::limit);
    }
  }
}
