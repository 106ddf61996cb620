// The PEFT LoRA adapter loader: adapters written by the test (and one by scripts/make_lora_adapter.py) against small
// configs, checked for what inspect reports, the exact matrices at tp 1, TP slices that put the tp 1 matrices back
// together, pipeline stages, 16-bit storage, and a named refusal for everything the engine would not apply.
#include "model/lora_adapter.hpp"

#include "model/model_source.hpp"
#include "model/weight_table.hpp"
#include "model_test_util.hpp"
#include "reference_llama.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <tuple>

using namespace actorllm;
using namespace actorllm::model;
using test_util::error_of;
using test_util::mentions;

namespace {

constexpr std::array<lora_target, n_lora_targets> every_target{lora_target::q,   lora_target::k,    lora_target::v,
                                                               lora_target::o,   lora_target::gate, lora_target::up,
                                                               lora_target::down};

/// hidden 32, 8 heads of 4, 2 kv heads, intermediate 24, 3 layers: tp 2, 4 and 8 split every module (kv heads
/// replicated past 2).
model_config small_config() {
  return parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
      "intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2,
      "head_dim": 4, "vocab_size": 40, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
      "tie_word_embeddings": false, "torch_dtype": "float32"})",
                            "config.json");
}

/// Qwen2-MoE with a dense MLP on layer 0 (mlp_only_layers) and experts on layer 1.
model_config moe_config() {
  return parse_model_config(R"({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
      "hidden_size": 32, "intermediate_size": 24, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 16,
      "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": false, "num_hidden_layers": 2,
      "mlp_only_layers": [0], "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 40,
      "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float32",
      "tie_word_embeddings": false})",
                            "config.json");
}

bool is_attention(lora_target t) { return static_cast<int>(t) <= static_cast<int>(lora_target::o); }

std::string module_of(int64_t layer, lora_target t) {
  return fmt::format("model.layers.{}.{}.{}", layer, is_attention(t) ? "self_attn" : "mlp", lora_target_module(t));
}

/// [out_features, in_features] of the base Linear layer `t` modifies.
std::pair<int64_t, int64_t> linear_shape(const model_config& cfg, lora_target t) {
  const int64_t q = cfg.n_head * cfg.head_dim, kv = cfg.n_head_kv * cfg.head_dim;
  switch (t) {
    case lora_target::q:
      return {q, cfg.n_embd};
    case lora_target::k:
    case lora_target::v:
      return {kv, cfg.n_embd};
    case lora_target::o:
      return {cfg.n_embd, q};
    case lora_target::gate:
    case lora_target::up:
      return {cfg.n_ff, cfg.n_embd};
    case lora_target::down:
      return {cfg.n_embd, cfg.n_ff};
  }
  return {0, 0};
}

/// A distinct salt per (layer, target, matrix), so that no two matrices hold the same values.
int salt_of(int64_t layer, lora_target t, int ab) {
  return static_cast<int>(layer * 20 + static_cast<int64_t>(t) * 2 + ab + 1);
}

/// What to write: adapter_config.json (PEFT's keys at their defaults, then `keys` set or removed) and every tensor
/// of every layer for `targets` (pattern values: exact in bf16 and f16 too), then `edit` on the tensor list.
struct adapter_spec {
  int64_t rank = 4;
  std::string alpha = "8";
  std::string target_modules;  ///< JSON; empty: the list of `targets`
  std::vector<lora_target> targets{lora_target::q, lora_target::v};
  bool rslora = false;
  dtype type = dtype::f32;
  std::string segment;  ///< an adapter name between lora_A and weight ("default")
  /// adapter_config.json keys to set (key, JSON value) after the ones above; an empty value removes the key.
  std::vector<std::pair<std::string, std::string>> keys;
  std::function<void(std::vector<test_util::test_tensor>&)> edit;
  std::optional<std::vector<int64_t>> layers;  ///< the layers to write tensors for (all by default)
};

std::string tensor_name(int64_t layer, lora_target t, char ab, const std::string& segment = {}) {
  return fmt::format("base_model.model.{}.lora_{}.{}weight", module_of(layer, t), ab,
                     segment.empty() ? std::string{} : segment + ".");
}

