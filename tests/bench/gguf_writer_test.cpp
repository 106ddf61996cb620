// The GGUF writer of bench_gguf_from_hf (bench/export): a tiny Llama checkpoint written as GGUF and read back by a
// minimal GGUF reader of this test (magic, version, key/values, tensor infos, aligned offsets, tensor bytes), the
// SentencePiece reader on a hand-encoded model and on Llama 2's tokenizer.model, the refusals, and the safetensors
// writer of bench_cpu_decode --save-weights.
#include "bench/export/gguf_writer.hpp"
#include "bench/export/llama_gguf.hpp"
#include "bench/export/safetensors_writer.hpp"
#include "bench/export/sentencepiece_model.hpp"
#include "model/model_test_util.hpp"
#include "model/safetensors.hpp"

#include <doctest/doctest.h>
#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <variant>

namespace {

using namespace actorllm;
using model::test_util::temp_dir;
using model::test_util::write_file;

// ---- a minimal GGUF reader: only what the writer emits ----

using gguf_value = std::variant<uint32_t, float, bool, std::string, std::vector<std::string>, std::vector<float>,
                                std::vector<int32_t>>;

struct gguf_tensor_info {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;
};

struct gguf_file {
  uint32_t version = 0;
  std::map<std::string, gguf_value> kv;
  std::vector<std::string> key_order;
  std::vector<gguf_tensor_info> tensors;
  uint64_t data_start = 0;
  std::string bytes;

  std::string_view tensor_bytes(const gguf_tensor_info& t, size_t nbytes) const {
    REQUIRE(data_start + t.offset + nbytes <= bytes.size());
    return std::string_view{bytes}.substr(data_start + t.offset, nbytes);
  }
  const gguf_tensor_info& tensor(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name)
        return t;
    FAIL("no tensor " << name);
    throw std::logic_error("unreachable");
  }
  template <typename T>
  const T& get(const std::string& key) const {
    auto it = kv.find(key);
    REQUIRE_MESSAGE(it != kv.end(), "missing key " << key);
    REQUIRE_MESSAGE(std::holds_alternative<T>(it->second), "key " << key << " has another type");
    return std::get<T>(it->second);
  }
};

class byte_reader {
 public:
  explicit byte_reader(const std::string& b) : b_(b) {}
  template <typename T>
  T get() {
    REQUIRE(pos_ + sizeof(T) <= b_.size());
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    REQUIRE(pos_ + n <= b_.size());
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& b_;
  size_t pos_ = 0;
};

gguf_file read_gguf(const std::filesystem::path& path) {
  gguf_file f;
  std::ifstream in{path, std::ios::binary};
  REQUIRE(in.good());
  std::ostringstream ss;
  ss << in.rdbuf();
  f.bytes = ss.str();
  byte_reader r{f.bytes};
  REQUIRE(f.bytes.substr(0, 4) == "GGUF");
  r.get<uint32_t>();
  f.version = r.get<uint32_t>();
  const auto n_tensors = r.get<uint64_t>(), n_kv = r.get<uint64_t>();
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str();
    const auto type = r.get<uint32_t>();
    gguf_value v;
    switch (type) {
      case 4:
        v = r.get<uint32_t>();
        break;
      case 6:
        v = r.get<float>();
        break;
      case 7:
        v = r.get<uint8_t>() != 0;
        break;
      case 8:
        v = r.str();
        break;
      case 9: {
        const auto elem = r.get<uint32_t>();
        const auto n = r.get<uint64_t>();
        if (elem == 8) {
          std::vector<std::string> a;
          for (uint64_t j = 0; j < n; ++j)
            a.push_back(r.str());
          v = a;
        } else if (elem == 6) {
          std::vector<float> a;
          for (uint64_t j = 0; j < n; ++j)
            a.push_back(r.get<float>());
          v = a;
        } else {
          REQUIRE(elem == 5);
          std::vector<int32_t> a;
          for (uint64_t j = 0; j < n; ++j)
            a.push_back(r.get<int32_t>());
          v = a;
        }
        break;
      }
      default:
        FAIL("unexpected GGUF value type " << type << " for " << key);
    }
    REQUIRE_MESSAGE(f.kv.emplace(key, v).second, "key twice: " << key);
    f.key_order.push_back(key);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    gguf_tensor_info t;
    t.name = r.str();
    const auto n_dims = r.get<uint32_t>();
    for (uint32_t d = 0; d < n_dims; ++d)
      t.ne.push_back(r.get<uint64_t>());
    t.type = r.get<uint32_t>();
    t.offset = r.get<uint64_t>();
    f.tensors.push_back(t);
  }
  const uint32_t alignment = f.get<uint32_t>("general.alignment");
  f.data_start = (r.pos() + alignment - 1) / alignment * alignment;
  return f;
}

