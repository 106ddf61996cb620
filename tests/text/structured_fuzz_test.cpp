// Robustness of the structured-output compilers against broken and hostile input: regexes and JSON schemas from the
// tests, mutated (truncated, spliced with regex syntax, deep nesting, stacked quantifiers, huge counts, odd bytes),
// plus random byte strings. Every input must end in a compiled automaton or a regex_error / schema_error, never a
// crash, a hang or another exception. Tagged [asan]: CI also runs it under AddressSanitizer and
// UndefinedBehaviorSanitizer (with leak checks), where the recursions at the largest depth setting must fit too.
#include "text/structured/byte_dfa.hpp"
#include "text/structured/json_schema.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

using namespace actorllm::text::structured;

namespace {

using clock_type = std::chrono::steady_clock;

const std::vector<std::string> regex_seeds = {
    "abc",
    "a|bc",
    "a*b+c?",
    "[a-c]{2,3}",
    R"(\d{3}-\d{4})",
    "[^0-9]+",
    R"(^(?:yes|no)$)",
    R"(\w+@\w+\.com)",
    "(ab)*",
    R"([A-Z][a-z]{1,8})",
    R"((?:[ !#-\[\]-~]|\\["\\/bfnrt]){0,32})",
    R"(-?(?:0|[1-9][0-9]{0,9})(?:\.[0-9]{1,6})?(?:[eE][+-]?[0-9]{1,2})?)",
    R"(\x41\n\t[\x00-\x1f]\s\S\W)",
    "(.{0,100}){0,100}",
    "a{1000}{1000}",
};

const std::vector<std::string> schema_seeds = {
    R"({"type":"object","properties":{"name":{"type":"string","pattern":"^[A-Z][a-z]+$"},"age":{"type":"integer","minimum":0},"score":{"type":"number"},"tags":{"type":"array","items":{"enum":["a","b"]},"minItems":1,"maxItems":3},"pet":{"type":"object","properties":{"kind":{"const":"cat"},"ok":{"type":"boolean"}},"required":["kind"]},"note":{"type":["string","null"],"maxLength":5}},"required":["name","age"]})",
    R"({"$defs":{"p":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}}}},"type":"array","items":{"anyOf":[{"$ref":"#/$defs/p"},{"type":"null"}]},"maxItems":4})",
    R"({"type":"array","minItems":1,"maxItems":3,"items":{"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"parameters":{"type":"object","properties":{"q":{"type":"string","maxLength":20}}}},"required":["name","parameters"]}]}})",
    R"({"oneOf":[{"type":"string","minLength":2,"maxLength":4},{"allOf":[{"type":"boolean"}]}]})",
    R"({"enum":[1,"two",null,[3],{"four":4}]})",
    R"({"type":"object"})",
};

const std::vector<std::string> regex_fragments = {
    "(",   ")",     "(?:",   "(?=",    "|",    "*",        "+",
    "?",   "{",     "}",     "{1000}", "{0,",  "{0,1000}", "{2}",
    "*?",  "++",    "[",     "]",      "[^",   "-",        "\\",
    "\\x", "\\d",   "\\1",   ".",      "^",    "$",        ".{0,100}",
    "a**", "(a|)*", "[z-a]", "\\p{L}", "\xff", "\xc3(",    std::string(1, '\0')};

const std::vector<std::string> schema_fragments = {"{",
                                                   "}",
                                                   "[",
                                                   "]",
                                                   ",",
                                                   ":",
                                                   "\"",
                                                   R"("type")",
                                                   R"("object")",
                                                   R"("array")",
                                                   R"("items":)",
                                                   R"("anyOf":[)",
                                                   R"("$ref":"#/$defs/p")",
                                                   R"("$ref":"#")",
                                                   R"("maxItems":100)",
                                                   R"("maxLength":1000)",
                                                   R"("pattern":"(a*)*")",
                                                   R"("properties":{)",
                                                   R"("enum":[)",
                                                   "null",
                                                   "1e999",
                                                   "-1"};

std::size_t pick(std::mt19937& rng, std::size_t n) {
  return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
}