std::string config_text(const adapter_spec& s) {
  std::string targets = s.target_modules;
  if (targets.empty()) {
    std::vector<std::string> quoted;
    for (lora_target t : s.targets)
      quoted.push_back(fmt::format("\"{}\"", lora_target_module(t)));
    targets = fmt::format("[{}]", fmt::join(quoted, ", "));
  }
  std::vector<std::pair<std::string, std::string>> keys{
      {"peft_type", "\"LORA\""},
      {"task_type", "\"CAUSAL_LM\""},
      {"base_model_name_or_path", "\"x\""},
      {"inference_mode", "true"},
      {"lora_dropout", "0.05"},
      {"revision", "null"},
      {"init_lora_weights", "true"},
      {"bias", "\"none\""},
      {"use_dora", "false"},
      {"fan_in_fan_out", "false"},
      {"modules_to_save", "null"},
      {"layers_to_transform", "null"},
      {"layers_pattern", "null"},
      {"rank_pattern", "{}"},
      {"alpha_pattern", "{}"},
      {"r", std::to_string(s.rank)},
      {"lora_alpha", s.alpha},
      {"target_modules", targets},
      {"use_rslora", s.rslora ? "true" : "false"},
  };
  for (const auto& [key, value] : s.keys) {
    auto it = std::find_if(keys.begin(), keys.end(), [&](const auto& kv) { return kv.first == key; });
    if (it != keys.end())
      keys.erase(it);
    if (!value.empty())
      keys.emplace_back(key, value);
  }
  std::vector<std::string> fields;
  for (const auto& [key, value] : keys)
    fields.push_back(fmt::format("\"{}\": {}", key, value));
  return fmt::format("{{{}}}", fmt::join(fields, ",\n  "));
}

std::filesystem::path write_adapter(const model_config& cfg, const adapter_spec& s) {
  auto dir = test_util::temp_dir("actorllm-lora");
  test_util::write_file(dir / "adapter_config.json", config_text(s));
  std::vector<test_util::test_tensor> tensors;
  for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
    if (s.layers && std::find(s.layers->begin(), s.layers->end(), layer) == s.layers->end())
      continue;
    for (lora_target t : s.targets) {
      if (!is_attention(t) && cfg.is_moe_layer(layer))
        continue;
      auto [n_out, n_in] = linear_shape(cfg, t);
      tensors.push_back(test_util::make_tensor(tensor_name(layer, t, 'A', s.segment), s.type, {s.rank, n_in},
                                               test_util::pattern(salt_of(layer, t, 0))));
      tensors.push_back(test_util::make_tensor(tensor_name(layer, t, 'B', s.segment), s.type, {n_out, s.rank},
                                               test_util::pattern(salt_of(layer, t, 1))));
    }
  }
  if (s.edit)
    s.edit(tensors);
  test_util::write_file(dir / "adapter_model.safetensors", test_util::make_safetensors(tensors));
  return dir;
}

/// The message of loading an adapter written from `s` against small_config() at tp 1.
std::string load_error(const adapter_spec& s, int64_t max_rank = 16) {
  const model_config cfg = small_config();
  const auto dir = write_adapter(cfg, s);
  return error_of([&] { load_lora_adapter(dir, cfg, shard_spec{}, max_rank); });
}

/// The message for an adapter_config.json with `key` set to `value` (removed when empty).
std::string config_error(const std::string& key, const std::string& value) {
  adapter_spec s;
  s.keys = {{key, value}};
  return load_error(s);
}

shard_spec tp_shard(int rank, int size) {
  shard_spec s;
  s.tp_rank = rank;
  s.tp_size = size;
  return s;
}

}  // namespace

