// The staged tokenizers beyond the test vectors: special tokens, tokenizer_config.json, Mistral, stories260K.
#include "text/tokenizer.hpp"
#include "tokenizer_fixtures.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

using actorllm::test::staged_tokenizer;
using ids = std::vector<int32_t>;

TEST_CASE("tokenizer: stories260K encodes with BOS from its post-processor") {
  const auto& tok = staged_tokenizer("stories260K");
  CHECK(tok.vocab_size() == 512);
  CHECK(tok.encode("Once upon a time") == ids{1, 403, 407, 261, 378});
  CHECK(tok.encode("Once upon a time", false) == ids{403, 407, 261, 378});
  CHECK(tok.decode(ids{1, 403, 407, 261, 378}, true) == "Once upon a time");
  CHECK(tok.decode(ids{1, 403, 407, 261, 378}, false) == "<s> Once upon a time");
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_id() == 2);
  CHECK(tok.bos_token() == "<s>");
  CHECK(tok.model_max_length() == 512);
  REQUIRE(tok.chat_template());
  CHECK(tok.chat_template()->find("bos_token") != std::string::npos);
}

TEST_CASE("tokenizer: Mistral loads and round-trips") {
  const auto& tok = staged_tokenizer("tokenizers/mistral");
  CHECK(tok.vocab_size() == 32000);
  CHECK(tok.token_to_id("▁") == 28705);
  CHECK(tok.encode("Hello [INST]", false) == ids{22557, 733, 16289, 28793});
  CHECK(tok.encode("Hello") == ids{1, 22557});
  for (const std::string s :
       {"Hello world", " leading space", "tabs\tand\nnewlines\n\n", "Ünïcödé, 日本語, 🦙🦙",
        "code: for (int i = 0; i < n; ++i) { x[i] *= 2; }", ""}) {
    CAPTURE(s);
    CHECK(tok.decode(tok.encode(s)) == "<s>" + std::string{s.empty() ? "" : " "} + s);
    CHECK(tok.decode(tok.encode(s), true) == s);
  }
  CHECK_FALSE(tok.model_max_length());  // the 1e30 "no limit" marker
  CHECK_FALSE(tok.chat_template());
}

TEST_CASE("tokenizer: Llama 2 byte fallback, vocabulary lookups and special tokens") {
  const auto& tok = staged_tokenizer("llama2-tokenizer");
  CHECK(tok.vocab_size() == 32000);
  CHECK(tok.token_to_id("<0x0A>") == 13);
  CHECK(tok.id_to_token(13) == "<0x0A>");
  CHECK(tok.id_to_token(29871) == "▁");
  CHECK(tok.id_to_token(-1).empty());
  CHECK(tok.id_to_token(32000).empty());
  CHECK_FALSE(tok.token_to_id("no such token"));
  CHECK(tok.is_special(1));
  CHECK_FALSE(tok.is_special(13));
  CHECK(tok.is_byte_fallback_token(13));
  CHECK_FALSE(tok.is_byte_fallback_token(29871));
  // 🦙 is not in the vocabulary: it is spelled with its four bytes.
  CHECK(tok.encode("🦙", false) == ids{29871, 243, 162, 169, 156});
  CHECK(tok.decode(ids{243, 162, 169, 156}) == "🦙");
  CHECK(tok.decode(ids{243, 162}) == "\xEF\xBF\xBD\xEF\xBF\xBD");  // HF: an invalid run is one U+FFFD per byte
  // Ids no token has are skipped, as HF does.
  CHECK(tok.decode(ids{15043, -5, 99999, 3186}) == "Hello world");
  // Special-token text in the input is matched before normalization; the text after it is normalized on its own
  // and so gets its own "▁" (HF's legacy Llama behaviour).
  CHECK(tok.encode("<s>Hi</s>", false) == ids{1, 6324, 2});
}

TEST_CASE("tokenizer: Llama 3 special tokens and config") {
  const auto& tok = staged_tokenizer("tokenizers/llama3");
  CHECK(tok.vocab_size() == 128256);
  CHECK(tok.encode("<|begin_of_text|>Hello world", false) == ids{128000, 9906, 1917});
  // This tokenizer.json's post_processor is ByteLevel (no BOS) and its config sets no add_bos_token, so
  // add_special_tokens adds nothing, exactly as transformers' PreTrainedTokenizerFast does with these files.
  CHECK(tok.encode("Hello world", true) == ids{9906, 1917});
  CHECK(tok.bos_id() == 128000);
  CHECK(tok.eos_id() == 128001);
  CHECK(tok.is_special(128009));
  CHECK(tok.is_added(128009));
  CHECK_FALSE(tok.is_added(9906));
  CHECK(tok.decode(ids{128000, 9906, 128009}, true) == "Hello");
  CHECK(tok.decode(ids{128000, 9906, 128009}, false) == "<|begin_of_text|>Hello<|eot_id|>");
  REQUIRE(tok.chat_template());
  CHECK(tok.chat_template()->find("<|start_header_id|>") != std::string::npos);
}

TEST_CASE("tokenizer: Qwen3 chat tokens, no BOS, NFC") {
  const auto& tok = staged_tokenizer("tokenizers/qwen3");
  CHECK(tok.vocab_size() == 151669);
  CHECK(tok.encode("<|im_start|>user\nHi<|im_end|>") == ids{151644, 872, 198, 13048, 151645});
  CHECK_FALSE(tok.bos_id());
  CHECK(tok.bos_token().empty());
  CHECK(tok.eos_token() == "<|im_end|>");
  CHECK(tok.eos_id() == 151645);
  CHECK(tok.is_added(151667));          // <think>: an added token
  CHECK_FALSE(tok.is_special(151667));  // ... but not a special one, so skip_special_tokens keeps it
  CHECK(tok.decode(ids{151667, 13048}, true) == "<think>Hi");
  // NFC: "e" + combining acute encodes like "é".
  CHECK(tok.encode("caf\x65\xCC\x81", false) == tok.encode("caf\xC3\xA9", false));
  CHECK(tok.model_max_length() == 131072);
}

TEST_CASE("tokenizer: encode repairs invalid UTF-8 to U+FFFD") {
  const auto& tok = staged_tokenizer("tokenizers/llama3");
  CHECK(tok.encode("a\xFF"
                   "b",
                   false) == tok.encode("a\xEF\xBF\xBD"
                                        "b",
                                        false));
  CHECK(tok.decode(tok.encode("\xE4\xBD", false)) == "\xEF\xBF\xBD");
}

TEST_CASE("tokenizer: copies share state and can be used from several threads") {
  const auto tok = staged_tokenizer("tokenizers/qwen3");  // a copy
  const std::string text = "Streaming 多线程 tokenization, 12345 times! 🦙";
  const auto expected = tok.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (tok.encode(text) != expected || tok.decode(expected) != text)
          ++mismatches;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(mismatches == 0);
}
