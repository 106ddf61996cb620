// token_text_in_context: a token's text as it reads inside generated text (logprobs), on small hand-written
// tokenizers whose decoders strip a text's start.
#include "text/token_text.hpp"
#include "text/tokenizer.hpp"
#include "tokenizer_json_writer.hpp"

#include <doctest/doctest.h>

using actorllm::test::bpe_model_json;
using actorllm::test::tokenizer_json;
using actorllm::test::tokenizer_json_parts;
using actorllm::test::write_tokenizer_dir;
using actorllm::text::token_text_in_context;
using actorllm::text::tokenizer;
using ids = std::vector<int32_t>;

namespace {

tokenizer load(const tokenizer_json_parts& parts) {
  return actorllm::test::use_and_remove(write_tokenizer_dir(tokenizer_json(parts), "", ""),
                                        [](const auto& dir) { return tokenizer::from_directory(dir); });
}

}  // namespace

TEST_CASE("token_text_in_context: a word-initial token keeps the space its decode alone drops") {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"▁", "a", "b", "▁a", "▁b"}, {"▁ a", "▁ b"});
  const std::string metaspace =
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})";
  p.pre_tokenizer = metaspace;
  p.decoder = metaspace;
  const tokenizer tok = load(p);
  CHECK(tok.decode(ids{4}) == "b");  // Metaspace strips the first "▁" of a text
  CHECK(token_text_in_context(tok, 4) == " b");
  CHECK(token_text_in_context(tok, 2) == "b");
  CHECK(tok.decode(ids{1, 4, 2}) ==
        token_text_in_context(tok, 1) + token_text_in_context(tok, 4) + token_text_in_context(tok, 2));
}

TEST_CASE("token_text_in_context: a byte that is not a whole character keeps its stand-alone text") {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"a", "<unk>", "<0xC3>", "<0xA9>"}, {}, R"("unk_token": "<unk>", "byte_fallback": true,)");
  p.decoder = R"({"type": "ByteFallback"})";
  const tokenizer tok = load(p);
  CHECK(tok.decode(ids{2, 3}) == "\xC3\xA9");
  CHECK(token_text_in_context(tok, 2) == tok.decode(ids{2}));
  CHECK(token_text_in_context(tok, 2).find("\xEF\xBF\xBD") != std::string::npos);
  CHECK(token_text_in_context(tok, 0) == "a");
}
