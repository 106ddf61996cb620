// SentencePiece-style tokenizers have no pre-tokenizer, so the BPE model sees whole texts; it tokenizes them chunk
// by chunk (before each "▁" that follows another character) when the vocabulary guarantees that no merge spans
// such a position. This checks that the chunked result equals whole-text BPE on long texts.
#include "text/tokenizer.hpp"
#include "tokenizer_fixtures.hpp"
#include "tokenizer_json_writer.hpp"

#include <doctest/doctest.h>

#include <random>

using actorllm::test::model_dir;
using actorllm::test::read_file;
using actorllm::test::write_tokenizer_dir;
using actorllm::text::tokenizer;

namespace {

// The same tokenizer.json plus the vocabulary entry "x▁y" (no merge produces it, so encoding is unchanged),
// which breaks the guarantee and makes the model merge each text as one word.
tokenizer without_chunking(const std::string& name, int32_t free_id) {
  std::string json = read_file(model_dir(name) / "tokenizer.json");
  const size_t vocab = json.find("\"vocab\":");
  REQUIRE(vocab != std::string::npos);
  const size_t brace = json.find('{', vocab);
  json.insert(brace + 1, "\"x\xE2\x96\x81y\": " + std::to_string(free_id) + ",");
  return actorllm::test::use_and_remove(write_tokenizer_dir(json),
                                        [](const auto& dir) { return tokenizer::from_directory(dir); });
}

std::string long_text(std::mt19937& rng) {
  static const char* const parts[] = {"The quick brown fox jumps over the lazy dog. ",
                                      "  indented   text\twith\ttabs ",
                                      "\n\n",
                                      "多线程 ",
                                      "🦙🦙 ",
                                      "x = f(y) + 42; ",
                                      "Ünïcödé ",
                                      "     ",
                                      "supercalifragilisticexpialidocious ",
                                      "1234567890 ",
                                      "<s> ",
                                      "▁literal▁marks▁ "};
  std::string s;
  const int n = std::uniform_int_distribution<int>{20, 200}(rng);
  for (int i = 0; i < n; ++i)
    s += parts[std::uniform_int_distribution<int>{0, 11}(rng)];
  return s;
}

}  // namespace

TEST_CASE("tokenizer: chunked SentencePiece BPE equals whole-text BPE on long texts") {
  for (const std::string name : {"llama2-tokenizer", "tokenizers/mistral"}) {
    CAPTURE(name);
    const auto& chunked = actorllm::test::staged_tokenizer(name);
    const tokenizer whole = without_chunking(name, chunked.vocab_size());
    std::mt19937 rng{99};
    for (int i = 0; i < 40; ++i) {
      const std::string text = long_text(rng);
      CHECK(chunked.encode(text) == whole.encode(text));
    }
  }
}
