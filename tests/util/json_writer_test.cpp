// The JSON writer emits valid, compact JSON, escapes control characters and repairs invalid UTF-8.
#include "util/json_writer.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>

using actorllm::json_writer;

TEST_CASE("json_writer builds nested documents with commas in the right places") {
  json_writer w;
  w.begin_object();
  w.key("ids").array(std::vector<int>{1, 2, 3});
  w.key("empty").begin_array().end_array();
  w.key("nested").begin_object().key("a").value(true).key("b").null().end_object();
  w.key("text").value("line\n\"quoted\"\t\\");
  w.key("big").value(uint64_t{18446744073709551615ULL});
  w.key("neg").value(int64_t{-5});
  w.end_object();
  CHECK(w.str() == R"({"ids":[1,2,3],"empty":[],"nested":{"a":true,"b":null},"text":"line\n\"quoted\"\t\\",)"
                   R"("big":18446744073709551615,"neg":-5})");
}

TEST_CASE("json_writer writes non-finite doubles as null and round-trips finite ones") {
  json_writer w;
  w.begin_array().value(std::numeric_limits<double>::infinity()).value(std::nan("")).value(0.1).end_array();
  simdjson::dom::parser parser;
  auto doc = parser.parse(w.str());
  auto arr = doc.get_array();
  CHECK(arr.at(0).is_null());
  CHECK(arr.at(1).is_null());
  CHECK(double(arr.at(2)) == doctest::Approx(0.1));
}

TEST_CASE("json_writer output stays valid JSON for arbitrary bytes [asan]") {
  std::mt19937 gen{1234};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s(static_cast<size_t>(gen() % 40), '\0');
    for (auto& c : s)
      c = static_cast<char>(gen() & 0xff);
    json_writer w;
    w.begin_object().key(s).value(s).end_object();
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    REQUIRE(parser.parse(w.str()).get(doc) == simdjson::SUCCESS);
    // Valid UTF-8 input survives unchanged.
    if (simdjson::validate_utf8(s.data(), s.size())) {
      std::string_view back;
      REQUIRE(doc.get_object().at_key(s).get(back) == simdjson::SUCCESS);
      CHECK(back == s);
    }
  }
}

TEST_CASE("append_json_escaped_ascii writes each ASCII byte as json.dumps does, and it parses back to that byte") {
  const std::map<unsigned char, std::string> named = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"},
                                                      {'\t', "\\t"}, {'\b', "\\b"},  {'\f', "\\f"}};
  for (int c = 0; c < 0x80; ++c) {
    CAPTURE(c);
    std::string out;
    actorllm::append_json_escaped_ascii(out, static_cast<unsigned char>(c));
    if (auto it = named.find(static_cast<unsigned char>(c)); it != named.end()) {
      CHECK(out == it->second);
    } else if (c < 0x20) {
      char expected[8];
      std::snprintf(expected, sizeof expected, "\\u00%02x", c);  // lower-case hex, as Python writes it
      CHECK(out == expected);
    } else {
      CHECK(out == std::string(1, static_cast<char>(c)));
    }
    simdjson::dom::parser parser;
    std::string_view back;
    REQUIRE(parser.parse("\"" + out + "\"").get(back) == simdjson::SUCCESS);
    CHECK(back == std::string_view(std::string(1, static_cast<char>(c))));
  }
}