// ---- a tiny Llama checkpoint ----

constexpr int64_t n_embd = 16, n_head = 4, n_head_kv = 2, head_dim = 4, n_ff = 24, n_layer = 2, n_vocab = 8;

/// What the tests vary in the tiny model's config.json.
struct tiny_settings {
  std::string model_type = "llama";
  std::string architecture = "LlamaForCausalLM";
  bool tied = false;
  int64_t vocab = n_vocab;
  std::string extra;  ///< more keys, each after a comma
};

tiny_settings with_extra(std::string extra) {
  tiny_settings s;
  s.extra = std::move(extra);
  return s;
}

std::string tiny_config(const tiny_settings& s = {}) {
  return fmt::format(R"({{"architectures": ["{}"], "model_type": "{}", "hidden_size": {},
    "intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": {}, "num_key_value_heads": {},
    "vocab_size": {}, "max_position_embeddings": 128, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": {},
    "torch_dtype": "bfloat16"{}}})",
                     s.architecture, s.model_type, n_embd, n_ff, n_layer, n_head, n_head_kv, s.vocab,
                     s.tied ? "true" : "false", s.extra);
}

std::string random_bytes(size_t n, std::mt19937& rng) {
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng() & 0xff);
  return s;
}

/// The tiny model's tensors: the embedding F16, every matrix BF16, the norms F32 but for the last one (BF16) and layer
/// 1's attention norm (F16), so that each copy rule is exercised.
std::vector<model::test_util::test_tensor> tiny_tensors(int64_t vocab = n_vocab) {
  std::mt19937 rng{7};
  std::vector<model::test_util::test_tensor> out;
  auto add = [&](std::string name, dtype t, std::vector<int64_t> shape) {
    const size_t n = static_cast<size_t>(model::test_util::numel_of(shape)) * dtype_size(t);
    out.push_back({std::move(name), t, std::move(shape), random_bytes(n, rng)});
  };
  add("model.embed_tokens.weight", dtype::f16, {vocab, n_embd});
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    add(p + "input_layernorm.weight", l == 1 ? dtype::f16 : dtype::f32, {n_embd});
    add(p + "self_attn.q_proj.weight", dtype::bf16, {n_head * head_dim, n_embd});
    add(p + "self_attn.k_proj.weight", dtype::bf16, {n_head_kv * head_dim, n_embd});
    add(p + "self_attn.v_proj.weight", dtype::bf16, {n_head_kv * head_dim, n_embd});
    add(p + "self_attn.o_proj.weight", dtype::bf16, {n_embd, n_head * head_dim});
    add(p + "post_attention_layernorm.weight", dtype::f32, {n_embd});
    add(p + "mlp.gate_proj.weight", dtype::bf16, {n_ff, n_embd});
    add(p + "mlp.up_proj.weight", dtype::bf16, {n_ff, n_embd});
    add(p + "mlp.down_proj.weight", dtype::bf16, {n_embd, n_ff});
  }
  add("model.norm.weight", dtype::bf16, {n_embd});
  add("lm_head.weight", dtype::bf16, {vocab, n_embd});
  return out;
}

/// Writes the tensors as two shards and their index, as transformers does for large checkpoints.
void write_sharded(const std::filesystem::path& dir, const std::vector<model::test_util::test_tensor>& tensors) {
  const size_t half = tensors.size() / 2;
  std::vector<model::test_util::test_tensor> a(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(half));
  std::vector<model::test_util::test_tensor> b(tensors.begin() + static_cast<std::ptrdiff_t>(half), tensors.end());
  write_file(dir / "model-00001-of-00002.safetensors", model::test_util::make_safetensors(a));
  write_file(dir / "model-00002-of-00002.safetensors", model::test_util::make_safetensors(b));
  std::string map;
  for (size_t i = 0; i < tensors.size(); ++i)
    map += fmt::format("{}\"{}\": \"model-0000{}-of-00002.safetensors\"", i ? ", " : "", tensors[i].name,
                       i < half ? 1 : 2);
  write_file(dir / "model.safetensors.index.json", fmt::format(R"({{"metadata": {{}}, "weight_map": {{{}}}}})", map));
}