TEST_CASE("lora adapter: inspect reports rank, alpha, scaling and targets") {
  const model_config cfg = small_config();
  adapter_spec s;
  s.rank = 4;
  s.alpha = "8";
  s.targets = {lora_target::q, lora_target::v, lora_target::down};
  lora_adapter_info info = inspect_lora_adapter(write_adapter(cfg, s), cfg, 16);
  CHECK(info.rank == 4);
  CHECK(info.alpha == 8.0);
  CHECK(info.scaling == 2.0);
  CHECK(info.targets == std::array<bool, n_lora_targets>{true, false, true, false, false, false, true});

  s.rslora = true;
  s.alpha = "6.5";
  info = inspect_lora_adapter(write_adapter(cfg, s), cfg, 16);
  CHECK(info.alpha == 6.5);
  CHECK(info.scaling == 6.5 / 2.0);  // / sqrt(4)

  SUBCASE("target_modules as a regular expression, \"all-linear\", full paths, or not stated") {
    adapter_spec r;
    r.targets = {lora_target::q, lora_target::k, lora_target::v, lora_target::o};
    r.target_modules = R"("model\\.layers\\.\\d+\\.self_attn\\.(q|k|v|o)_proj")";
    CHECK(inspect_lora_adapter(write_adapter(cfg, r), cfg, 16).targets ==
          std::array<bool, n_lora_targets>{true, true, true, true, false, false, false});
    r.targets = std::vector<lora_target>(every_target.begin(), every_target.end());
    r.target_modules = R"("all-linear")";
    CHECK(inspect_lora_adapter(write_adapter(cfg, r), cfg, 16).targets ==
          std::array<bool, n_lora_targets>{true, true, true, true, true, true, true});
    r.targets = {lora_target::up};
    r.target_modules = R"(["mlp.up_proj"])";
    CHECK(inspect_lora_adapter(write_adapter(cfg, r), cfg, 16).targets[static_cast<size_t>(lora_target::up)]);
    r.target_modules = "null";
    CHECK(inspect_lora_adapter(write_adapter(cfg, r), cfg, 16).targets ==
          std::array<bool, n_lora_targets>{false, false, false, false, false, true, false});
    // exclude_modules takes a module back out, as PEFT does
    r.targets = {lora_target::q};
    r.target_modules = R"(["q_proj", "v_proj"])";
    r.keys = {{"exclude_modules", R"(["v_proj"])"}};
    CHECK(inspect_lora_adapter(write_adapter(cfg, r), cfg, 16).targets ==
          std::array<bool, n_lora_targets>{true, false, false, false, false, false, false});
  }
  SUBCASE("an adapter name segment (lora_A.default.weight) is read like the plain name") {
    adapter_spec d = s;
    d.segment = "default";
    CHECK(inspect_lora_adapter(write_adapter(cfg, d), cfg, 16).rank == 4);
  }
}

TEST_CASE("lora adapter: tp 1 holds A exactly and scaling * B, per layer and target") {
  const model_config cfg = small_config();
  adapter_spec s;
  s.rank = 3;
  s.alpha = "5";
  s.targets = std::vector<lora_target>(every_target.begin(), every_target.end());
  const double scaling = 5.0 / 3.0;
  const lora_adapter a = load_lora_adapter(write_adapter(cfg, s), cfg, shard_spec{}, 8);
  CHECK(a.rank == 3);
  REQUIRE(a.layers.size() == 3);
  for (int64_t layer = 0; layer < 3; ++layer) {
    for (lora_target t : every_target) {
      CAPTURE(module_of(layer, t));
      const lora_matrices& m = a.layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
      auto [n_out, n_in] = linear_shape(cfg, t);
      REQUIRE(m.in == n_in);
      REQUIRE(m.out == n_out);
      REQUIRE(m.a.size() == static_cast<size_t>(3 * n_in));
      REQUIRE(m.b.size() == static_cast<size_t>(n_out * 3));
      const auto pa = test_util::pattern(salt_of(layer, t, 0));
      const auto pb = test_util::pattern(salt_of(layer, t, 1));
      for (size_t i = 0; i < m.a.size(); ++i)
        REQUIRE(m.a[i] == pa(static_cast<int64_t>(i)));
      for (size_t i = 0; i < m.b.size(); ++i)
        REQUIRE(m.b[i] == static_cast<float>(scaling * pb(static_cast<int64_t>(i))));
    }
  }

  SUBCASE("untargeted modules are empty") {
    adapter_spec q;
    q.targets = {lora_target::q};
    const lora_adapter only_q = load_lora_adapter(write_adapter(cfg, q), cfg, shard_spec{}, 8);
    CHECK_FALSE(only_q.layers[1][0].empty());
    for (size_t t = 1; t < n_lora_targets; ++t)
      CHECK(only_q.layers[1][t].empty());
  }
}

