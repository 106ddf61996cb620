// Structured outputs: regexes to byte automata, JSON schemas and choices to patterns, and token masks over a real
// tokenizer (stories260K's) whose every allowed path ends in a whole match.
#include "text/structured/byte_dfa.hpp"
#include "text/structured/json_schema.hpp"
#include "text/structured/token_constraint.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "support/test_paths.hpp"

using namespace actorllm::text::structured;

TEST_CASE("byte_dfa: the regex subset matches what it should and nothing else") {
  struct c {
    std::string pattern;
    std::vector<std::string> yes, no;
  };
  const c cases[] = {
      {"abc", {"abc"}, {"ab", "abcd", ""}},
      {"a|bc", {"a", "bc"}, {"b", "abc"}},
      {"a*b+c?", {"b", "aabbc", "bbb"}, {"", "ac", "abcc"}},
      {"[a-c]{2,3}", {"ab", "cca"}, {"a", "abca", "ad"}},
      {R"(\d{3}-\d{4})", {"555-1234"}, {"5551234", "55-1234"}},
      {"[^0-9]+", {"abc", "x y"}, {"a1", "", "a\"b"}},
      {R"(^(?:yes|no)$)", {"yes", "no"}, {"yesno", "y"}},
      {R"(\w+@\w+\.com)", {"a@b.com"}, {"a@b.org", "@b.com"}},
      {"x{2}", {"xx"}, {"x", "xxx"}},
      {"(ab)*", {"", "ab", "abab"}, {"a", "aba"}},
  };
  for (const auto& tc : cases) {
    CAPTURE(tc.pattern);
    const byte_dfa d = byte_dfa::compile(tc.pattern);
    for (const auto& s : tc.yes)
      CHECK_MESSAGE(d.matches(s), s);
    for (const auto& s : tc.no)
      CHECK_MESSAGE(!d.matches(s), s);
  }
  for (const char* bad : {"(a", "a)", "*a", R"(\1)", "(?=a)", "[a", "a{3,1}", R"(\p{L})"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(byte_dfa::compile(bad), regex_error);
  }
}

TEST_CASE("json schemas become patterns whose matches validate, and unsupported keywords are refused by name") {
  const std::string schema = R"({"type":"object","properties":{
      "name":{"type":"string","pattern":"^[A-Z][a-z]+$"},
      "age":{"type":"integer","minimum":0},
      "score":{"type":"number"},
      "tags":{"type":"array","items":{"enum":["a","b"]},"minItems":1,"maxItems":3},
      "pet":{"type":"object","properties":{"kind":{"const":"cat"},"ok":{"type":"boolean"}},"required":["kind"]},
      "note":{"type":["string","null"],"maxLength":5}},
    "required":["name","age"]})";
  const byte_dfa d = byte_dfa::compile(json_schema_pattern(schema));
  CHECK(
      d.matches(R"({"name":"Tom","age":3,"score":-1.5,"tags":["a","b"],"pet":{"kind":"cat","ok":true},"note":null})"));
  CHECK(d.matches(R"({"name":"Ann","age":0,"score":2e3,"tags":["b"],"pet":{"kind":"cat","ok":false},"note":"hi"})"));
  CHECK_FALSE(d.matches(R"({"name":"tom","age":3,"score":1,"tags":["a"],"pet":{"kind":"cat","ok":true},"note":null})"));
  CHECK_FALSE(
      d.matches(R"({"name":"Tom","age":-3,"score":1,"tags":["a"],"pet":{"kind":"cat","ok":true},"note":null})"));
  CHECK_FALSE(d.matches(R"({"name":"Tom","age":3,"score":1,"tags":[],"pet":{"kind":"cat","ok":true},"note":null})"));
  CHECK_FALSE(d.matches(R"({"name":"Tom","age":3,"score":1,"tags":["a"],"pet":{"kind":"dog","ok":true},"note":null})"));

  auto refused = [](const std::string& s) -> std::string {
    try {
      (void)json_schema_pattern(s);
    } catch (const schema_error& e) {
      return e.where();
    }
    return "not refused";
  };
  CHECK(refused(R"({"type":"string","format":"date-time"})") == "#/format");
  CHECK(refused(R"({"type":"object","properties":{"n":{"type":"integer","maximum":5}}})") == "#/properties/n/maximum");
  CHECK(refused(R"({"type":"array","uniqueItems":true})") == "#/uniqueItems");
  CHECK(refused(R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})")
            .ends_with("$ref"));

  const byte_dfa any = byte_dfa::compile(json_object_pattern());
  CHECK(any.matches(R"({"a":1,"b":[true,null],"c":{"d":"x"}})"));
  CHECK_FALSE(any.matches(R"([1])"));
  const byte_dfa ch = byte_dfa::compile(choice_pattern({"red", "green", "a.b"}));
  CHECK(ch.matches("a.b"));
  CHECK_FALSE(ch.matches("axb"));
}

TEST_CASE("token masks over stories260K's vocabulary: every masked walk ends in a whole match") {
  auto tok = actorllm::text::tokenizer::from_directory(actorllm::test::model_dir("stories260K"));
  auto vocab = vocab_index::from_tokenizer(tok);
  const std::string pattern = json_schema_pattern(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer"}}})");
  token_constraint c{byte_dfa::compile(pattern), vocab};
  // Random walks through the masks: each one reaches eos with the text a match.
  uint64_t rng = 12345;
  for (int walk = 0; walk < 50; ++walk) {
    int32_t state = c.start();
    std::string text;
    for (int step = 0; step < 400; ++step) {
      const auto& m = c.mask(state);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < c.n_vocab(); ++t)
        if ((m[static_cast<std::size_t>(t) / 64] >> (t % 64)) & 1)
          allowed.push_back(t);
      REQUIRE_FALSE(allowed.empty());
      rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
      const int32_t t = allowed[(rng >> 33) % allowed.size()];
      if (c.is_eos(t))
        break;
      text += vocab->bytes(t);
      state = c.advance(state, t);
      REQUIRE(state != byte_dfa::dead);
    }
    CAPTURE(text);
    CHECK(c.accepting(state));
    simdjson::dom::parser p;
    CHECK(p.parse(simdjson::padded_string(text)).error() == simdjson::SUCCESS);
  }
}