std::string mutate(std::string s, const std::vector<std::string>& fragments, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(pick(rng, 3));
  for (int i = 0; i < edits; ++i) {
    switch (pick(rng, 7)) {
      case 0:
        s.resize(pick(rng, s.size() + 1));
        break;
      case 1:
        s.erase(pick(rng, s.size() + 1), pick(rng, 16));
        break;
      case 2:
      case 3:
        s.insert(pick(rng, s.size() + 1), fragments[pick(rng, fragments.size())]);
        break;
      case 4: {  // duplicate a chunk: nesting and repetition grow
        const std::size_t at = pick(rng, s.size() + 1);
        const std::string chunk = s.substr(at, pick(rng, 64));
        s.insert(pick(rng, s.size() + 1), chunk);
        break;
      }
      case 5:
        if (!s.empty())
          s[pick(rng, s.size())] = static_cast<char>(pick(rng, 256));
        break;
      default: {  // wrap a chunk in a group, quantified
        const std::size_t a = pick(rng, s.size() + 1), len = pick(rng, s.size() - a + 1);
        s = s.substr(0, a) + "(" + s.substr(a, len) + ")" + fragments[pick(rng, fragments.size())] + s.substr(a + len);
        break;
      }
    }
  }
  return s;
}

// Edits that keep a schema valid JSON (so the converter, not only the JSON parser, sees them): wrapping it in
// combinators and containers that copy it, $defs used twice, other numbers, regex syntax inside a pattern.
std::string mutate_schema(std::string s, std::mt19937& rng) {
  if (pick(rng, 3) == 0)
    return mutate(std::move(s), schema_fragments, rng);
  const int edits = 1 + static_cast<int>(pick(rng, 2));
  for (int i = 0; i < edits; ++i) {
    switch (pick(rng, 6)) {
      case 0:
        s = R"({"anyOf":[)" + s + "," + s + "]}";
        break;
      case 1: {
        const char* counts[] = {"0", "1", "6", "100", "101"};
        s = R"({"type":"array","items":)" + s + R"(,"maxItems":)" + counts[pick(rng, 5)] + "}";
        break;
      }
      case 2:
        s = R"({"type":"object","properties":{"p":)" + s + R"(,"q":)" + s + "}}";
        break;
      case 3:
        s = R"({"$defs":{"d":)" + s + R"(},"anyOf":[{"$ref":"#/$defs/d"},{"$ref":"#/$defs/d"}]})";
        break;
      case 4: {  // another number in place of one
        const std::size_t at = s.find_first_of("0123456789", pick(rng, s.size()));
        if (at != std::string::npos) {
          const char* numbers[] = {"0", "1", "1000", "1001", "99999999999", "2.5"};
          s.replace(at, s.find_first_not_of("0123456789", at) - at, numbers[pick(rng, 6)]);
        }
        break;
      }
      default: {  // regex syntax inside a pattern (escaped for JSON)
        const std::size_t at = s.find(R"("pattern":")");
        if (at != std::string::npos) {
          std::string frag;
          for (char c : regex_fragments[pick(rng, regex_fragments.size())])
            if (c == '"' || c == '\\')
              frag += std::string{"\\"} + c;
            else if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x80)
              frag += c;
          s.insert(at + 11, frag);
        }
        break;
      }
    }
    if (s.size() > 6000)  // keep the fuzz fast: big ones are the limits tests' business
      break;
  }
  return s;
}

struct counts {
  int compiled = 0, refused = 0;
};

// Small limits keep each compilation short, so the case stays within seconds under ASan.
const structured_limits fuzz_limits{.max_bytes = 8192, .max_depth = 64, .max_states = 6000, .compile_budget = 2000000};

void compile_regex(const std::string& pattern, counts& c, const structured_limits& limits = fuzz_limits) {
  try {
    const byte_dfa d = byte_dfa::compile(pattern, limits);
    CHECK(d.n_states() >= 1);
    (void)d.matches(pattern);
    ++c.compiled;
  } catch (const regex_error& e) {
    CHECK(std::string{e.what()}.starts_with("regex: "));
    ++c.refused;
  }
}

void compile_schema(const std::string& schema, counts& c) {
  try {
    const std::string pattern = json_schema_pattern(schema, fuzz_limits);
    compile_regex(pattern, c);
  } catch (const schema_error& e) {
    CHECK(e.where().starts_with("#"));
    ++c.refused;
  }
}

}  // namespace