TEST_CASE("lora adapter: the tp 2, 4 and 8 slices put the tp 1 matrices back together") {
  const model_config cfg = small_config();
  adapter_spec s;
  s.targets = std::vector<lora_target>(every_target.begin(), every_target.end());
  const auto dir = write_adapter(cfg, s);
  const lora_adapter whole = load_lora_adapter(dir, cfg, shard_spec{}, 8);
  for (int tp : {2, 4, 8}) {
    std::vector<lora_adapter> ranks;
    for (int r = 0; r < tp; ++r)
      ranks.push_back(load_lora_adapter(dir, cfg, tp_shard(r, tp), 8));
    for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
      for (lora_target t : every_target) {
        CAPTURE(tp);
        CAPTURE(module_of(layer, t));
        const lora_matrices& w = whole.layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
        const bool kv = t == lora_target::k || t == lora_target::v;
        if (t == lora_target::o || t == lora_target::down) {
          // Row-parallel: each rank holds B whole and its contiguous columns of A.
          std::vector<float> a(w.a.size());
          int64_t col = 0;
          for (const lora_adapter& rank : ranks) {
            const lora_matrices& m = rank.layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
            REQUIRE(m.out == w.out);
            REQUIRE(m.b == w.b);
            REQUIRE(m.in == w.in / tp);
            for (int64_t k = 0; k < whole.rank; ++k)
              for (int64_t j = 0; j < m.in; ++j)
                a[static_cast<size_t>(k * w.in + col + j)] = m.a[static_cast<size_t>(k * m.in + j)];
            col += m.in;
          }
          CHECK(col == w.in);
          CHECK(a == w.a);
        } else if (kv && tp > cfg.n_head_kv) {
          // More ranks than kv heads: rank r holds kv head r / (tp / n_head_kv), shared with its neighbours.
          for (int r = 0; r < tp; ++r) {
            const lora_matrices& m =
                ranks[static_cast<size_t>(r)].layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
            const int64_t head = r / (tp / cfg.n_head_kv);
            REQUIRE(m.out == cfg.head_dim);
            CHECK(m.a == w.a);
            const auto begin = w.b.begin() + head * cfg.head_dim * whole.rank;
            CHECK(m.b == std::vector<float>(begin, begin + cfg.head_dim * whole.rank));
          }
        } else {
          // Column-parallel: each rank holds A whole and its contiguous rows of B.
          std::vector<float> b;
          for (const lora_adapter& rank : ranks) {
            const lora_matrices& m = rank.layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
            REQUIRE(m.in == w.in);
            REQUIRE(m.a == w.a);
            REQUIRE(m.out == w.out / tp);
            b.insert(b.end(), m.b.begin(), m.b.end());
          }
          CHECK(b == w.b);
        }
      }
    }
  }
}

TEST_CASE("lora adapter: a pipeline stage gets its own layers") {
  const model_config cfg = small_config();
  adapter_spec s;
  s.targets = {lora_target::q, lora_target::o, lora_target::up};
  const auto dir = write_adapter(cfg, s);
  const lora_adapter whole = load_lora_adapter(dir, cfg, shard_spec{}, 8);
  shard_spec stage;
  stage.layer_begin = 1;
  stage.layer_end = -1;
  const lora_adapter last = load_lora_adapter(dir, cfg, stage, 8);
  REQUIRE(last.layers.size() == 2);
  stage.layer_begin = 0;
  stage.layer_end = 1;
  const lora_adapter first = load_lora_adapter(dir, cfg, stage, 8);
  REQUIRE(first.layers.size() == 1);
  for (size_t t = 0; t < n_lora_targets; ++t) {
    CHECK(first.layers[0][t].a == whole.layers[0][t].a);
    CHECK(first.layers[0][t].b == whole.layers[0][t].b);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(last.layers[i][t].a == whole.layers[i + 1][t].a);
      CHECK(last.layers[i][t].b == whole.layers[i + 1][t].b);
    }
  }
  // A stage and TP together: stage [1, 3) at tp 2 rank 1 is rank 1 of the whole model's layers 1 and 2.
  shard_spec both = tp_shard(1, 2);
  both.layer_begin = 1;
  const lora_adapter r1 = load_lora_adapter(dir, cfg, both, 8);
  const lora_adapter r1_all = load_lora_adapter(dir, cfg, tp_shard(1, 2), 8);
  REQUIRE(r1.layers.size() == 2);
  for (size_t t = 0; t < n_lora_targets; ++t)
    CHECK(r1.layers[1][t].b == r1_all.layers[2][t].b);
}

