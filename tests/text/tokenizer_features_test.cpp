// Pipeline features that the staged tokenizers do not use, on small hand-written tokenizer.json files whose
// expected ids follow from HF's documented behaviour.
#include "text/tokenizer.hpp"
#include "tokenizer_json_writer.hpp"

#include <doctest/doctest.h>

using actorllm::test::added_token_json;
using actorllm::test::bpe_model_json;
using actorllm::test::tokenizer_json;
using actorllm::test::tokenizer_json_parts;
using actorllm::test::write_tokenizer_dir;
using actorllm::text::tokenizer;
using ids = std::vector<int32_t>;

namespace {

tokenizer load(const tokenizer_json_parts& parts, const std::string& config = "", const std::string& jinja = "") {
  return actorllm::test::use_and_remove(write_tokenizer_dir(tokenizer_json(parts), config, jinja),
                                        [](const auto& dir) { return tokenizer::from_directory(dir); });
}

tokenizer_json_parts metaspace_parts(const std::string& scheme_option) {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"▁", "a", "b", "▁a", "▁b", "<unk>", "ab", "▁ab", "<sep>"}, {"▁ a", "a b", "▁a b", "▁ b"},
                           R"("unk_token": "<unk>",)");
  std::string metaspace = R"({"type": "Metaspace", "replacement": "▁", )";
  metaspace += scheme_option;
  metaspace += R"("split": true})";
  p.pre_tokenizer = metaspace;
  p.decoder = metaspace;
  p.added_tokens = std::string{"["} + added_token_json(8, "<sep>", true, R"("normalized": false, )") + "]";
  return p;
}

tokenizer_json_parts split_parts(const std::string& split) {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"a", "-", "1", "2", "-a", "a-", "--", "<unk>", "12"}, {"- a", "a -", "- -", "1 2"},
                           R"("unk_token": "<unk>",)");
  p.pre_tokenizer = split;
  return p;
}

std::string split_on_dash(const std::string& behavior, bool invert = false) {
  return R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior + R"(", "invert": )" +
         (invert ? "true" : "false") + "}";
}

}  // namespace

TEST_CASE("tokenizer features: Metaspace pre-tokenizer and decoder, prepend schemes") {
  const tokenizer first = load(metaspace_parts(R"("prepend_scheme": "first", )"));
  CHECK(first.encode("ab b") == ids{7, 4});
  CHECK(first.decode(ids{7, 4}) == "ab b");
  // "first": only text at the very start of the input gets the prefix, not text after an added token.
  CHECK(first.encode("<sep>ab") == ids{8, 6});
  CHECK(first.encode("ab<sep>ab") == ids{7, 8, 6});
  CHECK(first.decode(ids{7, 8, 6}) == "ab<sep>ab");
  CHECK(first.decode(ids{7, 8, 6}, true) == "abab");
  // Each "▁" starts a new word (MergedWithNext); consecutive ones stay separate.
  CHECK(first.encode("  a") == ids{0, 3});
  const tokenizer always = load(metaspace_parts(R"("prepend_scheme": "always", )"));
  CHECK(always.encode("<sep>ab") == ids{8, 7});
  // Files from before prepend_scheme: add_prefix_space false means never.
  const tokenizer legacy = load(metaspace_parts(R"("add_prefix_space": false, )"));
  CHECK(legacy.encode("ab") == ids{6});
  CHECK(legacy.decode(ids{7}) == " ab");
}

TEST_CASE("tokenizer features: Split behaviors, invert, regex and Digits") {
  CHECK(load(split_parts(split_on_dash("Isolated"))).encode("a-a") == ids{0, 1, 0});
  CHECK(load(split_parts(split_on_dash("Isolated"))).encode("a--a") == ids{0, 1, 1, 0});
  CHECK(load(split_parts(split_on_dash("Removed"))).encode("a-a") == ids{0, 0});
  CHECK(load(split_parts(split_on_dash("MergedWithPrevious"))).encode("a-a") == ids{5, 0});
  CHECK(load(split_parts(split_on_dash("MergedWithNext"))).encode("a-a") == ids{0, 4});
  CHECK(load(split_parts(split_on_dash("Contiguous"))).encode("a--a") == ids{0, 6, 0});
  CHECK(load(split_parts(split_on_dash("Removed", true))).encode("a-a") == ids{1});
  CHECK(
      load(split_parts(R"({"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "Isolated"})")).encode("a12-") ==
      ids{0, 8, 1});
  const std::string digits = R"({"type": "Digits", "individual_digits": )";
  CHECK(load(split_parts(digits + "true}")).encode("a12") == ids{0, 2, 3});
  CHECK(load(split_parts(digits + "false}")).encode("a12") == ids{0, 8});
  CHECK(load(split_parts(R"({"type": "Sequence", "pretokenizers": [)" + split_on_dash("Isolated") + ", " + digits +
                         "true}]}"))
            .encode("-12-a") == ids{1, 2, 3, 1, 0});
}

TEST_CASE("tokenizer features: added tokens with lstrip, rstrip, single_word and normalized") {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"a", "b", "c", "t", " ", ".", "n", "o", "<unk>", "[M]", "CAT", "YY", "x", "y"}, {},
                           R"("unk_token": "<unk>",)");
  p.normalizer = R"({"type": "Replace", "pattern": {"String": "x"}, "content": "y"})";
  p.added_tokens = "[" + added_token_json(9, "[M]", true, R"("lstrip": true, "rstrip": true, "normalized": false, )") +
                   ", " + added_token_json(10, "cat", false, R"("single_word": true, "normalized": false, )") + ", " +
                   added_token_json(11, "yy", false, R"("normalized": true, )") + "]";
  const tokenizer tok = load(p);
  CHECK(tok.encode("a [M] b") == ids{0, 9, 1});
  CHECK(tok.encode("a[M]b") == ids{0, 9, 1});
  CHECK(tok.encode("cat concat cat.") == ids{10, 4, 2, 7, 6, 2, 0, 3, 4, 10, 5});
  // "yy" is matched in the normalized text, where "xx" has become "yy".
  CHECK(tok.encode("xx") == ids{11});
  CHECK(tok.encode("ax") == ids{0, 13});
  // Without a decoder HF joins the token strings with spaces.
  CHECK(tok.decode(ids{0, 9, 1}) == "a [M] b");
  CHECK(tok.decode(ids{0, 9, 1}, true) == "a b");
  CHECK(tok.is_special(9));
  CHECK_FALSE(tok.is_special(10));
}

