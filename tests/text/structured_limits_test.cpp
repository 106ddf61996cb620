// Structured outputs under hostile input (issue 30, items 1, 5 and 8): every regex or schema that used to crash the
// parser's stack, stall the compiler for minutes or grow without bound is refused quickly with an error naming the
// limit and its `serve` flag, input just under each limit still compiles, and the cache of compiled constraints
// stays bounded while keeping alive what requests hold.
#include "text/structured/byte_dfa.hpp"
#include "text/structured/constraint_cache.hpp"
#include "text/structured/json_schema.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

using namespace actorllm::text::structured;

namespace {

using clock_type = std::chrono::steady_clock;

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (std::size_t i = 0; i < n; ++i)
    out += s;
  return out;
}

std::string nested_groups(std::size_t n, std::string_view open = "(") { return repeat(open, n) + "a" + repeat(")", n); }

// The message of the error `f` throws (E), checking that it came within `max_seconds`; "" when nothing is thrown.
template <class E>
std::string refusal(const std::function<void()>& f, double max_seconds = 1.0) {
  const auto t0 = clock_type::now();
  std::string what;
  try {
    f();
  } catch (const E& e) {
    what = e.what();
  }
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  CHECK_MESSAGE(seconds < max_seconds, "took " << seconds << " s");
  return what;
}

std::string regex_refusal(const std::string& pattern, const structured_limits& limits = {}) {
  return refusal<regex_error>([&] { (void)byte_dfa::compile(pattern, limits); });
}

std::string schema_refusal(const std::string& schema, const structured_limits& limits = {}) {
  return refusal<schema_error>([&] { (void)json_schema_pattern(schema, limits); });
}

// A tool_choice "required" schema as net/openai/tool_calls.cpp builds it: `n` tools of a few properties each.
std::string tools_schema(int n, int max_calls) {
  std::string any_of;
  for (int i = 0; i < n; ++i) {
    if (!any_of.empty())
      any_of += ',';
    any_of +=
        R"({"type":"object","properties":{"name":{"const":"tool_)" + std::to_string(i) +
        R"("},"parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["city"]}},"required":["name","parameters"]})";
  }
  return R"({"type":"array","minItems":1,"maxItems":)" + std::to_string(max_calls) + R"(,"items":{"anyOf":[)" + any_of +
         "]}}";
}

}  // namespace

TEST_CASE("regex nesting is bounded at parse time: deep groups are refused, stacked quantifiers collapse") {
  // The issue's crashes: 20,000 nested groups (40 KB) and `a` followed by 100,000 `*` overflowed the stack.
  for (const std::string& p : {nested_groups(20000), nested_groups(20000, "(?:"), nested_groups(65)}) {
    CAPTURE(p.size());
    const std::string what = regex_refusal(p);
    CHECK(what.find("--max-structured-output-depth (64)") != std::string::npos);
    CHECK(what.size() < 400);  // the message quotes the pattern around the offset, not all of it
  }
  CHECK(byte_dfa::compile(nested_groups(64)).matches("a"));
  CHECK(byte_dfa::compile(nested_groups(64, "(?:")).matches("a"));

  // Stacked quantifiers that keep the language collapse into one repeat: no chain, no depth.
  const byte_dfa stars = byte_dfa::compile("a" + std::string(100000, '*'));
  CHECK(stars.matches(""));
  CHECK(stars.matches("aaaa"));
  CHECK_FALSE(stars.matches("b"));
  const byte_dfa plus_opt = byte_dfa::compile("(?:a+)?b");  // = a*b
  CHECK(plus_opt.matches("b"));
  CHECK(plus_opt.matches("aab"));
  const byte_dfa thrice = byte_dfa::compile("(?:a{2}){3}");
  CHECK(thrice.matches("aaaaaa"));
  CHECK_FALSE(thrice.matches("aaaa"));
  // Ones that would change it stay nested: (a{2})* is even counts only.
  const byte_dfa even = byte_dfa::compile("(?:a{2})*");
  CHECK(even.matches("aaaa"));
  CHECK_FALSE(even.matches("aaa"));
  const byte_dfa gaps = byte_dfa::compile("a{3}{2,3}");  // 6 or 9
  CHECK(gaps.matches(std::string(6, 'a')));
  CHECK(gaps.matches(std::string(9, 'a')));
  CHECK_FALSE(gaps.matches(std::string(7, 'a')));
  // Stacked quantifiers that cannot collapse count as levels.
  CHECK(regex_refusal("a" + repeat("{2,3}", 2000)).find("--max-structured-output-depth") != std::string::npos);

  // The same limits through a JSON schema's pattern keyword.
  const std::string deep_pattern = R"({"type":"string","pattern":")" + nested_groups(20000) + R"("})";
  std::string where;
  const std::string what = refusal<schema_error>([&] {
    try {
      (void)json_schema_pattern(deep_pattern);
    } catch (const schema_error& e) {
      where = e.where();
      throw;
    }
  });
  CHECK(where == "#/pattern");
  CHECK(what.find("--max-structured-output-depth") != std::string::npos);
}

