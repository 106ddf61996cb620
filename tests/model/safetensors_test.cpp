// safetensors reading: valid files (single and sharded, each dtype) read back exactly, and every kind of malformed
// file refused with a message naming the file and the tensor. The [asan] cases also run under ASan+UBSan in CI.
#include "model/safetensors.hpp"

#include "model_test_util.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace actorllm;
using namespace actorllm::model;
using test_util::error_of;
using test_util::make_tensor;
using test_util::mentions;
using test_util::raw_safetensors;
using test_util::write_file;

namespace {

std::vector<test_util::test_tensor> sample_tensors() {
  return {make_tensor("a.weight", dtype::f32, {3, 4}, test_util::pattern(1)),
          make_tensor("b.weight", dtype::f16, {5}, test_util::pattern(2)),
          make_tensor("c.weight", dtype::bf16, {2, 3, 2}, test_util::pattern(3)),
          make_tensor("empty", dtype::f32, {0, 7}, test_util::pattern(4)),
          make_tensor("scalar", dtype::f32, {}, [](int64_t) { return 2.5f; })};
}

void check_reads_back(const safetensors_file& file, const test_util::test_tensor& want) {
  const tensor_info* info = file.find(want.name);
  REQUIRE(info != nullptr);
  CHECK(info->name == want.name);
  CHECK(info->type == want.type);
  CHECK(info->shape == want.shape);
  CHECK(info->nbytes() == want.bytes.size());
  CHECK(info->numel() == test_util::numel_of(want.shape));
  CHECK(std::memcmp(file.data(*info), want.bytes.data(), want.bytes.size()) == 0);
}

/// Writes `bytes` as DIR/name and returns the message opening it gives (the test fails if it opens).
std::string open_error(const std::string& bytes, const std::string& name = "bad.safetensors") {
  auto path = test_util::temp_dir("actorllm-st") / name;
  write_file(path, bytes);
  std::string msg = error_of([&] { safetensors_file::open(path); });
  CHECK(mentions(msg, {path.string()}));
  return msg;
}

/// A header with one tensor entry `entry` (raw JSON) and `data_bytes` bytes of data.
std::string one_tensor(const std::string& entry, size_t data_bytes, const std::string& name = "w") {
  return raw_safetensors(fmt::format("{{\"{}\":{}}}", name, entry), std::string(data_bytes, '\x11'));
}

}  // namespace

TEST_CASE("safetensors: a single file of f32/f16/bf16 tensors reads back exactly [asan]") {
  auto tensors = sample_tensors();
  auto path = test_util::temp_dir("actorllm-st") / "model.safetensors";
  write_file(path, test_util::make_safetensors(tensors));

  safetensors_file file = safetensors_file::open(path);
  CHECK(file.path() == path);
  REQUIRE(file.tensors().size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i)
    CHECK(file.tensors()[i].name == tensors[i].name);  // header order kept
  for (const auto& t : tensors)
    check_reads_back(file, t);
  CHECK(file.find("nope") == nullptr);
  CHECK(file.metadata().at("format") == "pt");

  // Values survive the trip: f16 and bf16 hold the pattern exactly.
  const tensor_info* c = file.find("c.weight");
  for (int64_t i = 0; i < c->numel(); ++i) {
    uint16_t h;
    std::memcpy(&h, file.data(*c) + 2 * i, 2);
    CHECK(bf16_to_f32(h) == test_util::pattern(3)(i));
  }

  // Moving keeps the mapping and the lookups valid; the moved-from object owns nothing.
  safetensors_file moved = std::move(file);
  check_reads_back(moved, tensors[0]);
  safetensors_file other = safetensors_file::open(path);
  other = std::move(moved);
  check_reads_back(other, tensors[2]);

  // The checkpoint view of a directory with model.safetensors, and of the file itself.
  for (const auto& where : {path.parent_path(), path}) {
    auto ckpt = safetensors_checkpoint::open(where);
    REQUIRE(ckpt.files().size() == 1);
    CHECK(ckpt.names() == std::vector<std::string>{"a.weight", "b.weight", "c.weight", "empty", "scalar"});
    auto e = ckpt.find("b.weight");
    REQUIRE(e.has_value());
    CHECK(e->file == ckpt.files()[0].get());
    CHECK(e->info->type == dtype::f16);
    CHECK_FALSE(ckpt.find("lm_head.weight").has_value());
  }
}