TEST_CASE("tokenizer features: BPE unk, fuse_unk, byte_fallback, affixes, ignore_merges, pair merges") {
  auto model_only = [](const std::string& model) {
    tokenizer_json_parts p;
    p.model = model;
    return load(p);
  };
  CHECK(model_only(bpe_model_json({"a", "b", "<unk>"}, {}, R"("unk_token": "<unk>", "fuse_unk": true,)"))
            .encode("a??b") == ids{0, 2, 1});
  CHECK(model_only(bpe_model_json({"a", "b", "<unk>"}, {}, R"("unk_token": "<unk>", "fuse_unk": false,)"))
            .encode("a??b") == ids{0, 2, 2, 1});
  CHECK(model_only(bpe_model_json({"a", "b"}, {})).encode("a??b") == ids{0, 1});  // no unk token: dropped
  const auto bytes =
      model_only(bpe_model_json({"a", "<unk>", "<0x3F>"}, {}, R"("unk_token": "<unk>", "byte_fallback": true,)"));
  CHECK(bytes.encode("a?") == ids{0, 2});
  CHECK(bytes.encode("a!") == ids{0, 1});  // no <0x21> token: unknown
  CHECK(
      model_only(bpe_model_json({"a", "##b", "ab"}, {"a ##b"}, R"("continuing_subword_prefix": "##",)")).encode("ab") ==
      ids{2});
  CHECK(model_only(bpe_model_json({"a", "b</w>", "ab</w>"}, {"a b</w>"}, R"("end_of_word_suffix": "</w>",)"))
            .encode("ab") == ids{2});
  CHECK(model_only(bpe_model_json({"a", "b", "ab", "c", "abc"}, {"a b"}, R"("ignore_merges": true,)")).encode("abc") ==
        ids{4});
  CHECK(model_only(bpe_model_json({"a", "b", "ab", "c", "abc"}, {"a b"}, R"("ignore_merges": false,)")).encode("abc") ==
        ids{2, 3});
  tokenizer_json_parts pairs;
  pairs.model = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]})";
  CHECK(load(pairs).encode("ab") == ids{2});
}

TEST_CASE("tokenizer features: normalizers and decoders") {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"a", "b", "-", " ", "ﬁ", "f", "i", "<unk>"}, {}, R"("unk_token": "<unk>",)");
  p.normalizer = R"({"type": "Sequence", "normalizers": [{"type": "NFKC"},
                     {"type": "Replace", "pattern": {"Regex": "b+"}, "content": "-"}]})";
  p.decoder = R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "-"}, "content": "b"},
                  {"type": "Fuse"}, {"type": "Strip", "content": "a", "start": 2, "stop": 1}]})";
  const tokenizer tok = load(p);
  CHECK(tok.encode("abbba") == ids{0, 2, 0});
  CHECK(tok.encode("ﬁ") == ids{5, 6});  // NFKC splits the ligature
  CHECK(tok.decode(ids{0, 0, 0, 2, 0, 0}) == "aba");
}

TEST_CASE("tokenizer features: tokenizer_config.json add_bos_token/add_eos_token and chat templates") {
  tokenizer_json_parts p;
  p.model =
      bpe_model_json({"<unk>", "<s>", "</s>", "▁", "h", "i", "▁h", "▁hi"}, {"▁ h", "▁h i"}, R"("unk_token": "<unk>",)");
  p.normalizer = R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                     {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})";
  p.added_tokens = "[" + added_token_json(0, "<unk>", true) + ", " + added_token_json(1, "<s>", true) + ", " +
                   added_token_json(2, "</s>", true) + "]";
  p.post_processor = R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}})";
  CHECK(load(p).encode("hi") == ids{1, 7});  // no config: the post-processor alone
  const std::string llama = R"({"tokenizer_class": "LlamaTokenizer", "bos_token": {"__type": "AddedToken",
      "content": "<s>"}, "eos_token": "</s>", "model_max_length": 1000000000000000019884624838656, )";
  CHECK(load(p, llama + R"("add_eos_token": true})").encode("hi") == ids{1, 7, 2});
  CHECK(load(p, llama + R"("add_bos_token": false})").encode("hi") == ids{7});
  // Another class only changes the template when it states a flag.
  CHECK(load(p, R"({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>"})").encode("hi") == ids{1, 7});
  CHECK(load(p, R"({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>", "add_eos_token": true})")
            .encode("hi") == ids{7, 2});
  const tokenizer named = load(p, llama + R"("chat_template": [{"name": "tool_use", "template": "T"},
                                                  {"name": "default", "template": "D"}]})");
  CHECK(named.chat_template() == "D");
  CHECK(named.bos_id() == 1);
  CHECK(named.eos_id() == 2);
  CHECK_FALSE(named.model_max_length());
  const tokenizer from_file = load(p, llama + "\"model_max_length\": 4096}", "{{ bos_token }}{{ messages }}");
  CHECK(from_file.chat_template() == "{{ bos_token }}{{ messages }}");
  CHECK(from_file.model_max_length() == 4096);
}