TEST_CASE("lora adapter: bf16 and f16 adapters are read exactly") {
  const model_config cfg = small_config();
  for (dtype type : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(type));
    adapter_spec s;
    s.type = type;
    s.alpha = "4";  // scaling 1: b is B exactly
    s.targets = {lora_target::k, lora_target::down};
    const lora_adapter a = load_lora_adapter(write_adapter(cfg, s), cfg, shard_spec{}, 8);
    for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
      for (lora_target t : s.targets) {
        const lora_matrices& m = a.layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
        const auto pa = test_util::pattern(salt_of(layer, t, 0));
        const auto pb = test_util::pattern(salt_of(layer, t, 1));
        for (size_t i = 0; i < m.a.size(); ++i)
          REQUIRE(m.a[i] == pa(static_cast<int64_t>(i)));
        for (size_t i = 0; i < m.b.size(); ++i)
          REQUIRE(m.b[i] == pb(static_cast<int64_t>(i)));
      }
    }
  }
}

TEST_CASE("lora adapter: attention targets on a mixture-of-experts model, MLP targets only on its dense layers") {
  const model_config cfg = moe_config();
  REQUIRE(cfg.is_moe_layer(1));
  REQUIRE_FALSE(cfg.is_moe_layer(0));
  adapter_spec s;
  s.targets = {lora_target::q, lora_target::o};
  lora_adapter a = load_lora_adapter(write_adapter(cfg, s), cfg, shard_spec{}, 8);
  CHECK_FALSE(a.layers[1][static_cast<size_t>(lora_target::o)].empty());

  // Layer 0's MLP is dense: an adapter may modify it; layer 1 has no such module, and its matrices stay empty.
  s.targets = {lora_target::q, lora_target::gate};
  a = load_lora_adapter(write_adapter(cfg, s), cfg, shard_spec{}, 8);
  CHECK_FALSE(a.layers[0][static_cast<size_t>(lora_target::gate)].empty());
  CHECK(a.layers[1][static_cast<size_t>(lora_target::gate)].empty());

  SUBCASE("LoRA on an MoE layer's MLP is refused by tensor") {
    s.edit = [&](std::vector<test_util::test_tensor>& t) {
      t.push_back(
          test_util::make_tensor(tensor_name(1, lora_target::gate, 'A'), dtype::f32, {4, 32}, test_util::pattern(1)));
    };
    const auto dir = write_adapter(cfg, s);
    CHECK(mentions(error_of([&] { inspect_lora_adapter(dir, cfg, 8); }),
                   {"adapter_model.safetensors", tensor_name(1, lora_target::gate, 'A'), "mixture-of-experts"}));
    s.edit = [&](std::vector<test_util::test_tensor>& t) {
      t.push_back(test_util::make_tensor("base_model.model.model.layers.1.mlp.experts.0.gate_proj.lora_A.weight",
                                         dtype::f32, {4, 32}, test_util::pattern(1)));
    };
    const auto experts = write_adapter(cfg, s);
    CHECK(mentions(error_of([&] { inspect_lora_adapter(experts, cfg, 8); }),
                   {"model.layers.1.mlp.experts.0.gate_proj.lora_A.weight", "mixture-of-experts"}));
  }
}