TEST_CASE("safetensors: a sharded checkpoint with an index reads back exactly [asan]") {
  auto dir = test_util::temp_dir("actorllm-st");
  auto tensors = sample_tensors();
  std::vector<test_util::test_tensor> shard1{tensors[0], tensors[1]};
  std::vector<test_util::test_tensor> shard2{tensors[2], tensors[3], tensors[4]};
  write_file(dir / "model-00001-of-00002.safetensors", test_util::make_safetensors(shard1));
  write_file(dir / "model-00002-of-00002.safetensors", test_util::make_safetensors(shard2));
  write_file(dir / "model.safetensors.index.json", R"({"metadata": {"total_size": 120}, "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00001-of-00002.safetensors",
      "c.weight": "model-00002-of-00002.safetensors", "empty": "model-00002-of-00002.safetensors",
      "scalar": "model-00002-of-00002.safetensors"}})");

  auto ckpt = safetensors_checkpoint::open(dir);
  REQUIRE(ckpt.files().size() == 2);
  CHECK(ckpt.names() == std::vector<std::string>{"a.weight", "b.weight", "c.weight", "empty", "scalar"});
  for (const auto& t : tensors) {
    auto e = ckpt.find(t.name);
    REQUIRE(e.has_value());
    check_reads_back(*e->file, t);
  }
  CHECK(ckpt.find("a.weight")->file->path().filename() == "model-00001-of-00002.safetensors");
  CHECK(ckpt.find("c.weight")->file->path().filename() == "model-00002-of-00002.safetensors");

  // Entries stay valid when the checkpoint object moves.
  auto moved = std::move(ckpt);
  check_reads_back(*moved.find("scalar")->file, tensors[4]);
}

TEST_CASE("safetensors: the stories260K checkpoint opens with its 47 tensors [asan]") {
  auto ckpt = safetensors_checkpoint::open(actorllm::test::model_dir("stories260K"));
  CHECK(ckpt.names().size() == 47);
  auto e = ckpt.find("model.embed_tokens.weight");
  REQUIRE(e.has_value());
  CHECK(e->info->shape == std::vector<int64_t>{512, 64});
  CHECK(e->info->type == dtype::f32);
  CHECK(e->info->data_begin == 8 + 4856);  // header length read little-endian
  CHECK_FALSE(ckpt.find("lm_head.weight").has_value());
}

TEST_CASE("safetensors: truncated files are refused [asan]") {
  CHECK(mentions(open_error(""), {"0 bytes", "too short"}));
  CHECK(mentions(open_error(std::string("\x10\x00\x00", 3)), {"3 bytes", "too short"}));
  // Header length says 100 bytes, only 20 follow.
  CHECK(mentions(open_error(raw_safetensors(R"({"w":{"dtype":"F32",)", "", 100)), {"header length 100", "past"}));
  // Data cut: the tensor needs 16 bytes, 8 are there.
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})", 8)),
                 {"'w'", "[0, 16]", "past the end"}));

  // Every prefix of a valid file fails cleanly (and none reads out of bounds under ASan).
  auto full = test_util::make_safetensors(sample_tensors());
  auto dir = test_util::temp_dir("actorllm-st");
  for (size_t len = 0; len < full.size(); ++len) {
    auto path = dir / "cut.safetensors";
    write_file(path, full.substr(0, len));
    CHECK_THROWS_AS(safetensors_file::open(path), model_error);
  }
}

