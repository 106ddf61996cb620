// Weight tables, TP/PP slicing while loading, and dummy weights: checked on the real stories260K checkpoint and on
// small synthetic checkpoints (sharded, bf16, GQA with more ranks than kv heads) written by the tests.
#include "model/weight_loader.hpp"

#include "kernels/cpu/cpu_backend.hpp"
#include "model/safetensors.hpp"
#include "model/weight_table.hpp"
#include "model_test_util.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <set>
#include <utility>

using namespace actorllm;
using namespace actorllm::model;
using test_util::error_of;
using test_util::mentions;

namespace {

std::filesystem::path stories_dir() { return actorllm::test::model_dir("stories260K"); }

/// A small GQA model whose sizes allow tp 1, 2, 4 and 8 (kv heads replicated past 2) and a vocab no tp divides.
std::string synthetic_config(bool tie = false, std::string_view extra = {}, int vocab = 30) {
  return fmt::format(R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
      "intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
      "head_dim": 4, "vocab_size": {}, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
      "tie_word_embeddings": {}, "torch_dtype": "bfloat16"{}}})",
                     vocab, tie ? "true" : "false", extra);
}

/// Writes config.json and a checkpoint holding every weight the config declares (pattern values, stored as
/// `type`), spread over `n_shards` files with an index when n_shards > 1. `edit` may change the tensor list first.
std::filesystem::path write_checkpoint(const std::string& config_json, dtype type, int n_shards,
                                       const std::function<void(std::vector<test_util::test_tensor>&)>& edit = {}) {
  auto dir = test_util::temp_dir("actorllm-ckpt");
  test_util::write_file(dir / "config.json", config_json);
  const model_config cfg = load_model_config(dir);
  std::vector<test_util::test_tensor> tensors;
  int salt = 0;
  for (const auto& decl : llama_weight_table(cfg, {}).weights)
    tensors.push_back(test_util::make_tensor(decl.name, type, decl.shape, test_util::pattern(++salt)));
  if (edit)
    edit(tensors);
  if (n_shards == 1) {
    test_util::write_file(dir / "model.safetensors", test_util::make_safetensors(tensors));
    return dir;
  }
  std::vector<std::vector<test_util::test_tensor>> shards(static_cast<size_t>(n_shards));
  std::string weight_map;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t s = i % shards.size();
    shards[s].push_back(tensors[i]);
    weight_map += fmt::format("{}\"{}\": \"model-{:05}-of-{:05}.safetensors\"", weight_map.empty() ? "" : ", ",
                              tensors[i].name, s + 1, n_shards);
  }
  for (size_t s = 0; s < shards.size(); ++s)
    test_util::write_file(dir / fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, n_shards),
                          test_util::make_safetensors(shards[s]));
  test_util::write_file(dir / "model.safetensors.index.json",
                        fmt::format(R"({{"metadata": {{}}, "weight_map": {{{}}}}})", weight_map));
  return dir;
}

std::string bytes_of(const host_tensor& t) { return std::string(static_cast<const char*>(t.data()), t.nbytes()); }

/// Byte equality without dumping binary into the failure message.
bool same_bytes(const std::string& a, const std::string& b) { return a == b; }

/// Joins per-rank slices along `dim` (0 or 1) independently of the loader's arithmetic.
std::string concat(const std::vector<const host_tensor*>& parts, int dim) {
  std::string out;
  if (dim == 0) {
    for (const auto* p : parts)
      out += bytes_of(*p);
    return out;
  }
  const int64_t rows = parts.front()->shape[0];
  for (int64_t r = 0; r < rows; ++r) {
    for (const auto* p : parts) {
      const size_t row_bytes = p->nbytes() / static_cast<size_t>(rows);
      out.append(static_cast<const char*>(p->data()) + static_cast<size_t>(r) * row_bytes, row_bytes);
    }
  }
  return out;
}

int split_dim(const std::string& name) {
  return name.find("o_proj.weight") != std::string::npos || name.find("down_proj") != std::string::npos ? 1 : 0;
}