TEST_CASE("lora adapter: adapter_config.json keys that change the math are refused by name [asan]") {
  // {key, value, what the message must name besides the key}
  const std::vector<std::tuple<std::string, std::string, std::vector<std::string>>> cases{
      {"use_dora", "true", {"DoRA"}},
      {"bias", R"("all")", {"all"}},
      {"bias", R"("lora_only")", {"lora_only"}},
      {"lora_bias", "true", {}},
      {"modules_to_save", R"(["lm_head"])", {}},
      {"fan_in_fan_out", "true", {}},
      {"layers_to_transform", "[0, 1]", {}},
      {"layers_pattern", R"("layers")", {}},
      {"rank_pattern", R"({"q_proj": 8})", {}},
      {"alpha_pattern", R"({"q_proj": 16})", {}},
      {"use_qalora", "true", {}},
      {"layer_replication", "[[0, 2]]", {}},
      {"trainable_token_indices", "[3, 4]", {}},
      {"target_parameters", R"(["mlp.experts.gate_up_proj"])", {}},
      {"alora_invocation_tokens", "[5]", {}},
      {"peft_type", R"("IA3")", {"IA3"}},
      {"use_rslora", R"("yes")", {"true or false"}},
      {"r", "", {"missing"}},
      {"r", "4.5", {"integer"}},
      {"lora_alpha", "", {"missing"}},
  };
  for (const auto& [key, value, parts] : cases) {
    CAPTURE(key);
    CAPTURE(value);
    const std::string msg = config_error(key, value);
    CHECK(mentions(msg, {"adapter_config.json", fmt::format("'{}'", key)}));
    for (const auto& p : parts)
      CHECK(mentions(msg, {p}));
  }
  // The defaults (and keys that only describe training, or that PEFT adds later) are fine.
  const model_config cfg = small_config();
  adapter_spec ok;
  ok.keys = {{"modules_to_save", "[]"},
             {"layers_pattern", "[]"},
             {"use_qalora", "false"},
             {"lora_bias", "false"},
             {"megatron_config", "null"},
             {"loftq_config", "{}"},
             {"init_lora_weights", R"("gaussian")"},
             {"some_future_key", "1"},
             {"peft_type", ""}};
  CHECK(inspect_lora_adapter(write_adapter(cfg, ok), cfg, 16).rank == 4);
}

TEST_CASE("lora adapter: rank, alpha and target_modules are checked by name [asan]") {
  adapter_spec s;
  s.rank = 32;
  CHECK(mentions(load_error(s, 16), {"adapter_config.json", "'r'", "32", "max_lora_rank 16"}));
  s.rank = 0;
  CHECK(mentions(load_error(s), {"'r'", "at least 1"}));
  s = {};
  s.alpha = "\"8\"";
  CHECK(mentions(load_error(s), {"lora_alpha", "must be a number"}));
  s = {};
  s.target_modules = R"(["q_proj", "v_proj", "lm_head"])";
  CHECK(mentions(load_error(s), {"target_modules", "lm_head"}));
  s.target_modules = R"(["embed_tokens", "q_proj", "v_proj"])";
  CHECK(mentions(load_error(s), {"target_modules", "model.embed_tokens"}));
  s.target_modules = R"(".*")";
  CHECK(mentions(load_error(s), {"target_modules", "model.embed_tokens"}));
  s.target_modules = R"("model\\.layers\\.(?P<n>0)\\.self_attn\\.q_proj")";
  CHECK(mentions(load_error(s), {"target_modules", "regular expression"}));
  s.target_modules = R"(17)";
  CHECK(mentions(load_error(s), {"target_modules", "list of module names"}));
  // A regular expression (or a full path) that picks only some layers of a module.
  s.target_modules = R"("model\\.layers\\.[01]\\.self_attn\\.(q|v)_proj")";
  s.layers = std::vector<int64_t>{0, 1};
  CHECK(mentions(load_error(s), {"target_modules", "q_proj", "layers [0, 1]", "not in layers [2]"}));
  s.target_modules = R"(["model.layers.0.self_attn.q_proj"])";
  s.targets = {lora_target::q};
  s.layers = std::vector<int64_t>{0};
  CHECK(mentions(load_error(s), {"target_modules", "not in layers [1, 2]"}));
  // An adapter of rank 0 to max_lora_rank 0 is a caller's error, named.
  CHECK(mentions(load_error(adapter_spec{}, 0), {"max_lora_rank", "at least 1"}));
}