TEST_CASE("safetensors: header length, JSON and structure errors [asan]") {
  CHECK(mentions(open_error(raw_safetensors("{}", "", 1ull << 30)), {"header length 1073741824", "exceeds"}));
  CHECK(mentions(open_error(raw_safetensors("{}", "", ~0ull)), {"header length", "exceeds"}));
  CHECK(mentions(open_error(raw_safetensors("this is not json", "")), {"not valid JSON"}));
  CHECK(mentions(open_error(raw_safetensors(R"({"w": {"dtype": "F32")", "")), {"not valid JSON"}));
  CHECK(mentions(open_error(raw_safetensors("[1, 2, 3]", "")), {"JSON object", "array"}));
  CHECK(mentions(open_error(raw_safetensors("\"text\"", "")), {"JSON object"}));
  CHECK(mentions(open_error(raw_safetensors(R"({"w": [1, 2]})", "")), {"'w'", "object"}));
  CHECK(mentions(open_error(raw_safetensors(R"({"__metadata__": {"format": 1}})", "")), {"__metadata__", "format"}));
  CHECK(mentions(open_error(raw_safetensors(R"({"__metadata__": []})", "")), {"__metadata__"}));
  CHECK(mentions(open_error(one_tensor(R"({"shape":[4],"data_offsets":[0,16]})", 16)), {"'w'", "no dtype"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","data_offsets":[0,16]})", 16)), {"'w'", "no shape"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[4]})", 16)), {"'w'", "no data_offsets"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})", 16)),
                 {"'w'", "data_offsets"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16,32]})", 32)),
                 {"'w'", "data_offsets"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[-4,12]})", 16)),
                 {"'w'", "non-negative"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})", 16)), {"'w'", "shape"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,10]})", 16)),
                 {"'w'", "not an integer"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":32,"shape":[4],"data_offsets":[0,16]})", 16)), {"'w'", "dtype"}));
  // The same name twice in one header.
  CHECK(mentions(open_error(raw_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                               "w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                            std::string(8, '\0'))),
                 {"'w'", "twice"}));
}

TEST_CASE("safetensors: offsets out of range, overlapping or not matching the shape [asan]") {
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[250],"data_offsets":[0,1000]})", 16, "big")),
                 {"'big'", "[0, 1000]", "past the end of the data section (16 bytes"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,
                                          18446744073709551615]})",
                                       16)),
                 {"'w'"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[0],"data_offsets":[16,8]})", 16)),
                 {"'w'", "end before they begin"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[4],"data_offsets":[0,12]})", 16)),
                 {"'w'", "12 bytes", "needs 16 bytes"}));
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]})", 24)),
                 {"'w'", "needs 12 bytes"}));
  CHECK(mentions(open_error(raw_safetensors(R"({"first":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},
                                               "second":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                                            std::string(24, '\0'))),
                 {"'first'", "'second'", "overlap"}));
  // Listed in reverse order: the check sorts by offset.
  CHECK(mentions(open_error(raw_safetensors(R"({"late":{"dtype":"F16","shape":[4],"data_offsets":[6,14]},
                                               "early":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})",
                                            std::string(16, '\0'))),
                 {"'late'", "'early'", "overlap"}));
  // Two identical ranges overlap too; zero-byte tensors overlap nothing.
  CHECK(mentions(open_error(raw_safetensors(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
                                               "y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                            std::string(4, '\0'))),
                 {"overlap"}));
  auto dir = test_util::temp_dir("actorllm-st");
  write_file(dir / "ok.safetensors", raw_safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                                                        "e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                                     std::string(8, '\0')));
  CHECK(safetensors_file::open(dir / "ok.safetensors").tensors().size() == 2);
}

TEST_CASE("safetensors: negative, huge and overflowing shapes [asan]") {
  CHECK(mentions(open_error(one_tensor(R"({"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]})", 16, "neg")),
                 {"'neg'", "negative"}));
  // numel fits in 64 bits but numel * 4 bytes does not.
  CHECK(mentions(
      open_error(one_tensor(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]})", 0, "huge")),
      {"'huge'", "overflows"}));
  // numel itself overflows: 2^32 * 2^32 * 16.
  CHECK(mentions(
      open_error(one_tensor(R"({"dtype":"F16","shape":[4294967296,4294967296,16],"data_offsets":[0,0]})", 0, "huge")),
      {"'huge'", "overflows"}));
  // A product that wraps around to a small number must not pass: 2^62 * 4 = 2^64 == 0 mod 2^64.
  CHECK(mentions(
      open_error(one_tensor(R"({"dtype":"F32","shape":[4611686018427387904, 4],"data_offsets":[0,0]})", 0, "wrap")),
      {"'wrap'", "overflows"}));
  CHECK(mentions(
      open_error(one_tensor(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})", 4, "u64")),
      {"'u64'", "too large"}));
  // A zero dimension makes any other dimension harmless.
  auto dir = test_util::temp_dir("actorllm-st");
  write_file(dir / "zero.safetensors",
             one_tensor(R"({"dtype":"F32","shape":[0, 9223372036854775807],"data_offsets":[0,0]})", 0));
  CHECK(safetensors_file::open(dir / "zero.safetensors").tensors().at(0).numel() == 0);
  write_file(dir / "zero.safetensors",
             one_tensor(R"({"dtype":"F32","shape":[4294967296, 4294967296, 0],"data_offsets":[0,0]})", 0));
  CHECK(safetensors_file::open(dir / "zero.safetensors").tensors().at(0).numel() == 0);
}