TEST_CASE("regex compilation is bounded in work, NFA size, states and memory, and says which limit it hit") {
  // The issue's stall: (.{0,100}){0,100} kept a preprocessing thread busy for minutes.
  const std::string what = regex_refusal("(.{0,100}){0,100}");
  CHECK(what.find("--structured-output-compile-budget") != std::string::npos);
  // Counted repeats that multiply past the NFA's size stop while it is built.
  CHECK(regex_refusal("a{1000}{1000}{1000}").find("8 x --max-structured-output-states") != std::string::npos);
  CHECK(regex_refusal("(?:(?:[a-z]{1000}){1000}){1000}").find("NFA states") != std::string::npos);
  // The state limit: exactly what a pattern needs compiles, one less does not.
  const std::string p = R"([a-c]{2,40}\d{1,5})";
  const std::size_t needed = byte_dfa::compile(p).n_states();
  CHECK(byte_dfa::compile(p, {.max_states = needed}).n_states() == needed);
  CHECK(regex_refusal(p, {.max_states = needed - 1})
            .find("--max-structured-output-states (" + std::to_string(needed - 1) + ")") != std::string::npos);
  // The budget: a small one refuses what the default accepts.
  CHECK(regex_refusal(p, {.compile_budget = 100}).find("--structured-output-compile-budget (100 units)") !=
        std::string::npos);
  // The size of a regex a request gives.
  check_regex(std::string(65536, 'a'));
  CHECK(refusal<regex_error>([] {
          check_regex(std::string(65537, 'a'));
        }).find("65537 bytes, more than --max-structured-output-bytes (65536)") != std::string::npos);
  CHECK(refusal<regex_error>([] { check_regex(nested_groups(100)); }).find("--max-structured-output-depth") !=
        std::string::npos);
}

TEST_CASE("json schemas are bounded in size, nesting and the pattern they generate, while it is generated") {
  const structured_limits defaults;
  // The text itself.
  const std::string big = R"({"type":"string","description":")" + std::string(70000, 'x') + R"("})";
  CHECK(schema_refusal(big).find("more than --max-structured-output-bytes (65536)") != std::string::npos);
  // Nesting: objects in objects, one level under the limit passes, one over does not.
  auto nested_objects = [](std::size_t n) {
    return repeat(R"({"type":"object","properties":{"a":)", n) + R"({"type":"integer"})" + repeat("}}", n);
  };
  CHECK(byte_dfa::compile(json_schema_pattern(nested_objects(defaults.max_depth)))
            .matches(repeat(R"({"a":)", defaults.max_depth) + "1" + repeat("}", defaults.max_depth)));
  CHECK(schema_refusal(nested_objects(defaults.max_depth + 1)).find("--max-structured-output-depth (64)") !=
        std::string::npos);
  // A recursive $ref still ends at the depth limit.
  CHECK(schema_refusal(
            R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})")
            .find("recursive $ref") != std::string::npos);

  // Schemas whose pattern doubles per level: arrays repeating their items, anyOf of the same $ref twice, a $ref used
  // twice per object. 30 levels would be gigabytes; each is refused while generating.
  std::string arrays = R"({"$defs":{"d0":{"type":"string"})";
  std::string any_ofs = arrays, objects = arrays;
  for (int i = 1; i <= 30; ++i) {
    const std::string prev = "#/$defs/d" + std::to_string(i - 1), name = "\"d" + std::to_string(i) + "\"";
    arrays += "," + name + R"(:{"type":"array","items":{"$ref":")" + prev + R"("},"maxItems":100})";
    any_ofs += "," + name + R"(:{"anyOf":[{"$ref":")" + prev + R"("},{"$ref":")" + prev + R"("}]})";
    objects += "," + name + R"(:{"type":"object","properties":{"x":{"$ref":")" + prev + R"("},"y":{"$ref":")" + prev +
               R"("}}})";
  }
  for (std::string* s : {&arrays, &any_ofs, &objects}) {
    *s += R"(},"$ref":"#/$defs/d30"})";
    CHECK(schema_refusal(*s).find("16 x --max-structured-output-bytes") != std::string::npos);
  }

  // Choice lists.
  std::vector<std::string> choices(2000, std::string(40, 'c'));
  CHECK(refusal<schema_error>([&] { (void)choice_pattern(choices); }).find("--max-structured-output-bytes") !=
        std::string::npos);
  choices.resize(1000);
  (void)choice_pattern(choices);
}

