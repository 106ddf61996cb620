// Loading refuses broken or unsupported files with a message that names the file and the problem.
#include "text/tokenizer.hpp"
#include "text/tokenizer_error.hpp"
#include "tokenizer_json_writer.hpp"

#include <doctest/doctest.h>

using actorllm::test::bpe_model_json;
using actorllm::test::make_temp_dir;
using actorllm::test::tokenizer_json;
using actorllm::test::tokenizer_json_parts;
using actorllm::test::write_tokenizer_dir;
using actorllm::text::tokenizer;
using actorllm::text::tokenizer_error;

namespace {

// The message of the tokenizer_error that loading `dir` throws ("" if it loads).
std::string load_error(const std::filesystem::path& dir) {
  try {
    tokenizer::from_directory(dir);
  } catch (const tokenizer_error& e) {
    return e.what();
  }
  return "";
}

std::string load_error(const tokenizer_json_parts& parts, const std::string& config = "") {
  return actorllm::test::use_and_remove(write_tokenizer_dir(tokenizer_json(parts), config),
                                        [](const auto& dir) { return load_error(dir); });
}

std::string load_error_of_text(const std::string& json) {
  return actorllm::test::use_and_remove(write_tokenizer_dir(json), [](const auto& dir) { return load_error(dir); });
}

tokenizer_json_parts valid_parts() {
  tokenizer_json_parts p;
  p.model = bpe_model_json({"a", "b", "ab", "<unk>"}, {"a b"}, R"("unk_token": "<unk>",)");
  return p;
}

void check_error(const std::string& message, std::initializer_list<std::string_view> parts) {
  CAPTURE(message);
  for (std::string_view part : parts) {
    CAPTURE(part);
    CHECK(message.find(part) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("[asan] tokenizer errors: missing directory, missing file, invalid JSON") {
  const auto empty = make_temp_dir("actorllm-empty");
  check_error(load_error(empty / "nowhere"), {"nowhere", "tokenizer directory not found"});
  check_error(load_error(empty), {"tokenizer.json", "file not found"});
  std::filesystem::remove_all(empty);
  check_error(load_error_of_text("{\"model\": "), {"tokenizer.json", "not valid JSON"});
  check_error(load_error_of_text("[1, 2]"), {"tokenizer.json", "expected a JSON object"});
  CHECK(load_error(valid_parts()).empty());  // the baseline the other cases break
}

TEST_CASE("[asan] tokenizer errors: unsupported components are refused by name") {
  auto p = valid_parts();
  p.pre_tokenizer = R"({"type": "Whitespace"})";
  check_error(load_error(p), {"tokenizer.json", "unsupported pre_tokenizer type \"Whitespace\"", "pre_tokenizer"});
  p = valid_parts();
  p.pre_tokenizer = R"({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Punctuation"}]})";
  check_error(load_error(p), {"unsupported pre_tokenizer type \"Punctuation\"", "pre_tokenizer.pretokenizers[1]"});
  p = valid_parts();
  p.normalizer = R"({"type": "Lowercase"})";
  check_error(load_error(p), {"unsupported normalizer type \"Lowercase\""});
  p = valid_parts();
  p.decoder = R"({"type": "WordPiece", "prefix": "##"})";
  check_error(load_error(p), {"unsupported decoder type \"WordPiece\""});
  p = valid_parts();
  p.post_processor = R"({"type": "RobertaProcessing"})";
  check_error(load_error(p), {"unsupported post_processor type \"RobertaProcessing\""});
  p = valid_parts();
  p.model = R"({"type": "WordPiece", "vocab": {"a": 0}})";
  check_error(load_error(p), {"unsupported model type \"WordPiece\""});
  p = valid_parts();
  p.model = R"({"type": "BPE", "dropout": 0.1, "vocab": {"a": 0}, "merges": []})";
  check_error(load_error(p), {"unsupported BPE dropout"});
  p = valid_parts();
  p.pre_tokenizer = R"({"type": "Split", "pattern": {"String": "x"}, "behavior": "Isolated", "foo": 1})";
  check_error(load_error(p), {"unsupported Split pre_tokenizer option \"foo\""});
  p = valid_parts();
  p.pre_tokenizer = R"({"type": "Split", "pattern": {"String": "x"}, "behavior": "Sideways"})";
  check_error(load_error(p), {"unsupported Split behavior \"Sideways\""});
  p = valid_parts();
  p.extra = R"("future_feature": {},)";
  check_error(load_error(p), {"unsupported tokenizer.json option \"future_feature\""});
}

TEST_CASE("[asan] tokenizer errors: broken vocabulary, merges, patterns and templates") {
  auto p = valid_parts();
  p.model = bpe_model_json({"a", "b"}, {"a b"});
  check_error(load_error(p), {"merge token \"ab\" is not in the vocabulary", "model.merges[0]"});
  p.model = bpe_model_json({"a", "b", "ab"}, {"a b", "ab"});
  check_error(load_error(p), {"\"ab\" is not two tokens separated by one space", "model.merges[1]"});
  p.model = bpe_model_json({"a"}, {}, R"("unk_token": "<unk>",)");
  check_error(load_error(p), {"unk_token \"<unk>\" is not in the vocabulary"});
  p.model = R"({"type": "BPE", "vocab": {"a": -1}, "merges": []})";
  check_error(load_error(p), {"the id of \"a\" is not a token id"});
  p.model = R"({"type": "BPE", "vocab": {"a": 2147483647}, "merges": []})";
  check_error(load_error(p), {"the id of \"a\" is not a token id"});
  p.model = R"({"type": "BPE", "vocab": {"a": 0}})";
  check_error(load_error(p), {"missing field \"merges\""});
  p = valid_parts();
  p.pre_tokenizer = R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})";
  check_error(load_error(p), {"tokenizer.json", "invalid regex \"(unclosed\""});
  p = valid_parts();
  p.normalizer = R"({"type": "Replace", "pattern": {"String": ""}, "content": "x"})";
  check_error(load_error(p), {"empty String pattern"});
  p = valid_parts();
  p.post_processor = R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {}})";
  check_error(load_error(p), {"special token \"<s>\" is missing from special_tokens", "post_processor.single[0]"});
  p = valid_parts();
  p.added_tokens = R"([{"id": 7, "content": ""}])";
  check_error(load_error(p), {"an added token cannot be empty", "added_tokens[0]"});
  p = valid_parts();
  p.decoder = R"({"type": "Strip", "content": "ab", "start": 1, "stop": 0})";
  check_error(load_error(p), {"expected exactly one character"});
}

TEST_CASE("[asan] tokenizer errors: tokenizer_config.json problems name that file") {
  check_error(load_error(valid_parts(), R"({"add_bos_token": "yes"})"),
              {"tokenizer_config.json", "add_bos_token", "expected true or false"});
  check_error(load_error(valid_parts(), R"({"tokenizer_class": "LlamaTokenizer"})"),
              {"tokenizer_config.json", "add_bos_token is true but the token it adds is not set"});
  check_error(load_error(valid_parts(), R"({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>"})"),
              {"tokenizer_config.json", "\"<s>\" is not in the vocabulary"});
  check_error(load_error(valid_parts(), R"({"added_tokens_decoder": {"2": {"content": "zz"}}})"),
              {"tokenizer_config.json", "conflicts with vocabulary entry \"ab\""});
  check_error(load_error(valid_parts(), "{\"bos_token\": "), {"tokenizer_config.json"});
}