TEST_CASE("safetensors: unsupported dtypes are refused naming the dtype and the tensor [asan]") {
  // The integer and fp8 types quantized checkpoints use are read (safetensors_test's quantized cases); these are not.
  for (std::string dt : {"F64", "BOOL", "U16", "F8_E5M2", "float32", "bf16"}) {
    CAPTURE(dt);
    std::string msg = open_error(
        one_tensor(fmt::format(R"({{"dtype":"{}","shape":[2],"data_offsets":[0,16]}})", dt), 16, "rotary.inv_freq"));
    CHECK(mentions(msg, {"'rotary.inv_freq'", "dtype " + dt, "not support"}));
  }
}

TEST_CASE("safetensors: random corruption of a header never crashes [asan]") {
  const std::string good = test_util::make_safetensors(sample_tensors());
  auto dir = test_util::temp_dir("actorllm-st");
  std::mt19937 rng(1234);
  const std::string alphabet = "0123456789[]{},:\"-eE. FBI";
  int opened = 0;
  for (int round = 0; round < 400; ++round) {
    std::string bad = good;
    const int n_changes = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_changes; ++k) {
      const size_t pos = rng() % std::min<size_t>(bad.size(), 8 + 300);  // mostly the length and the header
      bad[pos] = alphabet[rng() % alphabet.size()];
    }
    write_file(dir / "fuzz.safetensors", bad);
    try {
      auto file = safetensors_file::open(dir / "fuzz.safetensors");
      ++opened;  // if it opens, every tensor must lie inside the file
      for (const auto& t : file.tensors()) {
        CHECK(t.data_begin <= t.data_end);
        CHECK(t.data_end <= file.file_size());
        CHECK(t.nbytes() == static_cast<uint64_t>(t.numel()) * dtype_size(t.type));
      }
    } catch (const model_error& e) {
      CHECK(std::string(e.what()).find("fuzz.safetensors") != std::string::npos);
    }
  }
  CHECK(opened < 400);  // the corruption did reach the parser
}

