// model_content_hash: stable for the same content, sensitive to one byte of config.json, "" without a model.
#include "model/model_hash.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

using actorllm::model::model_content_hash;
namespace fs = std::filesystem;

TEST_CASE("model_content_hash identifies a model directory by its content") {
  const fs::path source = actorllm::test::model_dir("stories260K");
  const fs::path copy = actorllm::test::make_temp_dir("model-hash");
  for (const auto& entry : fs::directory_iterator{source})
    if (entry.is_regular_file())
      fs::copy_file(entry.path(), copy / entry.path().filename());

  const std::string original = model_content_hash(source);
  CHECK(original.size() == 16);
  CHECK(model_content_hash(source) == original);

  const std::string copied = model_content_hash(copy);
  CHECK(copied.size() == 16);
  CHECK(model_content_hash(copy) == copied);
  CHECK(copied == original);  // the content counts, not where it lies

  SUBCASE("one byte of config.json changed gives another hash") {
    std::fstream f{copy / "config.json", std::ios::in | std::ios::out | std::ios::binary};
    f.seekg(0);
    char first = 0;
    f.get(first);
    f.seekp(0);
    f.put(first == '{' ? ' ' : '{');
    f.close();
    CHECK(model_content_hash(copy) != copied);
  }
  SUBCASE("a changed safetensors header gives another hash") {
    std::fstream f{copy / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(100);
    f.put('x');
    f.close();
    CHECK(model_content_hash(copy) != copied);
  }
  SUBCASE("an extra json file gives another hash") {
    std::ofstream{copy / "extra.json"} << "{}";
    CHECK(model_content_hash(copy) != copied);
  }
  fs::remove_all(copy);
}

TEST_CASE("model_content_hash is empty without config.json") {
  CHECK(model_content_hash("/nonexistent/model/dir").empty());
  const fs::path empty = actorllm::test::make_temp_dir("model-hash-empty");
  std::ofstream{empty / "model.safetensors"} << "x";
  CHECK(model_content_hash(empty).empty());
  fs::remove_all(empty);
}