// ---- SentencePiece ModelProto encoding, written here independently of the reader ----

std::string varint(uint64_t v) {
  std::string s;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    if (v)
      b |= 0x80;
    s.push_back(static_cast<char>(b));
  } while (v);
  return s;
}

std::string length_field(uint64_t field, const std::string& payload) {
  return varint(field << 3 | 2) + varint(payload.size()) + payload;
}

std::string piece(const std::string& text, float score, int type) {
  std::string p = length_field(1, text);
  char raw[4];
  std::memcpy(raw, &score, 4);
  p += varint(2 << 3 | 5) + std::string(raw, 4);
  if (type != 0)  // 0: leave the field out (the proto's default, normal)
    p += varint(3 << 3 | 0) + varint(static_cast<uint64_t>(type));
  return length_field(1, p);
}

/// Six pieces (the last two padded by the writer to the tiny model's vocab of 8), with a trainer_spec before them
/// and a normalizer_spec after them that the reader must skip.
std::string tiny_tokenizer_model() {
  std::string m = length_field(2, varint(40 << 3 | 0) + varint(0) + length_field(1, "ignored.txt"));
  m += piece("<unk>", 0.0f, 2) + piece("<s>", 0.0f, 3) + piece("</s>", 0.0f, 3);
  m += piece("<0x41>", 0.0f, 6) +
       piece(
           "\xe2\x96\x81"
           "b",
           -1.5f, 1) +
       piece("a", -2.25f, 0);
  m += length_field(3, length_field(1, "nmt_nfkc"));
  return m;
}

struct tiny_model {
  std::filesystem::path dir, tokenizer;
  std::vector<model::test_util::test_tensor> tensors;
};

tiny_model make_tiny_model(const tiny_settings& settings = {}) {
  tiny_model m{temp_dir("gguf-writer-"), {}, tiny_tensors(settings.vocab)};
  write_file(m.dir / "config.json", tiny_config(settings));
  write_sharded(m.dir, m.tensors);
  m.tokenizer = m.dir / "tokenizer.model";
  write_file(m.tokenizer, tiny_tokenizer_model());
  return m;
}

/// HF q/k rows to ggml's rotary layout, computed from the source side: source row (h, j, i) of head h, half j, index
/// i goes to row (h, i, j).
std::string permuted_independently(const std::string& bytes, int64_t rows, int64_t heads) {
  const size_t row_bytes = bytes.size() / static_cast<size_t>(rows);
  const int64_t dim = rows / heads, half = dim / 2;
  std::string out(bytes.size(), '\0');
  for (int64_t src = 0; src < rows; ++src) {
    const int64_t h = src / dim, j = (src % dim) / half, i = src % half;
    const int64_t dst = h * dim + i * 2 + j;
    out.replace(static_cast<size_t>(dst) * row_bytes, row_bytes, bytes, static_cast<size_t>(src) * row_bytes,
                row_bytes);
  }
  return out;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL_CHECK("nothing was thrown");
  return "";
}

}  // namespace