TEST_CASE("structured outputs fuzz: mutated and random regexes compile or fail with regex_error [asan]") {
  std::mt19937 rng(20261128);
  counts c;
  for (const std::string& s : regex_seeds)
    compile_regex(s, c);
  // Hostile shapes at and past the limits.
  for (const std::string& s :
       std::vector<std::string>{std::string(20000, '(') + "a" + std::string(20000, ')'), "a" + std::string(100000, '*'),
                                std::string(3000, '[') + "]", std::string(5000, '|'),
                                "(" + std::string(4000, '|') + ")*", "(?:a|b|)" + std::string(2000, '+'),
                                std::string(100000, '\\'), std::string{"((((((((((((a{1000}){1000})))))))))))"}})
    compile_regex(s, c);
  const auto deadline = clock_type::now() + std::chrono::seconds(3);
  int n = 0;
  for (; n < 20000 && clock_type::now() < deadline; ++n) {
    std::string s;
    if (n % 5 == 4) {  // random bytes, biased to regex syntax
      const std::size_t len = pick(rng, 64);
      for (std::size_t i = 0; i < len; ++i)
        s += pick(rng, 2) ? regex_fragments[pick(rng, regex_fragments.size())]
                          : std::string(1, char('a' + pick(rng, 3)));
    } else {
      s = mutate(regex_seeds[static_cast<std::size_t>(n) % regex_seeds.size()], regex_fragments, rng);
    }
    INFO("regex mutant " << n);
    compile_regex(s, c);
  }
  MESSAGE(n << " regex mutants: " << c.compiled << " compiled, " << c.refused << " refused");
  CHECK(c.compiled > n / 10);
  CHECK(c.refused > n / 10);
}

TEST_CASE("structured outputs fuzz: mutated schemas become patterns or fail with schema_error [asan]") {
  std::mt19937 rng(11282026);
  counts c;
  for (const std::string& s : schema_seeds)
    compile_schema(s, c);
  CHECK(c.refused == 0);
  const auto deadline = clock_type::now() + std::chrono::seconds(3);
  int n = 0;
  for (; n < 10000 && clock_type::now() < deadline; ++n) {
    INFO("schema mutant " << n);
    compile_schema(mutate_schema(schema_seeds[static_cast<std::size_t>(n) % schema_seeds.size()], rng), c);
  }
  MESSAGE(n << " schema mutants: " << c.compiled << " compiled, " << c.refused << " refused");
  CHECK(c.compiled > n / 20);
}

TEST_CASE("structured outputs: the largest depth setting fits the stack in every stage [asan]") {
  // --max-structured-output-depth accepts up to max_structured_depth_setting: the parser, the NFA build and the
  // tree's destructor recurse that deep (three tree levels per nesting level at most), also under ASan.
  const structured_limits deep{.max_depth = max_structured_depth_setting};
  const std::size_t units = max_structured_depth_setting / 4;  // four levels each: two groups, two quantifiers
  std::string p;
  for (std::size_t i = 0; i < units; ++i)
    p += "(?:x|(?:y";
  p += "z";
  for (std::size_t i = 0; i < units; ++i)
    p += ")?)*";
  const byte_dfa d = byte_dfa::compile(p, deep);
  CHECK(d.matches(""));
  CHECK(d.matches(std::string(units, 'y') + "z"));
  CHECK_FALSE(d.matches("z"));
  CHECK_THROWS_AS(byte_dfa::compile("(?:" + p + ")*", deep), regex_error);  // one level more
  // A schema as deep as its JSON parser allows: anyOf and properties alternating, 500 levels.
  std::string schema;
  const std::size_t levels = 250;
  for (std::size_t i = 0; i < levels; ++i)
    schema += R"({"anyOf":[{"type":"object","properties":{"a":)";
  schema += R"({"type":"integer"})";
  for (std::size_t i = 0; i < levels; ++i)
    schema += "}}]}";
  const std::string pattern = json_schema_pattern(schema, deep);
  std::string text;
  for (std::size_t i = 0; i < levels; ++i)
    text += R"({"a":)";
  text += "7" + std::string(levels, '}');
  CHECK(byte_dfa::compile(pattern, deep).matches(text));
}