TEST_CASE("tool_choice required over 300 tools compiles in well under a second") {
  // The issue's 16 s: the subset construction recomputed closures per byte with an O(NFA) scratch array each time
  // and copied vector keys into a map; now it works per byte class with stamped marks and a hash index.
  // 300 tools of this size are 75 KB of schema: past the default --max-structured-output-bytes, so raised here.
  const structured_limits limits{.max_bytes = 1 << 17};
  const std::string schema = tools_schema(300, 1);
  const auto t0 = clock_type::now();
  const byte_dfa d = byte_dfa::compile(json_schema_pattern(schema, limits), limits);
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  MESSAGE("300 tools: " << d.n_states() << " states, " << d.memory_bytes() / 1024 << " KiB, " << seconds * 1000
                        << " ms");
  CHECK(seconds < 1.0);
  CHECK(d.matches(R"([{"name":"tool_299","parameters":{"city":"Oslo","unit":"celsius","days":3}}])"));
  CHECK_FALSE(d.matches(R"([{"name":"tool_300","parameters":{"city":"Oslo","unit":"celsius","days":3}}])"));
  // With parallel calls the alternation of 300 tools is copied three times: past the NFA limit, refused at once.
  CHECK(regex_refusal(json_schema_pattern(tools_schema(300, 3), limits), limits).find("NFA states") !=
        std::string::npos);
}

TEST_CASE("constraint_cache: bounded, least recently used first, and live constraints are shared") {
  const auto vocab = vocab_index::from_bytes({"a", "b", "ab", "c"}, {});
  const structured_limits limits;
  const std::size_t one = constraint_cache{1 << 30, 10}.get("v", "a", vocab, limits)->memory_bytes();
  constraint_cache cache{3 * one + 3 * 16, 100};  // about three small constraints
  auto a = cache.get("v", "a", vocab, limits);
  for (const char* p : {"b", "ab", "c", "a|b", "(?:ab)+", "c*"})
    (void)cache.get("v", p, vocab, limits);
  CHECK(cache.size() <= 4);
  CHECK(cache.bytes() <= 3 * one + 3 * 16 + one);
  // "a" was evicted long ago, but a request still holds it: the same constraint comes back.
  CHECK(cache.get("v", "a", vocab, limits) == a);
  // Once nobody holds it and newer ones push it out, its memory is gone.
  const std::weak_ptr<const token_constraint> was_a = a;
  a.reset();
  for (const char* p : {"b", "ab", "c", "a|b"})
    (void)cache.get("v", p, vocab, limits);
  CHECK(was_a.expired());
  CHECK(cache.get("v", "b", vocab, limits) == cache.get("v", "b", vocab, limits));
  // The entry count bounds it too.
  constraint_cache few{1 << 30, 2};
  for (const char* p : {"a", "b", "c"})
    (void)few.get("v", p, vocab, limits);
  CHECK(few.size() == 2);
  // A pattern refused by the limits leaves nothing behind.
  CHECK_THROWS_AS(few.get("v", "(.{0,100}){0,100}", vocab, limits), regex_error);
  CHECK(few.size() == 2);
}