TEST_CASE("gguf writer: a sharded tiny Llama becomes GGUF v3 with llama.cpp's names, hparams and the same bytes") {
  const tiny_model m = make_tiny_model();
  const auto out = m.dir / "model.gguf";
  const auto summary = bench::write_llama_gguf(m.dir, m.tokenizer, out);
  CHECK(summary.n_tensors == 2 + 9 * n_layer + 1);
  CHECK(summary.file_type == 32);  // mostly BF16
  const gguf_file f = read_gguf(out);
  CHECK(f.version == 3);

  CHECK(f.get<std::string>("general.architecture") == "llama");
  CHECK(f.get<uint32_t>("general.alignment") == 32);
  CHECK(f.get<uint32_t>("general.file_type") == 32);
  CHECK(f.get<uint32_t>("llama.context_length") == 128);
  CHECK(f.get<uint32_t>("llama.embedding_length") == n_embd);
  CHECK(f.get<uint32_t>("llama.block_count") == n_layer);
  CHECK(f.get<uint32_t>("llama.feed_forward_length") == n_ff);
  CHECK(f.get<uint32_t>("llama.attention.head_count") == n_head);
  CHECK(f.get<uint32_t>("llama.attention.head_count_kv") == n_head_kv);
  CHECK(f.get<float>("llama.rope.freq_base") == 500000.0f);
  CHECK(f.get<float>("llama.attention.layer_norm_rms_epsilon") == 1e-5f);
  CHECK(f.get<uint32_t>("llama.rope.dimension_count") == head_dim);
  CHECK(f.get<uint32_t>("llama.vocab_size") == n_vocab);
  CHECK(f.kv.count("llama.attention.key_length") == 0);  // head_dim is n_embd / n_head: llama.cpp's default

  CHECK(f.get<std::string>("tokenizer.ggml.model") == "llama");
  CHECK(f.get<std::vector<std::string>>("tokenizer.ggml.tokens") == std::vector<std::string>{"<unk>", "<s>", "</s>",
                                                                                             "<0x41>",
                                                                                             "\xe2\x96\x81"
                                                                                             "b",
                                                                                             "a", "[PAD6]", "[PAD7]"});
  CHECK(f.get<std::vector<float>>("tokenizer.ggml.scores") ==
        std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f, -1.5f, -2.25f, 0.0f, 0.0f});
  CHECK(f.get<std::vector<int32_t>>("tokenizer.ggml.token_type") == std::vector<int32_t>{2, 3, 3, 6, 1, 1, 4, 4});
  CHECK(f.get<uint32_t>("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f.get<uint32_t>("tokenizer.ggml.eos_token_id") == 2);
  CHECK(f.get<uint32_t>("tokenizer.ggml.unknown_token_id") == 0);

  REQUIRE(f.tensors.size() == m.tensors.size());
  uint64_t end_of_previous = 0;
  for (const auto& t : m.tensors) {
    CAPTURE(t.name);
    const std::string gguf_name = bench::llama_gguf_tensor_name(t.name);
    REQUIRE(!gguf_name.empty());
    const gguf_tensor_info& info = f.tensor(gguf_name);
    CHECK(info.offset % 32 == 0);
    CHECK(info.offset >= end_of_previous);
    end_of_previous = info.offset + t.bytes.size();
    CHECK(info.ne == std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend()));
    const bool widened = t.shape.size() == 1 && t.type != dtype::f32;  // 16-bit norms: F32 for ggml's CPU ops
    CHECK(info.type == (widened ? 0u : t.type == dtype::bf16 ? 30u : t.type == dtype::f16 ? 1u : 0u));
    std::string expected = t.bytes;
    if (widened) {
      expected.clear();
      for (size_t i = 0; i < t.bytes.size(); i += 2) {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + i, 2);
        uint32_t bits = static_cast<uint32_t>(h) << 16;  // bf16: the high half of an f32
        if (t.type == dtype::f16) {
          const float value = f16_to_f32(h);
          std::memcpy(&bits, &value, 4);
        }
        expected.append(reinterpret_cast<const char*>(&bits), 4);
      }
      end_of_previous += t.bytes.size();  // the F32 copy is twice the size
    }
    if (t.name.ends_with("q_proj.weight"))
      expected = permuted_independently(t.bytes, t.shape[0], n_head);
    else if (t.name.ends_with("k_proj.weight"))
      expected = permuted_independently(t.bytes, t.shape[0], n_head_kv);
    CHECK(f.tensor_bytes(info, expected.size()) == expected);
  }
  CHECK(f.data_start % 32 == 0);
  CHECK(f.tensor("token_embd.weight").offset == 0);
  CHECK(f.tensor("blk.1.attn_output.weight").ne == std::vector<uint64_t>{n_head * head_dim, n_embd});
  CHECK(f.tensor("output.weight").ne == std::vector<uint64_t>{n_embd, n_vocab});
}