TEST_CASE("safetensors: index errors name the index, the shard and the tensor [asan]") {
  auto make_dir = [] {
    auto dir = test_util::temp_dir("actorllm-st");
    write_file(dir / "s1.safetensors",
               test_util::make_safetensors({make_tensor("a", dtype::f32, {2}, test_util::pattern(1))}));
    write_file(dir / "s2.safetensors",
               test_util::make_safetensors({make_tensor("b", dtype::f32, {2}, test_util::pattern(2))}));
    return dir;
  };
  auto index_error = [](const std::filesystem::path& dir, const std::string& index) {
    write_file(dir / "model.safetensors.index.json", index);
    std::string msg = error_of([&] { safetensors_checkpoint::open(dir); });
    return msg;
  };

  auto dir = make_dir();
  const std::string index_path = (dir / "model.safetensors.index.json").string();
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": "s1.safetensors", "b": "s3.safetensors"}})"),
                 {index_path, "s3.safetensors", "'b'", "does not exist"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})"),
                 {index_path, "'b'", "s1.safetensors", "no such tensor"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": "s1.safetensors", "c": "s2.safetensors"}})"),
                 {"'c'", "s2.safetensors", "no such tensor"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": "../s1.safetensors"}})"), {"'a'", "plain file name"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": 1}})"), {index_path, "'a'", "file name"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": {}})"), {index_path, "empty"}));
  CHECK(mentions(index_error(dir, R"({"metadata": {}})"), {index_path, "weight_map"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": ["a"]})"), {index_path, "weight_map", "object"}));
  CHECK(mentions(index_error(dir, R"({"weight_map": )"), {index_path, "not valid JSON"}));

  // The same tensor in two shards.
  write_file(dir / "s3.safetensors",
             test_util::make_safetensors({make_tensor("b", dtype::f32, {2}, test_util::pattern(3)),
                                          make_tensor("c", dtype::f32, {1}, test_util::pattern(3))}));
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors",
                                                     "c": "s3.safetensors"}})"),
                 {"'b'", "s2.safetensors", "s3.safetensors", "both"}));

  // A broken shard is reported with its own path.
  write_file(dir / "s2.safetensors", "tiny");
  CHECK(mentions(index_error(dir, R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})"),
                 {(dir / "s2.safetensors").string(), "too short"}));

  // And a directory with nothing to load.
  auto empty = test_util::temp_dir("actorllm-st");
  CHECK(mentions(error_of([&] { safetensors_checkpoint::open(empty); }), {empty.string(), "model.safetensors"}));
  CHECK(mentions(error_of([&] { safetensors_file::open(empty / "missing.safetensors"); }),
                 {"missing.safetensors", "cannot open"}));
  CHECK(mentions(error_of([&] { safetensors_file::open(empty); }), {"not a regular file"}));
}

TEST_CASE("safetensors: the integer and fp8 types of quantized checkpoints are read with their element sizes") {
  const std::vector<std::pair<std::string, int>> types{{"I64", 8}, {"I32", 4}, {"I16", 2},
                                                       {"I8", 1},  {"U8", 1},  {"F8_E4M3", 1}};
  for (const auto& [dt, size] : types) {
    CAPTURE(dt);
    const auto dir = test_util::temp_dir("actorllm-st");
    write_file(dir / "q.safetensors",
               one_tensor(fmt::format(R"({{"dtype":"{}","shape":[2, 3],"data_offsets":[0,{}]}})", dt, 6 * size),
                          static_cast<size_t>(6 * size), "layer.qweight"));
    const auto f = safetensors_file::open(dir / "q.safetensors");
    const tensor_info& info = f.tensors().at(0);
    CHECK(stored_type_name(info.stored) == dt);
    CHECK(stored_type_size(info.stored) == static_cast<size_t>(size));
    CHECK_FALSE(info.is_float());
    // A size that does not fit the type is still refused.
    CHECK(mentions(
        open_error(one_tensor(fmt::format(R"({{"dtype":"{}","shape":[2, 3],"data_offsets":[0,{}]}})", dt, 6 * size + 1),
                              static_cast<size_t>(6 * size + 1), "layer.qweight")),
        {"'layer.qweight'", "needs"}));
  }
}
