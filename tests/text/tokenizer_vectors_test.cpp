// llama.cpp's tokenizer test vectors (generated with the HF tokenizers of each family) must encode exactly, and
// decode(encode(text)) must give the text back.
#include "tokenizer_fixtures.hpp"

#include <doctest/doctest.h>

#include <filesystem>

using actorllm::test::model_dir;
using actorllm::test::staged_tokenizer;

namespace {

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty())
      s += ' ';
    s += std::to_string(id);
  }
  return s;
}

void check_vectors(const std::string& tokenizer_name, const std::filesystem::path& inp,
                   const std::filesystem::path& out) {
  const auto cases = actorllm::test::read_vocab_test_cases(inp, out);
  REQUIRE(cases.size() == 46);
  const auto& tok = staged_tokenizer(tokenizer_name);
  size_t encoded = 0;
  size_t round_tripped = 0;
  for (const auto& c : cases) {
    const auto ids = tok.encode(c.text, false);
    INFO("text: \"" << c.text << "\"");
    CHECK_MESSAGE(ids == c.ids, "got      " << ids_to_string(ids) << "\nexpected " << ids_to_string(c.ids));
    encoded += ids == c.ids ? 1 : 0;
    const auto text = tok.decode(ids);
    CHECK(text == c.text);
    round_tripped += text == c.text ? 1 : 0;
  }
  MESSAGE(tokenizer_name << ": encode " << encoded << "/" << cases.size() << ", round trip " << round_tripped << "/"
                         << cases.size());
  CHECK(encoded == cases.size());
  CHECK(round_tripped == cases.size());
}

}  // namespace

TEST_CASE("tokenizer: llama.cpp vectors, Llama 2 (SentencePiece BPE with byte fallback)") {
  const auto dir = model_dir("llama2-tokenizer/testcases");
  check_vectors("llama2-tokenizer", dir / "llamacpp-llama-spm.inp", dir / "llamacpp-llama-spm.out");
}

TEST_CASE("tokenizer: llama.cpp vectors, Llama 3 (byte-level BPE, ignore_merges)") {
  const auto dir = model_dir("tokenizers/llama3/testcases");
  check_vectors("tokenizers/llama3", dir / "llamacpp-llama-bpe.inp", dir / "llamacpp-llama-bpe.out");
}

TEST_CASE("tokenizer: llama.cpp vectors, Qwen3 (NFC, byte-level BPE, merges as pairs)") {
  const auto dir = model_dir("tokenizers/qwen3/testcases");
  check_vectors("tokenizers/qwen3", dir / "llamacpp-qwen2.inp", dir / "llamacpp-qwen2.out");
}