TEST_CASE("gguf writer: tied embeddings write no output tensor (llama.cpp reads token_embd in its place)") {
  auto tensors = tiny_tensors();
  std::erase_if(tensors, [](const auto& t) { return t.name == "lm_head.weight"; });
  tiny_model m{temp_dir("gguf-tied-"), {}, tensors};
  tiny_settings tied;
  tied.tied = true;
  write_file(m.dir / "config.json", tiny_config(tied));
  write_file(m.dir / "model.safetensors", model::test_util::make_safetensors(tensors));
  write_file(m.dir / "tokenizer.model", tiny_tokenizer_model());
  bench::write_llama_gguf(m.dir, m.dir / "tokenizer.model", m.dir / "tied.gguf");
  const gguf_file f = read_gguf(m.dir / "tied.gguf");
  CHECK(f.tensors.size() == tensors.size());
  for (const auto& t : f.tensors)
    CHECK(t.name != "output.weight");
}

TEST_CASE("gguf writer: refuses what llama.cpp's Llama would not compute alike, naming the field or tensor") {
  SUBCASE("another architecture") {
    tiny_settings mistral;
    mistral.model_type = "mistral";
    mistral.architecture = "MistralForCausalLM";
    const tiny_model m = make_tiny_model(mistral);
    CHECK(model::test_util::mentions(error_of([&] { bench::write_llama_gguf(m.dir, m.tokenizer, m.dir / "x.gguf"); }),
                                     {"config.json", "model_type 'mistral'"}));
  }
  SUBCASE("rope scaling") {
    const tiny_model m = make_tiny_model(with_extra(R"(, "rope_scaling": {"type": "linear", "factor": 2.0})"));
    CHECK(model::test_util::mentions(error_of([&] { bench::write_llama_gguf(m.dir, m.tokenizer, m.dir / "x.gguf"); }),
                                     {"rope_scaling"}));
  }
  SUBCASE("a tensor the config does not imply") {
    tiny_model m{temp_dir("gguf-extra-"), {}, tiny_tensors()};
    m.tensors.push_back(
        {"model.layers.0.self_attn.q_proj.bias", dtype::f32, {n_head * head_dim}, std::string(64, 'x')});
    write_file(m.dir / "config.json", tiny_config());
    write_file(m.dir / "model.safetensors", model::test_util::make_safetensors(m.tensors));
    write_file(m.dir / "tokenizer.model", tiny_tokenizer_model());
    CHECK(model::test_util::mentions(
        error_of([&] { bench::write_llama_gguf(m.dir, m.dir / "tokenizer.model", m.dir / "x.gguf"); }),
        {"model.safetensors", "model.layers.0.self_attn.q_proj.bias"}));
  }
  SUBCASE("a missing or misshapen tensor") {
    for (const bool drop : {true, false}) {
      CAPTURE(drop);
      auto tensors = tiny_tensors();
      const auto it = std::find_if(tensors.begin(), tensors.end(),
                                   [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
      REQUIRE(it != tensors.end());
      if (drop)
        tensors.erase(it);
      else
        it->shape = {n_embd, n_ff};
      const auto dir = temp_dir("gguf-missing-");
      write_file(dir / "config.json", tiny_config());
      write_file(dir / "model.safetensors", model::test_util::make_safetensors(tensors));
      write_file(dir / "tokenizer.model", tiny_tokenizer_model());
      const std::string msg = error_of([&] { bench::write_llama_gguf(dir, dir / "tokenizer.model", dir / "x.gguf"); });
      CHECK(model::test_util::mentions(msg, {"model.layers.1.mlp.up_proj.weight", drop ? "missing" : "shape"}));
    }
  }
  SUBCASE("a vocabulary larger than vocab_size") {
    tiny_settings small_vocab;
    small_vocab.vocab = 4;  // the tokenizer has 6 pieces
    const tiny_model m = make_tiny_model(small_vocab);
    CHECK(model::test_util::mentions(error_of([&] { bench::write_llama_gguf(m.dir, m.tokenizer, m.dir / "x.gguf"); }),
                                     {"tokenizer.model", "6 pieces", "vocab_size 4"}));
  }
}

TEST_CASE("gguf writer: the rotary row permutation moves whole rows and is refused for a row count it cannot split") {
  // 2 heads of 4 rows, one byte a row: head rows [a0 a1 b0 b1] (halves a, b) become [a0 b0 a1 b1].
  const std::string src = "ABCDEFGH";
  std::string dst(8, '\0');
  bench::permute_rope_rows(reinterpret_cast<const std::byte*>(src.data()), reinterpret_cast<std::byte*>(dst.data()), 8,
                           1, 2);
  CHECK(dst == "ACBDEGFH");
  CHECK(dst == permuted_independently(src, 8, 2));
  CHECK_THROWS_AS(bench::permute_rope_rows(reinterpret_cast<const std::byte*>(src.data()),
                                           reinterpret_cast<std::byte*>(dst.data()), 6, 1, 2),
                  std::invalid_argument);
}

TEST_CASE("sentencepiece reader: Llama 2's tokenizer.model has tokenizer.json's 32000 pieces, types and scores") {
  const auto dir = test::shared_dir() / "models" / "llama2-tokenizer";
  const auto pieces = bench::read_sentencepiece_model(dir / "tokenizer.model");
  REQUIRE(pieces.size() == 32000);
  simdjson::dom::parser parser;
  const simdjson::dom::element json = parser.load((dir / "tokenizer.json").string());
  size_t matched = 0;
  for (auto [text, id] : json["model"]["vocab"].get_object()) {
    const auto i = static_cast<size_t>(int64_t(id));
    REQUIRE(i < pieces.size());
    matched += pieces[i].text == std::string_view{text} ? 1 : 0;
  }
  CHECK(matched == 32000);
  CHECK(pieces[0].type == bench::piece_type::unknown);
  CHECK(pieces[1].type == bench::piece_type::control);
  CHECK(pieces[2].type == bench::piece_type::control);
  for (size_t i = 3; i < 3 + 256; ++i)
    CHECK(pieces[i].type == bench::piece_type::byte);
  CHECK(pieces[278].type == bench::piece_type::normal);
  CHECK(pieces[278].score < 0.0f);  // merges ranked by score: earlier pieces score higher
  CHECK(pieces[278].score > pieces[31000].score);
}

TEST_CASE("sentencepiece reader: truncated or malformed protos are refused naming the file and the place") {
  const std::string good = tiny_tokenizer_model();
  CHECK(bench::parse_sentencepiece_model(good, "t.model").size() == 6);
  CHECK(model::test_util::mentions(error_of([&] { bench::parse_sentencepiece_model(good.substr(0, 40), "t.model"); }),
                                   {"t.model", "runs past the end"}));
  CHECK(model::test_util::mentions(error_of([&] { bench::parse_sentencepiece_model(piece("x", 0, 9), "t.model"); }),
                                   {"t.model", "piece 0", "type 9"}));
  CHECK(model::test_util::mentions(error_of([&] { bench::parse_sentencepiece_model("", "t.model"); }),
                                   {"t.model", "no pieces"}));
  CHECK(model::test_util::mentions(error_of([&] { bench::read_sentencepiece_model("/nonexistent/tokenizer.model"); }),
                                   {"/nonexistent/tokenizer.model"}));
}

TEST_CASE("safetensors writer: weights written for --save-weights read back with the same names, shapes and bytes") {
  std::mt19937 rng{3};
  model::model_weights w;
  auto fill = [&](std::string name, dtype t, std::vector<int64_t> shape) {
    auto& tensor = w.insert(std::move(name), model::host_tensor(t, std::move(shape)));
    const std::string bytes = random_bytes(tensor.nbytes(), rng);
    std::memcpy(tensor.data(), bytes.data(), bytes.size());
  };
  fill("model.embed_tokens.weight", dtype::bf16, {8, 16});
  fill("model.norm.weight", dtype::f32, {16});
  fill("lm_head.weight", dtype::f16, {3, 5});  // odd sizes: the writer pads the header, not the data
  const auto config_dir = temp_dir("st-config-");
  write_file(config_dir / "config.json", tiny_config());
  const auto out = temp_dir("st-out-") / "nested";
  bench::write_checkpoint_dir(out, config_dir, w);
  CHECK(std::filesystem::exists(out / "config.json"));
  const auto ckpt = model::safetensors_checkpoint::open(out);
  CHECK(ckpt.names().size() == 3);
  for (const auto& [name, t] : w.tensors()) {
    CAPTURE(name);
    const auto e = ckpt.find(name);
    REQUIRE(e.has_value());
    CHECK(e->info->type == t.type);
    CHECK(e->info->shape == t.shape);
    REQUIRE(e->info->nbytes() == t.nbytes());
    CHECK(std::memcmp(e->file->data(*e->info), t.data(), t.nbytes()) == 0);
  }
}