/// Loads every rank of `tp` and checks that the slices put back together are the tp-1 tensors.
void check_tp_concat(const model_config& cfg, const std::filesystem::path& dir, int tp) {
  CAPTURE(tp);
  const model_weights full = load_weights(cfg, llama_weight_table(cfg, {}), dir, {});
  std::vector<model_weights> ranks;
  for (int r = 0; r < tp; ++r) {
    shard_spec shard{r, tp};
    ranks.push_back(load_weights(cfg, llama_weight_table(cfg, shard), dir, shard));
    CHECK(ranks.back().size() == full.size());
  }
  size_t rank_bytes = 0;
  for (const auto& w : ranks)
    rank_bytes += w.total_bytes();
  for (const auto& [name, tensor] : full.tensors()) {
    CAPTURE(name);
    std::vector<const host_tensor*> parts;
    for (const auto& w : ranks)
      parts.push_back(&w.get(name));
    const bool replicated = name.find("norm") != std::string::npos || name.find("o_proj.bias") != std::string::npos;
    if (replicated) {
      for (const auto* p : parts)
        CHECK(same_bytes(bytes_of(*p), bytes_of(tensor)));
      continue;
    }
    const bool kv = name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos;
    if (kv && tp > cfg.n_head_kv) {  // each kv head on tp / n_head_kv consecutive ranks: join one of each group
      const size_t group = static_cast<size_t>(tp / cfg.n_head_kv);
      std::vector<const host_tensor*> distinct;
      for (size_t r = 0; r < parts.size(); ++r) {
        CHECK(same_bytes(bytes_of(*parts[r]), bytes_of(*parts[r - r % group])));
        if (r % group == 0)
          distinct.push_back(parts[r]);
      }
      parts = distinct;
    }
    CHECK(same_bytes(concat(parts, split_dim(name)), bytes_of(tensor)));
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
      int64_t offset = 0;
      for (const auto* p : parts) {
        CHECK(p->row_offset == offset);
        offset += p->shape[0];
      }
    }
  }
  CHECK(rank_bytes >= full.total_bytes());
}

}  // namespace

TEST_CASE("weight table: stories260K declares exactly the checkpoint's 47 tensors") {
  const model_config cfg = load_model_config(stories_dir());
  const weight_table table = llama_weight_table(cfg, {});
  REQUIRE(table.weights.size() == 47);
  std::set<std::string> declared;
  for (const auto& w : table.weights)
    declared.insert(w.name);
  auto names = safetensors_checkpoint::open(stories_dir()).names();
  CHECK(declared == std::set<std::string>(names.begin(), names.end()));
  CHECK(table.find("lm_head.weight") == nullptr);  // tied

  const weight_decl* q = table.find("model.layers.2.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  CHECK(q->kind == shard_kind::column);
  CHECK(q->shape == std::vector<int64_t>{64, 64});
  CHECK(q->n_units == 8);
  CHECK(q->unit_size == 8);
  CHECK_FALSE(q->allow_replication);
  const weight_decl* k = table.find("model.layers.2.self_attn.k_proj.weight");
  CHECK(k->shape == std::vector<int64_t>{32, 64});
  CHECK(k->n_units == 4);
  CHECK(k->allow_replication);
  CHECK(table.find("model.layers.0.self_attn.o_proj.weight")->kind == shard_kind::row);
  CHECK(table.find("model.layers.0.mlp.down_proj.weight")->kind == shard_kind::row);
  CHECK(table.find("model.layers.0.mlp.down_proj.weight")->n_units == 172);
  CHECK(table.find("model.layers.0.mlp.up_proj.weight")->kind == shard_kind::column);
  CHECK(table.find("model.embed_tokens.weight")->kind == shard_kind::vocab);
  CHECK(table.find("model.norm.weight")->kind == shard_kind::replicated);
  CHECK(table.find("model.layers.4.input_layernorm.weight")->kind == shard_kind::replicated);
}

TEST_CASE("weight table: Qwen2 biases, Qwen3 q/k norms, Llama o_proj bias, untied lm_head and stages") {
  const std::string qwen2 = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
      "intermediate_size": 4864, "num_hidden_layers": 2, "num_attention_heads": 14, "num_key_value_heads": 2,
      "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": true})";
  weight_table t = llama_weight_table(parse_model_config(qwen2, "qwen2/config.json"), {1, 2});
  const weight_decl* kb = t.find("model.layers.1.self_attn.k_proj.bias");
  REQUIRE(kb != nullptr);
  CHECK(kb->kind == shard_kind::column);
  CHECK(kb->shape == std::vector<int64_t>{128});
  CHECK(kb->allow_replication);
  CHECK(t.find("model.layers.0.self_attn.q_proj.bias") != nullptr);
  CHECK(t.find("model.layers.0.self_attn.v_proj.bias") != nullptr);
  CHECK(t.find("model.layers.0.self_attn.o_proj.bias") == nullptr);
  CHECK(t.find("model.layers.0.self_attn.q_norm.weight") == nullptr);
  CHECK(t.weights.size() == 1 + 2 * 12 + 1);
  // tp 2 with 2 kv heads: one each. 14 q heads / 2 = 7.
  CHECK(slice_for(*kb, 1, 2).begin == 64);
  CHECK(slice_for(*t.find("model.layers.0.self_attn.q_proj.weight"), 1, 2).shape == std::vector<int64_t>{448, 896});

  const std::string qwen3 = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
      "intermediate_size": 3072, "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": true})";
  t = llama_weight_table(parse_model_config(qwen3, "qwen3/config.json"), {});
  const weight_decl* qn = t.find("model.layers.1.self_attn.q_norm.weight");
  REQUIRE(qn != nullptr);
  CHECK(qn->kind == shard_kind::replicated);
  CHECK(qn->shape == std::vector<int64_t>{128});
  CHECK(t.find("model.layers.1.self_attn.k_norm.weight") != nullptr);
  CHECK(t.find("model.layers.1.self_attn.q_proj.weight")->shape == std::vector<int64_t>{2048, 1024});
  CHECK(t.find("model.layers.1.self_attn.o_proj.weight")->shape == std::vector<int64_t>{1024, 2048});
  CHECK(t.find("model.layers.1.self_attn.q_proj.bias") == nullptr);

  model_config llama = parse_model_config(synthetic_config(false, R"(, "attention_bias": true)"), "config.json");
  t = llama_weight_table(llama, {});
  REQUIRE(t.find("model.layers.0.self_attn.o_proj.bias") != nullptr);
  CHECK(t.find("model.layers.0.self_attn.o_proj.bias")->kind == shard_kind::replicated);
  CHECK(t.find("lm_head.weight")->kind == shard_kind::vocab);

  // Untied pipeline stages: embed only first, norm + lm_head only last.
  model_config untied = parse_model_config(synthetic_config(false), "config.json");
  weight_table first = llama_weight_table(untied, {0, 1, 0, 1});
  CHECK(first.find("model.embed_tokens.weight") != nullptr);
  CHECK(first.find("lm_head.weight") == nullptr);
  CHECK(first.find("model.norm.weight") == nullptr);
  weight_table last = llama_weight_table(untied, {0, 1, 1, 3});
  CHECK(last.find("model.embed_tokens.weight") == nullptr);
  CHECK(last.find("lm_head.weight") != nullptr);
  CHECK(last.find("model.norm.weight") != nullptr);
  CHECK(last.find("model.layers.0.input_layernorm.weight") == nullptr);
  CHECK(last.find("model.layers.2.input_layernorm.weight") != nullptr);
}

