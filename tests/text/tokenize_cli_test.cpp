// The `actorllm tokenize` / `actorllm detokenize` subcommands, run as the built binary.
#include "support/test_paths.hpp"
#include "tokenizer_fixtures.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

using actorllm::test::actorllm_binary;
using actorllm::test::model_dir;
using actorllm::test::run_command;
using actorllm::test::staged_tokenizer;

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return q + "'";
}
}  // namespace

TEST_CASE("tokenize CLI: --output json prints the ids and tokens") {
  const std::string text = "Hello world, 你好 🦙";
  const auto dir = model_dir("tokenizers/llama3");
  const auto r = run_command(actorllm_binary().string() + " tokenize --tokenizer " + shell_quote(dir.string()) +
                             " --text " + shell_quote(text) + " --output json");
  REQUIRE(r.status == 0);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  REQUIRE(parser.parse(r.out).get(doc) == simdjson::SUCCESS);
  simdjson::dom::array ids;
  simdjson::dom::array tokens;
  REQUIRE(doc["ids"].get(ids) == simdjson::SUCCESS);
  REQUIRE(doc["tokens"].get(tokens) == simdjson::SUCCESS);
  const auto& tok = staged_tokenizer("tokenizers/llama3");
  const auto expected = tok.encode(text, false);
  REQUIRE(ids.size() == expected.size());
  REQUIRE(tokens.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(int64_t(ids.at(i)) == expected[i]);
    CHECK(std::string_view(tokens.at(i)) == tok.id_to_token(expected[i]));
  }
  // --add-special-tokens goes through the post-processor (BOS for stories260K).
  const auto with_bos = run_command(actorllm_binary().string() + " tokenize --tokenizer " +
                                    shell_quote(model_dir("stories260K").string()) +
                                    " --text 'Once upon a time' --add-special-tokens --output json");
  REQUIRE(with_bos.status == 0);
  CHECK(with_bos.out.find("\"ids\":[1,403,407,261,378]") != std::string::npos);
}

TEST_CASE("tokenize CLI: detokenize and bad input") {
  const std::string dir = shell_quote(model_dir("stories260K").string());
  const std::string bin = actorllm_binary().string();
  auto r = run_command(bin + " detokenize --tokenizer " + dir + " --ids 1,403,407,261,378");
  CHECK(r.status == 0);
  CHECK(r.out == "<s> Once upon a time\n");
  r = run_command(bin + " detokenize --tokenizer " + dir + " --ids '1, 403' --skip-special-tokens");
  CHECK(r.status == 0);
  CHECK(r.out == "Once\n");
  CHECK(run_command(bin + " detokenize --tokenizer " + dir + " --ids 1,99999 2>/dev/null").status != 0);
  CHECK(run_command(bin + " detokenize --tokenizer " + dir + " --ids 1,x 2>/dev/null").status != 0);
  CHECK(run_command(bin + " tokenize --tokenizer /nonexistent/dir --text hi 2>/dev/null").status != 0);
  r = run_command(bin + " tokenize --tokenizer " + dir + " --text 'Once upon'");
  CHECK(r.status == 0);
  CHECK(r.out.find("▁Once") != std::string::npos);
}