TEST_CASE("lora adapter: tensors the engine would not apply are refused by name [asan]") {
  using tensors = std::vector<test_util::test_tensor>;
  auto add = [](std::string name, std::vector<int64_t> shape, dtype type = dtype::f32) {
    return [name, shape, type](tensors& t) {
      t.push_back(test_util::make_tensor(name, type, shape, test_util::pattern(3)));
    };
  };
  // {edit, what the message must name}
  const std::vector<std::pair<std::function<void(tensors&)>, std::vector<std::string>>> cases{
      {add("base_model.model.model.embed_tokens.lora_embedding_A", {4, 40}),
       {"base_model.model.model.embed_tokens.lora_embedding_A", "embeddings"}},
      {add("base_model.model.lm_head.lora_A.weight", {4, 32}), {"base_model.model.lm_head.lora_A.weight", "lm_head"}},
      {add("base_model.model.model.embed_tokens.lora_A.weight", {4, 40}),
       {"base_model.model.model.embed_tokens.lora_A.weight", "embeddings"}},
      {add("base_model.model.model.layers.0.self_attn.rotary.lora_A.weight", {4, 32}),
       {"base_model.model.model.layers.0.self_attn.rotary.lora_A.weight", "model.layers.0.self_attn.rotary",
        "does not apply"}},
      {add("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {32}),
       {"lora_magnitude_vector", "DoRA"}},
      {add("base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias", {32}),
       {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias", "lora_bias"}},
      {add("base_model.model.model.layers.0.self_attn.q_proj.bias", {32}),
       {"base_model.model.model.layers.0.self_attn.q_proj.bias", "bias"}},
      {add("base_model.model.lm_head.weight", {40, 32}), {"base_model.model.lm_head.weight", "modules_to_save"}},
      {add("model.layers.0.self_attn.q_proj.lora_A.weight", {4, 32}),
       {"'model.layers.0.self_attn.q_proj.lora_A.weight'", "not a PEFT LoRA weight name"}},
      {add("base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight", {4, 32}),
       {"base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight", "layer 3", "3 layers"}},
      {add("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", {4, 32}),
       {"base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", "target_modules", "does not target"}},
      {add("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", {4, 32}),
       {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", "both lora_A"}},
      {[](tensors& t) {  // wrong shapes name the tensor, the expected and the found shape
         t[0] = test_util::make_tensor(t[0].name, dtype::f32, {4, 31}, test_util::pattern(1));
       },
       {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "[4, 31]", "expected [4, 32]"}},
      {[](tensors& t) {
         t[1] = test_util::make_tensor(t[1].name, dtype::f32, {32, 5}, test_util::pattern(1));
       },
       {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", "[32, 5]", "expected [32, 4]"}},
      {[](tensors& t) {
         t[2] = test_util::make_tensor(t[2].name, dtype::f32, {4, 32, 1}, test_util::pattern(1));
       },
       {"base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", "[4, 32, 1]", "expected [4, 32]"}},
      {[](tensors& t) {
         t[3] = test_util::make_tensor(t[3].name, dtype::i32, {8, 4}, test_util::pattern(1));
       },
       {"base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", "I32"}},
      {[](tensors& t) { t.erase(t.begin() + 7); },  // layer 1's v_proj lora_B
       {"base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight", "missing"}},
  };
  for (const auto& [edit, parts] : cases) {
    CAPTURE(parts.front());
    adapter_spec s;
    s.edit = edit;
    std::vector<std::string> want = parts;
    want.push_back("adapter_model.safetensors");
    const std::string msg = load_error(s);
    for (const auto& p : want)
      CHECK(mentions(msg, {p}));
  }
  SUBCASE("without target_modules, a module in some layers only is still refused") {
    adapter_spec s;
    s.target_modules = "null";
    s.layers = std::vector<int64_t>{0, 2};
    CHECK(mentions(load_error(s), {"base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight", "missing"}));
    s.layers = std::vector<int64_t>{};
    CHECK(mentions(load_error(s), {"modifies no module"}));
  }
}

TEST_CASE("lora adapter: missing directories and files are named [asan]") {
  const model_config cfg = small_config();
  const auto dir = test_util::temp_dir("actorllm-lora");
  CHECK(mentions(error_of([&] { inspect_lora_adapter(dir / "nope", cfg, 8); }), {"nope", "does not exist"}));
  CHECK(mentions(error_of([&] { inspect_lora_adapter(dir, cfg, 8); }), {dir.string(), "adapter_config.json"}));
  adapter_spec s;
  test_util::write_file(dir / "adapter_config.json", config_text(s));
  CHECK(mentions(error_of([&] { inspect_lora_adapter(dir, cfg, 8); }), {dir.string(), "adapter_model.safetensors"}));
  test_util::write_file(dir / "adapter_model.bin", "PK");
  CHECK(mentions(error_of([&] { inspect_lora_adapter(dir, cfg, 8); }),
                 {dir.string(), "adapter_model.bin", ".bin", "safetensors"}));
  test_util::write_file(dir / "adapter_config.json", "{\"r\": 4,");
  CHECK(mentions(error_of([&] { inspect_lora_adapter(dir, cfg, 8); }), {"adapter_config.json", "not valid JSON"}));
}

TEST_CASE("lora adapter: make_lora_adapter.py's adapter loads and changes stories260K's greedy continuations") {
  const auto model = test::model_dir("stories260K");
  const auto dir = test_util::temp_dir("actorllm-lora-script");
  const auto run = test::run_command(
      fmt::format("python3 -W error '{}/scripts/make_lora_adapter.py' --model '{}' --out '{}' --rank 8 --alpha 8 "
                  "--targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj --seed 3 --dtype bfloat16",
                  ACTORLLM_SOURCE_DIR, model.string(), dir.string()));
  REQUIRE(run.status == 0);

  auto loaded = load_shard(model, {}, {});
  const model_config& cfg = loaded.config;
  const lora_adapter_info info = inspect_lora_adapter(dir, cfg, 16);
  CHECK(info.rank == 8);
  CHECK(info.scaling == 1.0);
  CHECK(info.targets == std::array<bool, n_lora_targets>{true, true, true, true, true, true, true});
  const lora_adapter adapter = load_lora_adapter(dir, cfg, shard_spec{}, 16);

  // The merged model W + scaling * B A, by the float64 reference forward.
  model_weights merged = test_util::copy_weights(loaded.weights);
  for (int64_t layer = 0; layer < cfg.n_layer; ++layer) {
    for (lora_target t : every_target) {
      const lora_matrices& m = adapter.layers[static_cast<size_t>(layer)][static_cast<size_t>(t)];
      host_tensor* w = merged.find_mutable(module_of(layer, t) + ".weight");
      REQUIRE(w != nullptr);
      REQUIRE(w->type == dtype::f32);
      REQUIRE(w->shape == std::vector<int64_t>{m.out, m.in});
      float* data = w->data_as<float>();
      for (int64_t o = 0; o < m.out; ++o)
        for (int64_t i = 0; i < m.in; ++i) {
          double d = 0;
          for (int64_t k = 0; k < adapter.rank; ++k)
            d += static_cast<double>(m.b[static_cast<size_t>(o * adapter.rank + k)]) *
                 m.a[static_cast<size_t>(k * m.in + i)];
          data[o * m.in + i] = static_cast<float>(data[o * m.in + i] + d);
        }
    }
  }
  const std::vector<std::vector<int32_t>> prompts{{1, 403, 261, 104}, {1, 320, 104}, {1, 45, 400, 9, 288}, {1, 67, 68}};
  int changed = 0;
  for (const auto& p : prompts) {
    const auto base = test_util::reference_greedy(cfg, loaded.weights, p, 12);
    const auto tuned = test_util::reference_greedy(cfg, merged, p, 12);
    changed += base != tuned;
    // Noticeable but not overwhelming: the last position's logits move by some tenths of their size (0.17 to 0.37
    // for these prompts), not more than all of it.
    const auto l0 = test_util::reference_logits(cfg, loaded.weights, p);
    const auto l1 = test_util::reference_logits(cfg, merged, p);
    double diff = 0, norm = 0;
    for (size_t i = l0.size() - static_cast<size_t>(cfg.n_vocab); i < l0.size(); ++i) {
      diff += (l1[i] - l0[i]) * (l1[i] - l0[i]);
      norm += l0[i] * l0[i];
    }
    CHECK(std::sqrt(diff / norm) > 0.05);
    CHECK(std::sqrt(diff / norm) < 1.0);
  }
  CHECK(changed >= 1);
}