TEST_CASE("weight table: splits that do not divide are refused naming the numbers") {
  const model_config stories = load_model_config(stories_dir());
  // n_head 8 and n_head_kv 4 allow tp 8 (kv heads replicated twice); intermediate_size 172 splits unevenly
  // (21 or 22 rows per rank), which is exact for the MLP.
  weight_table tp8 = llama_weight_table(stories, {3, 8});
  CHECK(slice_for(*tp8.find("model.layers.0.mlp.gate_proj.weight"), 3, 8).shape[0] == 22);  // rows [64, 86)
  CHECK(slice_for(*tp8.find("model.layers.0.mlp.down_proj.weight"), 0, 8).shape[1] == 21);  // cols [0, 21)
  CHECK(mentions(error_of([&] { slice_for(*tp8.find("model.layers.0.mlp.up_proj.weight"), 0, 200); }),
                 {"mlp.up_proj.weight", "intermediate_size 172 is not divisible by tensor_parallel_size 200"}));
  CHECK(mentions(error_of([&] {
                   llama_weight_table(stories, {0, 3});
                 }),
                 {"q_proj", "num_attention_heads 8 is not divisible by tensor_parallel_size 3"}));
  CHECK(mentions(error_of([&] { llama_weight_table(stories, {0, 16}); }), {"num_attention_heads 8", "16"}));

  const std::string gqa = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 48, "intermediate_size": 96,
      "num_hidden_layers": 1, "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 50,
      "max_position_embeddings": 64})";
  const model_config cfg = parse_model_config(gqa, "config.json");
  CHECK(mentions(error_of([&] {
                   llama_weight_table(cfg, {0, 3});
                 }),
                 {"k_proj", "num_key_value_heads 4 is not divisible by tensor_parallel_size 3"}));
  CHECK(mentions(error_of([&] {
                   llama_weight_table(cfg, {0, 6});
                 }),
                 {"k_proj", "num_key_value_heads 4", "tensor_parallel_size 6"}));
  CHECK_NOTHROW(llama_weight_table(cfg, {0, 12}));  // 12 % 4 == 0: each kv head on 3 ranks; 96 % 12 == 0

  // Sizes whose products overflow are refused before anything computes with them.
  const std::string absurd = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 2147483646,
      "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 2,
      "vocab_size": 2147483647, "max_position_embeddings": 64})";
  CHECK(mentions(error_of([&] { llama_weight_table(parse_model_config(absurd, "config.json"), {}); }),
                 {"model.embed_tokens.weight", "too large"}));

  // Shard specs that name no valid part of the model.
  CHECK(mentions(error_of([&] { llama_weight_table(stories, {2, 2}); }), {"rank 2"}));
  CHECK(mentions(error_of([&] { llama_weight_table(stories, {0, 0}); }), {"tensor_parallel_size 0"}));
  CHECK(mentions(error_of([&] { llama_weight_table(stories, {0, 1, 3, 9}); }), {"[3, 9)", "5 layers"}));
  CHECK(mentions(error_of([&] { llama_weight_table(stories, {0, 1, 2, 2}); }), {"[2, 2)"}));
  CHECK(mentions(error_of([&] { llama_weight_table(stories, {0, 1, -1, 2}); }), {"[-1, 2)"}));
}

