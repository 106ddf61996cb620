// Streaming detokenization: deltas are whole characters and add up to the full decode.
#include "text/incremental_detokenizer.hpp"
#include "tokenizer_fixtures.hpp"
#include "util/utf8.hpp"

#include <doctest/doctest.h>

using actorllm::is_valid_utf8;
using actorllm::test::staged_tokenizer;
using actorllm::text::incremental_detokenizer;

namespace {

struct stream_result {
  std::vector<std::string> deltas;
  std::string text;
};

stream_result stream(const actorllm::text::tokenizer& tok, std::span<const int32_t> prompt,
                     std::span<const int32_t> generated, bool skip_special) {
  incremental_detokenizer d{tok, prompt, skip_special};
  stream_result r;
  for (int32_t id : generated) {
    r.deltas.push_back(d.push(id));
    r.text += r.deltas.back();
  }
  r.deltas.push_back(d.finish());
  r.text += r.deltas.back();
  return r;
}

}  // namespace

TEST_CASE("incremental detokenizer: SentencePiece leading space only at the true start") {
  const auto& tok = staged_tokenizer("llama2-tokenizer");
  const auto hello = tok.encode("Hello world", false);  // ▁Hello ▁world
  REQUIRE(hello.size() == 2);
  // No prompt: the text starts here, so the first space is stripped like decode() does.
  auto r = stream(tok, {}, hello, false);
  CHECK(r.text == "Hello world");
  CHECK(r.deltas[0] == "Hello");
  CHECK(r.deltas[1] == " world");
  // After a prompt the reply is a continuation and keeps its space.
  const std::vector<int32_t> prompt = tok.encode("Say:", true);
  r = stream(tok, prompt, hello, true);
  CHECK(r.text == " Hello world");
  CHECK(r.deltas[0] == " Hello");
  // A prompt of just BOS that is skipped: decode(BOS + reply) strips the space, so the stream does too.
  const std::vector<int32_t> bos{1};
  CHECK(stream(tok, bos, hello, true).text == "Hello world");
  CHECK(stream(tok, bos, hello, false).text == " Hello world");  // "<s>" + " Hello world"
}

TEST_CASE("incremental detokenizer: byte-fallback and multi-byte characters come out whole") {
  for (const std::string name : {"llama2-tokenizer", "tokenizers/llama3", "tokenizers/qwen3"}) {
    CAPTURE(name);
    const auto& tok = staged_tokenizer(name);
    const std::string text = "Llamas 🦙 say 你好, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and ñ!";
    const auto ids = tok.encode(text, true);
    const size_t split = 3;
    REQUIRE(ids.size() > split);
    const std::span<const int32_t> all{ids};
    const auto r = stream(tok, all.first(split), all.subspan(split), false);
    const std::string full = tok.decode(ids);
    const std::string prompt_text = tok.decode(all.first(split));
    REQUIRE(full.starts_with(prompt_text));
    CHECK(r.text == full.substr(prompt_text.size()));
    bool emoji_whole = false;
    for (const auto& d : r.deltas) {
      CHECK(is_valid_utf8(d));
      emoji_whole = emoji_whole || d.find("🦙") != std::string::npos;
    }
    CHECK(emoji_whole);
    // The emoji needs several tokens in every one of these vocabularies, so some pushes must have held text back.
    size_t empty = 0;
    for (const auto& d : r.deltas)
      empty += d.empty() ? 1 : 0;
    CHECK(empty > 0);
  }
}

TEST_CASE("incremental detokenizer: skip_special_tokens drops special tokens from the stream") {
  const auto& tok = staged_tokenizer("tokenizers/qwen3");
  const auto ids = tok.encode("<|im_start|>assistant\nHi there<|im_end|>", false);
  REQUIRE(tok.is_special(ids.front()));
  CHECK(stream(tok, {}, ids, true).text == "assistant\nHi there");
  CHECK(stream(tok, {}, ids, false).text == "<|im_start|>assistant\nHi there<|im_end|>");
}