TEST_CASE("weight table: slices of kv heads are replicated to match the q heads each rank holds") {
  const model_config cfg = parse_model_config(synthetic_config(), "config.json");  // 8 q heads, 2 kv heads
  for (int tp : {1, 2, 4, 8}) {
    const weight_table t = llama_weight_table(cfg, {0, tp});
    const weight_decl& q = *t.find("model.layers.0.self_attn.q_proj.weight");
    const weight_decl& k = *t.find("model.layers.0.self_attn.k_proj.weight");
    for (int r = 0; r < tp; ++r) {
      CAPTURE(tp);
      CAPTURE(r);
      const tensor_slice qs = slice_for(q, r, tp);
      const tensor_slice ks = slice_for(k, r, tp);
      const int64_t first_q_head = qs.begin / cfg.head_dim;
      const int64_t last_q_head = qs.end / cfg.head_dim - 1;
      const int64_t group = cfg.n_head / cfg.n_head_kv;  // q heads per kv head
      // The kv heads this rank holds are exactly those its q heads attend with.
      CHECK(ks.begin / cfg.head_dim == first_q_head / group);
      CHECK(ks.end / cfg.head_dim - 1 == last_q_head / group);
      CHECK(qs.shape[0] == cfg.n_head * cfg.head_dim / tp);
      CHECK(ks.shape[0] == std::max<int64_t>(1, cfg.n_head_kv / tp) * cfg.head_dim);
    }
  }
}

TEST_CASE("loader: stories260K loads fully with tied embeddings") {
  const model_config cfg = load_model_config(stories_dir());
  const model_weights w = load_weights(cfg, llama_weight_table(cfg, {}), stories_dir(), {});
  CHECK(w.size() == 47);
  CHECK(w.find("lm_head.weight") == nullptr);
  const host_tensor& embed = w.get("model.embed_tokens.weight");
  CHECK(embed.type == dtype::f32);
  CHECK(embed.shape == std::vector<int64_t>{512, 64});
  CHECK(embed.row_offset == 0);
  CHECK(embed.is_view());                        // f32 kept as f32, in one piece: used in place in the file mapping
  CHECK(w.total_bytes() == 1044992 - 8 - 4856);  // every byte of the data section, once
  CHECK(mentions(error_of([&] { (void)w.get("lm_head.weight"); }), {"lm_head.weight"}));

  // Same bytes as the file.
  auto ckpt = safetensors_checkpoint::open(stories_dir());
  for (const auto& name : ckpt.names()) {
    CAPTURE(name);
    auto e = ckpt.find(name);
    const host_tensor& t = w.get(name);
    REQUIRE(t.nbytes() == e->info->nbytes());
    CHECK(std::memcmp(t.data(), e->file->data(*e->info), t.nbytes()) == 0);
  }

  // Converting on the way: f32 -> bf16 rounds each value.
  const model_weights b = load_weights(cfg, llama_weight_table(cfg, {}), stories_dir(), {}, dtype::bf16);
  const host_tensor& q = b.get("model.layers.1.self_attn.q_proj.weight");
  const host_tensor& q32 = w.get("model.layers.1.self_attn.q_proj.weight");
  REQUIRE(q.type == dtype::bf16);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < q.numel(); ++i)
    mismatches += q.data_as<uint16_t>()[i] != f32_to_bf16(q32.data_as<float>()[i]);
  CHECK(mismatches == 0);
  CHECK(b.total_bytes() * 2 == w.total_bytes());
}

TEST_CASE("loader: stories260K tp 1/2/4 slices concatenate to the full tensors") {
  const model_config cfg = load_model_config(stories_dir());
  for (int tp : {1, 2, 4})
    check_tp_concat(cfg, stories_dir(), tp);

  shard_spec shard{1, 4};
  const model_weights r1 = load_weights(cfg, llama_weight_table(cfg, shard), stories_dir(), shard);
  CHECK(r1.get("model.layers.0.self_attn.q_proj.weight").shape == std::vector<int64_t>{16, 64});
  CHECK(r1.get("model.layers.0.self_attn.k_proj.weight").shape == std::vector<int64_t>{8, 64});
  CHECK(r1.get("model.layers.0.self_attn.o_proj.weight").shape == std::vector<int64_t>{64, 16});
  CHECK(r1.get("model.layers.0.mlp.gate_proj.weight").shape == std::vector<int64_t>{43, 64});
  CHECK(r1.get("model.layers.0.mlp.down_proj.weight").shape == std::vector<int64_t>{64, 43});
  CHECK(r1.get("model.embed_tokens.weight").shape == std::vector<int64_t>{128, 64});
  CHECK(r1.get("model.embed_tokens.weight").row_offset == 128);
  CHECK(r1.get("model.norm.weight").shape == std::vector<int64_t>{64});
}

TEST_CASE("loader: sharded bf16 checkpoint, uneven vocab split and replicated kv heads") {
  const std::string config = synthetic_config(false, R"(, "attention_bias": true)");
  const auto dir = write_checkpoint(config, dtype::bf16, 3);
  const model_config cfg = load_model_config(dir);
  for (int tp : {1, 2, 4, 8})
    check_tp_concat(cfg, dir, tp);

  const model_weights full = load_weights(cfg, llama_weight_table(cfg, {}), dir, {});
  CHECK(full.get("model.layers.0.self_attn.q_proj.weight").type == dtype::bf16);
  // tp 4 > 2 kv heads: ranks 0,1 hold kv head 0 and ranks 2,3 kv head 1, biases too.
  for (int r = 0; r < 4; ++r) {
    shard_spec shard{r, 4};
    const model_weights w = load_weights(cfg, llama_weight_table(cfg, shard), dir, shard);
    for (std::string name : {"model.layers.2.self_attn.k_proj.weight", "model.layers.2.self_attn.v_proj.bias"}) {
      CAPTURE(name);
      const host_tensor& full_t = full.get(name);
      const host_tensor& part = w.get(name);
      const size_t head_bytes = full_t.nbytes() / 2;  // 2 kv heads
      CHECK(part.nbytes() == head_bytes);
      CHECK(same_bytes(bytes_of(part), bytes_of(full_t).substr(static_cast<size_t>(r / 2) * head_bytes, head_bytes)));
    }
    // vocab 30 in ranges of ceil(30/4) = 8 rows: the last rank has 6.
    CHECK(w.get("lm_head.weight").shape[0] == (r == 3 ? 6 : 8));
    CHECK(w.get("lm_head.weight").row_offset == 8 * r);
  }

  // Values: bf16 pattern read back exactly, converted to f32 on request.
  const model_weights f = load_weights(cfg, llama_weight_table(cfg, {}), dir, {}, dtype::f32);
  const auto ckpt = safetensors_checkpoint::open(dir);
  const auto names = ckpt.names();
  for (size_t i = 0; i < names.size(); ++i) {
    const host_tensor& t = f.get(names[i]);
    REQUIRE(t.type == dtype::f32);
    const host_tensor& raw = full.get(names[i]);
    int64_t mismatches = 0;
    for (int64_t j = 0; j < t.numel(); ++j)
      mismatches += t.data_as<float>()[j] != bf16_to_f32(raw.data_as<uint16_t>()[j]);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("loader: f16 checkpoint converts to bf16 and f32") {
  const auto dir = write_checkpoint(synthetic_config(true), dtype::f16, 1);
  const model_config cfg = load_model_config(dir);
  const auto table = llama_weight_table(cfg, {0, 2});
  const model_weights h = load_weights(cfg, table, dir, {0, 2});
  const model_weights b = load_weights(cfg, table, dir, {0, 2}, dtype::bf16);
  CHECK(h.size() == b.size());
  for (const auto& [name, t] : h.tensors()) {
    const host_tensor& bt = b.get(name);
    REQUIRE(bt.type == dtype::bf16);
    REQUIRE(bt.shape == t.shape);
    int64_t mismatches = 0;
    for (int64_t j = 0; j < t.numel(); ++j)
      mismatches += bt.data_as<uint16_t>()[j] != f32_to_bf16(f16_to_f32(t.data_as<uint16_t>()[j]));
    CHECK(mismatches == 0);
  }
}

TEST_CASE("loader: slices that keep their dtype and lie in one piece are used in place in the file mapping") {
  const auto dir = write_checkpoint(synthetic_config(false, R"(, "attention_bias": true)"), dtype::bf16, 2);
  const model_config cfg = load_model_config(dir);
  for (int tp : {1, 2}) {
    for (int r = 0; r < tp; ++r) {
      CAPTURE(tp);
      CAPTURE(r);
      const shard_spec shard{r, tp};
      const auto table = llama_weight_table(cfg, shard);
      const model_weights mapped = load_weights(cfg, table, dir, shard);
      const model_weights copied = load_weights(cfg, table, dir, shard, dtype::f32);  // converted: all copied
      for (const auto& [name, t] : mapped.tensors()) {
        CAPTURE(name);
        // Rows of a tensor are one run of the file; o_proj and down_proj split by columns are strided.
        const bool one_piece = tp == 1 || split_dim(name) == 0;
        CHECK(t.is_view() == one_piece);
        CHECK_FALSE(copied.get(name).is_view());
        if (t.is_view()) {
          const auto mapping = std::static_pointer_cast<const file_mapping>(t.view_owner());
          REQUIRE(mapping != nullptr);
          CHECK(mapping->contains(t.data()));
          CHECK(mapping->contains(static_cast<const std::byte*>(t.data()) + t.nbytes() - 1));
        }
        const host_tensor& c = copied.get(name);
        REQUIRE(c.shape == t.shape);
        CHECK(c.row_offset == t.row_offset);
        int64_t mismatches = 0;
        for (int64_t j = 0; j < t.numel(); ++j)
          mismatches += c.data_as<float>()[j] != bf16_to_f32(t.data_as<uint16_t>()[j]);
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("loader: a matrix's columns at tp 2 are copied when first read, named by their strided place in the file") {
  const auto dir = write_checkpoint(synthetic_config(), dtype::bf16, 2);
  const model_config cfg = load_model_config(dir);
  const model_weights whole = load_weights(cfg, llama_weight_table(cfg, {}), dir, {});
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    const shard_spec shard{r, 2};
    model_weights w = load_weights(cfg, llama_weight_table(cfg, shard), dir, shard);
    int columns = 0;
    for (const auto& [name, t] : whole.tensors()) {
      if (split_dim(name) != 1)
        continue;
      CAPTURE(name);
      ++columns;
      host_tensor* slice = w.find_mutable(name);
      REQUIRE(slice != nullptr);
      CHECK(slice->is_deferred());
      CHECK_FALSE(slice->is_view());
      const int64_t cols = t.shape[1], half = cols / 2;
      REQUIRE(slice->shape == std::vector<int64_t>{t.shape[0], half});
      // Named by the file, the place of its first element and the full row's length, without a copy.
      const auto mapping = std::static_pointer_cast<const file_mapping>(t.view_owner());
      REQUIRE(mapping != nullptr);
      file_origin expected = mapping->origin_of(static_cast<const std::byte*>(t.data()) + r * half * 2);
      expected.row_stride = static_cast<uint64_t>(cols) * 2;
      host_tensor moved = std::move(*slice);
      const tensor handle = std::move(moved).into_tensor();
      const std::optional<file_origin> o = handle.buf->origin();
      REQUIRE(o.has_value());
      CHECK(*o == expected);
      // Its bytes, copied when the backend first reads them: the columns of the whole tensor.
      const auto* full = static_cast<const uint16_t*>(t.data());
      const auto* got = static_cast<const uint16_t*>(handle.data());
      int64_t mismatches = 0;
      for (int64_t i = 0; i < t.shape[0]; ++i)
        for (int64_t j = 0; j < half; ++j)
          mismatches += got[i * half + j] != full[i * cols + r * half + j];
      CHECK(mismatches == 0);
    }
    CHECK(columns > 0);
  }
}

TEST_CASE("loader: writing to a weight used in place copies it first, and the file stays as it was") {
  const auto dir = write_checkpoint(synthetic_config(), dtype::bf16, 1);
  const model_config cfg = load_model_config(dir);
  model_weights w = load_weights(cfg, llama_weight_table(cfg, {}), dir, {});
  host_tensor* q = w.find_mutable("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  REQUIRE(q->is_view());
  const std::string before = bytes_of(*q);
  const void* in_file = std::as_const(*q).data();
  auto* data = static_cast<uint16_t*>(q->data());
  CHECK_FALSE(q->is_view());
  CHECK(data != in_file);
  CHECK(bytes_of(*q) == before);
  data[0] = static_cast<uint16_t>(data[0] ^ 0x7fff);
  const model_weights again = load_weights(cfg, llama_weight_table(cfg, {}), dir, {});
  CHECK(same_bytes(bytes_of(again.get("model.layers.0.self_attn.q_proj.weight")), before));
}

TEST_CASE("loader: the file mapping is released with the last weight used in place, through a model's backend") {
  const auto dir = write_checkpoint(synthetic_config(), dtype::bf16, 1);
  const std::string file = (dir / "model.safetensors").string();
  const auto mapped_now = [&] {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
      if (line.size() >= file.size() && line.compare(line.size() - file.size(), file.size(), file) == 0)
        return true;
    return false;
  };
  const model_config cfg = load_model_config(dir);
  const auto table = llama_weight_table(cfg, {});
  std::weak_ptr<const void> mapping;
  {
    model_weights w = load_weights(cfg, table, dir, {});
    mapping = w.get("model.embed_tokens.weight").view_owner();
    REQUIRE_FALSE(mapping.expired());
    CHECK(mapped_now());
    cpu::cpu_backend be{1};
    {
      const model_tensors bound = bind_weights(table, std::move(w), {}, be);
      CHECK_FALSE(mapping.expired());  // the embedding is computed from the mapping
      CHECK(mapped_now());
      // A backend may rewrite a weight in place (the expert balancer does): its own pages change, the file does not.
      const std::string before = bytes_of(load_weights(cfg, table, dir, {}).get("model.embed_tokens.weight"));
      const std::vector<std::byte> zeros(bound.embed.nbytes());
      be.upload(bound.embed, zeros.data(), zeros.size());
      std::vector<std::byte> back(zeros.size(), std::byte{1});
      be.download(bound.embed, back.data(), back.size());
      CHECK(back == zeros);
      CHECK(same_bytes(bytes_of(load_weights(cfg, table, dir, {}).get("model.embed_tokens.weight")), before));
    }
    CHECK(mapping.expired());
  }
  CHECK(mapping.expired());
  CHECK_FALSE(mapped_now());
}

TEST_CASE("loader: layer ranges load only their layers") {
  const model_config cfg = load_model_config(stories_dir());
  auto load = [&](shard_spec s) { return load_weights(cfg, llama_weight_table(cfg, s), stories_dir(), s); };
  auto layers_of = [](const model_weights& w) {
    std::set<int> layers;
    for (const auto& [name, t] : w.tensors())
      if (name.rfind("model.layers.", 0) == 0)
        layers.insert(std::stoi(name.substr(13)));
    return layers;
  };

  const model_weights first = load({0, 1, 0, 2});
  CHECK(layers_of(first) == std::set<int>{0, 1});
  CHECK(first.find("model.embed_tokens.weight") != nullptr);
  CHECK(first.find("model.norm.weight") == nullptr);
  CHECK(first.size() == 1 + 2 * 9);

  const model_weights middle = load({0, 1, 2, 3});
  CHECK(layers_of(middle) == std::set<int>{2});
  CHECK(middle.size() == 9);

  const model_weights last = load({1, 2, 3, -1});  // tied: the last stage needs the embedding as its lm_head
  CHECK(layers_of(last) == std::set<int>{3, 4});
  CHECK(last.find("model.embed_tokens.weight") != nullptr);
  CHECK(last.get("model.embed_tokens.weight").row_offset == 256);
  CHECK(last.find("model.norm.weight") != nullptr);
  CHECK(last.size() == 2 + 2 * 9);
}

TEST_CASE("loader: missing tensors and wrong shapes are named") {
  const std::string config = synthetic_config();
  auto missing_dir = write_checkpoint(config, dtype::f32, 2, [](auto& tensors) {
    std::erase_if(tensors, [](const auto& t) {
      return t.name == "model.layers.1.mlp.up_proj.weight" || t.name == "lm_head.weight";
    });
  });
  const model_config cfg = load_model_config(missing_dir);
  CHECK(mentions(error_of([&] { load_weights(cfg, llama_weight_table(cfg, {}), missing_dir, {}); }),
                 {missing_dir.string(), "2 required", "'model.layers.1.mlp.up_proj.weight'", "'lm_head.weight'"}));
  // A first stage does not need what is missing.
  CHECK(load_weights(cfg, llama_weight_table(cfg, {0, 1, 0, 1}), missing_dir, {0, 1, 0, 1}).size() == 10);

  auto shape_dir = write_checkpoint(config, dtype::f32, 1, [](auto& tensors) {
    for (auto& t : tensors)
      if (t.name == "model.layers.2.mlp.gate_proj.weight")
        t.shape = {32, 16};  // transposed: same byte count, wrong shape
  });
  CHECK(
      mentions(error_of([&] { load_weights(cfg, llama_weight_table(cfg, {}), shape_dir, {}); }),
               {"model.safetensors", "'model.layers.2.mlp.gate_proj.weight'", "shape [32, 16]", "expected [16, 32]"}));

  // A config whose sizes disagree with the checkpoint's: every tensor of that size is wrong, the first is named.
  auto other = parse_model_config(synthetic_config(false, {}, 31), "config.json");
  CHECK(other.n_vocab == 31);
  CHECK(mentions(error_of([&] { load_weights(other, llama_weight_table(other, {}), shape_dir, {}); }),
                 {"'model.embed_tokens.weight'", "[30, 32]", "[31, 32]"}));

  auto empty = test_util::temp_dir("actorllm-ckpt");
  CHECK(mentions(error_of([&] { load_weights(cfg, llama_weight_table(cfg, {}), empty, {}); }), {empty.string()}));
}

TEST_CASE("dummy weights: deterministic, HF-like ranges, and TP slices of one full tensor") {
  const model_config cfg = load_model_config(stories_dir());
  const weight_table table = llama_weight_table(cfg, {});
  const model_weights a = make_dummy_weights(cfg, table, {}, dtype::f32, 42);
  const model_weights again = make_dummy_weights(cfg, table, {}, dtype::f32, 42);
  const model_weights other = make_dummy_weights(cfg, table, {}, dtype::f32, 43);
  REQUIRE(a.size() == 47);
  CHECK(a.total_bytes() == 1044992 - 8 - 4856);
  for (const auto& [name, t] : a.tensors()) {
    CAPTURE(name);
    CHECK(t.type == dtype::f32);
    CHECK(t.shape == table.find(name)->shape);
    CHECK(same_bytes(bytes_of(t), bytes_of(again.get(name))));
    CHECK(!same_bytes(bytes_of(t), bytes_of(other.get(name))));
    const float* v = t.data_as<float>();
    const bool norm = name.find("norm") != std::string::npos;
    double sum = 0, sum_sq = 0;
    int64_t out_of_range = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      out_of_range += norm ? !(std::fabs(v[i] - 1.0f) <= 0.021f) : !(std::fabs(v[i]) <= 0.0347f);
      sum += v[i];
      sum_sq += static_cast<double>(v[i]) * v[i];
    }
    CHECK(out_of_range == 0);
    if (!norm && t.numel() > 10000) {  // uniform with std 0.02
      const double mean = sum / static_cast<double>(t.numel());
      CHECK(std::fabs(mean) < 0.001);
      CHECK(std::sqrt(sum_sq / static_cast<double>(t.numel()) - mean * mean) == doctest::Approx(0.02).epsilon(0.03));
    }
  }
  // Different tensors get different streams, even where the shapes match.
  CHECK(!same_bytes(bytes_of(a.get("model.layers.0.mlp.gate_proj.weight")),
                    bytes_of(a.get("model.layers.0.mlp.up_proj.weight"))));

  // bf16 and f16 dummies are the f32 ones rounded (to nearest even, whichever code path converts).
  const model_weights b = make_dummy_weights(cfg, table, {}, dtype::bf16, 42);
  const model_weights h = make_dummy_weights(cfg, table, {}, dtype::f16, 42);
  for (const auto& [name, f] : a.tensors()) {
    CAPTURE(name);
    const host_tensor& bt = b.get(name);
    const host_tensor& ht = h.get(name);
    REQUIRE(bt.numel() == f.numel());
    REQUIRE(ht.numel() == f.numel());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < f.numel(); ++i) {
      mismatches += bt.data_as<uint16_t>()[i] != f32_to_bf16(f.data_as<float>()[i]);
      mismatches += ht.data_as<uint16_t>()[i] != f32_to_f16(f.data_as<float>()[i]);
    }
    CHECK(mismatches == 0);
  }

  // TP slices (and layer ranges) of one seed are slices of the same full tensors.
  for (int tp : {2, 4}) {
    CAPTURE(tp);
    std::vector<model_weights> ranks;
    for (int r = 0; r < tp; ++r)
      ranks.push_back(make_dummy_weights(cfg, llama_weight_table(cfg, {r, tp}), {r, tp}, dtype::f32, 42));
    for (const auto& [name, t] : a.tensors()) {
      CAPTURE(name);
      std::vector<const host_tensor*> parts;
      for (const auto& w : ranks)
        parts.push_back(&w.get(name));
      if (name.find("norm") != std::string::npos)
        CHECK(same_bytes(bytes_of(*parts[1]), bytes_of(t)));
      else
        CHECK(same_bytes(concat(parts, split_dim(name)), bytes_of(t)));
    }
    CHECK(ranks[1].get("model.embed_tokens.weight").row_offset == 512 / tp);
  }
  const shard_spec stage{0, 1, 2, 4};
  const model_weights mid = make_dummy_weights(cfg, llama_weight_table(cfg, stage), stage, dtype::f32, 42);
  CHECK(mid.size() == 2 * 9);
  CHECK(same_bytes(bytes_of(mid.get("model.layers.3.mlp.down_proj.weight")),
                   bytes_of(a.get("model.layers.3.mlp.down_proj.weight"))));
}

TEST_CASE("dummy weights: kv heads replicated past n_head_kv match the full tensor") {
  const model_config cfg = parse_model_config(synthetic_config(), "config.json");
  const model_weights full = make_dummy_weights(cfg, llama_weight_table(cfg, {}), {}, dtype::f16, 7);
  for (int r = 0; r < 8; ++r) {
    const model_weights w = make_dummy_weights(cfg, llama_weight_table(cfg, {r, 8}), {r, 8}, dtype::f16, 7);
    const host_tensor& v = w.get("model.layers.1.self_attn.v_proj.weight");
    const std::string all = bytes_of(full.get("model.layers.1.self_attn.v_proj.weight"));
    CHECK(same_bytes(bytes_of(v), all.substr(static_cast<size_t>(r / 4) * v.nbytes(), v.nbytes())));
    CHECK(w.get("lm_head.weight").shape[0] == (r < 7 ? 4 : 2));  // ceil(30/8) = 4 rows; 28..29 on rank 7
  }
}
