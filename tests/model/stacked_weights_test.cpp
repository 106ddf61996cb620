// Stacked Linear weights (model/stacked_linear.hpp): a shard binds q|k|v_proj (with their biases) and gate|up_proj
// as one weight each, built from its tensor-parallel slices of the Hugging Face tensors (MoE experts and the shared
// expert their gate|up, tensor or expert parallel); the bound stacks hold exactly those slices' rows; and the dense
// architectures of the float64 reference (Llama, Mistral, Qwen2 with q/k/v biases and replicated kv heads, Qwen3 with
// q/k norms) give the reference's greedy ids through them at tp 1/2/4 and pp 2 (the MoE ones: moe_test.cpp). Parts
// that cannot be stacked (one quantized, the others float) are bound apart and still give the right ids. The CPU
// backend stacks only parts it packs into bf16 panels (backend::stacks_linear_parts); the layout tests ask for stacks
// with a CPU backend that always wants them, and the plain one keeps row-major parts apart, uncopied, with the same
// ids.
#include "comm/collective.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "model/stacked_linear.hpp"
#include "model/weight_table.hpp"
#include "model_test_util.hpp"
#include "moe_model_json.hpp"
#include "reference_llama.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::model;
using namespace actorllm::model::test_util;

namespace {

/// Tiny configs of each dense family the reference covers (2 layers, so pp 2 puts one on each stage). Untied: tiny
/// random models with tied embeddings keep repeating their input token, which would make the comparison weak.
std::string llama_json() {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
      "vocab_size": 64, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
      "tie_word_embeddings": false})";
}
std::string mistral_json() {
  return R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 64, "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
      "tie_word_embeddings": false, "sliding_window": 6})";
}
std::string qwen2_json() {
  return R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
      "vocab_size": 64, "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
      "tie_word_embeddings": false})";
}
std::string qwen3_json() {
  return R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "vocab_size": 64, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
      "tie_word_embeddings": false, "attention_bias": false, "rope_theta": 10000.0})";
}

/// The CPU backend, stacking every part it is offered (the plain one stacks only parts it packs into bf16 panels).
class stacking_cpu_backend final : public cpu::cpu_backend {
 public:
  using cpu::cpu_backend::cpu_backend;
  bool stacks_linear_parts(std::span<const tensor> parts) const override {
    (void)parts;
    return true;
  }
};

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// Greedy decoding of `n` tokens after `prompt` at tp ranks per stage and pp stages, one thread per TP rank holding
/// its shard of every stage; `edit` changes each shard's loaded weights before they are bound; `stacked` binds them
/// on a stacking_cpu_backend, else on the plain CPU backend. Rank 0's ids.
std::vector<int32_t> engine_greedy(const std::filesystem::path& dir, int tp, int pp, const std::vector<int32_t>& prompt,
                                   int64_t n, const std::function<void(model_weights&)>& edit = {},
                                   bool stacked = true) {
  const model_config cfg = load_model_config(dir);
  std::vector<std::shared_ptr<comm::shared_memory_group>> groups;
  for (int s = 0; s < pp; ++s)
    groups.push_back(std::make_shared<comm::shared_memory_group>(tp));
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(tp));
  std::vector<std::string> errors(static_cast<size_t>(tp));
  std::vector<std::thread> ranks;
  for (int r = 0; r < tp; ++r) {
    ranks.emplace_back([&, r] {
      try {
        std::unique_ptr<cpu::cpu_backend> backend =
            stacked ? std::make_unique<stacking_cpu_backend>(1) : std::make_unique<cpu::cpu_backend>(1);
        cpu::cpu_backend& be = *backend;
        std::vector<std::unique_ptr<comm::shared_memory_collective>> comms;
        std::vector<std::unique_ptr<llama_model>> stages;
        std::vector<std::unique_ptr<kv_cache>> caches;
        for (int s = 0; s < pp; ++s) {
          shard_spec shard;
          shard.tp_rank = r;
          shard.tp_size = tp;
          shard.layer_begin = cfg.n_layer * s / pp;
          shard.layer_end = cfg.n_layer * (s + 1) / pp;
          comms.push_back(std::make_unique<comm::shared_memory_collective>(groups[static_cast<size_t>(s)], r));
          auto loaded = load_shard(dir, shard, {});
          if (edit)
            edit(loaded.weights);
          stages.push_back(
              std::make_unique<llama_model>(loaded.config, std::move(loaded.weights), shard, *comms.back(), be));
          caches.push_back(std::make_unique<kv_cache>(be, stages.back()->cache_shape(16), 8));
        }
        const std::vector<int32_t> table{5, 0, 7, 2, 1, 6, 3, 4};
        auto step = [&](std::span<const int32_t> tokens, int32_t pos) {
          forward_batch fb;
          fb.add_sequence(tokens, pos, table, true);
          std::vector<float> hidden;
          for (int s = 0; s < pp; ++s)
            hidden = stages[static_cast<size_t>(s)]->forward(fb, *caches[static_cast<size_t>(s)], hidden);
          return hidden;
        };
        std::vector<int32_t> out;
        auto logits = step(prompt, 0);  // prefill: several rows, the stacked outputs' columns copied apart
        while (true) {
          out.push_back(argmax(logits));
          if (static_cast<int64_t>(out.size()) == n)
            break;
          const int32_t tok[1] = {out.back()};  // decode: one row, the parts are views of the stacked output
          logits = step(tok, static_cast<int32_t>(prompt.size() + out.size() - 1));
        }
        outputs[static_cast<size_t>(r)] = out;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        for (auto& g : groups)
          g->abort(e.what());
      }
    });
  }
  for (auto& t : ranks)
    t.join();
  for (const auto& e : errors)
    CHECK_MESSAGE(e.empty(), e);
  for (int r = 1; r < tp; ++r)
    CHECK(outputs[static_cast<size_t>(r)] == outputs[0]);
  return outputs[0];
}

struct test_model {
  model_config cfg;
  model_weights weights;  ///< full, under Hugging Face names
  std::filesystem::path dir;
};

test_model make_model(const std::string& json, uint64_t seed) {
  test_model m;
  m.cfg = parse_model_config(json, "config.json");
  m.weights = random_weights(m.cfg, seed, dtype::f32);
  m.dir = temp_dir("actorllm-stacked");
  write_checkpoint(m.dir, json, m.weights);
  return m;
}

/// Rows [begin, begin + rows) of a bound f32 row-major tensor equal `part` (a host f32 slice) exactly.
bool rows_equal(const tensor& bound, int64_t begin, const host_tensor& part) {
  REQUIRE(bound.type == dtype::f32);
  REQUIRE(bound.layout == tensor_layout::row_major);
  const int64_t width = bound.shape.n_dims == 1 ? 1 : bound.dim(1);
  REQUIRE(part.numel() % width == 0);
  return std::memcmp(bound.data_as<float>() + begin * width, part.data(), part.nbytes()) == 0;
}

}  // namespace

TEST_CASE("stacked weights: a shard binds one q|k|v (and bias) and one gate|up, rows equal to its HF slices") {
  const test_model m = make_model(qwen2_json(), 21);  // q/k/v biases; 1 kv head, replicated at tp 2 and 4
  for (int tp : {1, 2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      CAPTURE(tp);
      CAPTURE(rank);
      shard_spec shard;
      shard.tp_rank = rank;
      shard.tp_size = tp;
      const loaded_shard loaded = load_shard(m.dir, shard, {});
      stacking_cpu_backend be{1};
      const model_tensors t =
          bind_weights(llama_weight_table(loaded.config, shard), copy_weights(loaded.weights), shard, be);
      REQUIRE(t.layers.size() == 2);
      const int64_t q_rows = 4 / tp * 8, kv_rows = 8, ff = 48 / tp;
      for (int64_t l = 0; l < 2; ++l) {
        const layer_weights& w = t.layers[static_cast<size_t>(l)];
        const std::string p = fmt::format("model.layers.{}.", l);
        auto slice = [&](const std::string& name) -> const host_tensor& { return loaded.weights.get(p + name); };
        REQUIRE(w.qkv.is_merged());
        CHECK(w.qkv.n_parts == 3);
        CHECK(w.qkv.merged.shape == tensor_shape{q_rows + 2 * kv_rows, 32});
        CHECK(w.qkv.offset(1) == q_rows);
        CHECK(w.qkv.offset(2) == q_rows + kv_rows);
        CHECK(rows_equal(w.qkv.merged, 0, slice("self_attn.q_proj.weight")));
        CHECK(rows_equal(w.qkv.merged, q_rows, slice("self_attn.k_proj.weight")));
        CHECK(rows_equal(w.qkv.merged, q_rows + kv_rows, slice("self_attn.v_proj.weight")));
        REQUIRE(w.qkv.bias.shape == tensor_shape{q_rows + 2 * kv_rows});
        CHECK(rows_equal(w.qkv.bias, 0, slice("self_attn.q_proj.bias")));
        CHECK(rows_equal(w.qkv.bias, q_rows, slice("self_attn.k_proj.bias")));
        CHECK(rows_equal(w.qkv.bias, q_rows + kv_rows, slice("self_attn.v_proj.bias")));
        REQUIRE(w.gate_up.is_merged());
        CHECK(w.gate_up.merged.shape == tensor_shape{2 * ff, 32});
        CHECK(rows_equal(w.gate_up.merged, 0, slice("mlp.gate_proj.weight")));
        CHECK(rows_equal(w.gate_up.merged, ff, slice("mlp.up_proj.weight")));
        for (const tensor& part : w.qkv.parts)
          CHECK(part.empty());
      }
    }
  }
}

TEST_CASE("stacked weights: MoE experts and the shared expert bind one gate|up each, tensor or expert parallel") {
  const test_model m = make_model(qwen2_moe_json(), 23);  // layer 1 dense (mlp_only_layers), 0 and 2 sparse
  for (bool ep : {false, true}) {
    for (int rank = 0; rank < 2; ++rank) {
      CAPTURE(ep);
      CAPTURE(rank);
      shard_spec shard;
      shard.tp_rank = rank;
      shard.tp_size = 2;
      shard.expert_parallel = ep;
      const loaded_shard loaded = load_shard(m.dir, shard, {});
      stacking_cpu_backend be{1};
      const model_tensors t =
          bind_weights(llama_weight_table(loaded.config, shard), copy_weights(loaded.weights), shard, be);
      for (int64_t l : {0, 2}) {
        const moe_weights& moe = t.layers[static_cast<size_t>(l)].moe;
        const std::string p = fmt::format("model.layers.{}.mlp.", l);
        REQUIRE(moe.experts.size() == (ep ? 4u : 8u));
        const int64_t ff = ep ? 16 : 8;  // whole experts under EP, half of each under TP
        for (size_t i = 0; i < moe.experts.size(); ++i) {
          const stacked_linear& gu = moe.experts[i].gate_up;
          const std::string e = fmt::format("{}experts.{}.", p, moe.expert_begin + static_cast<int64_t>(i));
          REQUIRE(gu.is_merged());
          CHECK(gu.merged.shape == tensor_shape{2 * ff, 64});
          CHECK(rows_equal(gu.merged, 0, loaded.weights.get(e + "gate_proj.weight")));
          CHECK(rows_equal(gu.merged, ff, loaded.weights.get(e + "up_proj.weight")));
        }
        const stacked_linear& sh = moe.shexp_gate_up;
        REQUIRE(sh.is_merged());
        CHECK(sh.merged.shape == tensor_shape{2 * 20, 64});
        CHECK(rows_equal(sh.merged, 0, loaded.weights.get(p + "shared_expert.gate_proj.weight")));
        CHECK(rows_equal(sh.merged, 20, loaded.weights.get(p + "shared_expert.up_proj.weight")));
      }
      CHECK(t.layers[1].gate_up.merged.shape == tensor_shape{2 * 24, 64});
    }
  }
}

TEST_CASE(
    "stacked weights: quantized parts stack their codes, scales and zero points, a float/quantized mix stays "
    "apart") {
  const test_model m = make_model(llama_json(), 22);
  const loaded_shard loaded = load_shard(m.dir, shard_spec{}, {});
  auto quantized = [&](const std::string& name, int64_t group) {
    const host_tensor& h = loaded.weights.get(name);
    return quantize_linear_rtn(h.data_as<float>(), h.shape[0], h.shape[1], 4, group, false);
  };
  const std::string q = "model.layers.0.self_attn.q_proj.weight", k = "model.layers.0.self_attn.k_proj.weight",
                    v = "model.layers.0.self_attn.v_proj.weight";
  quantized_linear a = quantized(q, 16), b = quantized(k, 16), c = quantized(v, 16);
  const quantized_linear qa = a, qb = b, qc = c;
  const std::vector<stack_part> parts{{q, nullptr, &a, nullptr}, {k, nullptr, &b, nullptr}, {v, nullptr, &c, nullptr}};
  CHECK(stack_refusal(parts).empty());
  const quantized_linear s = stack_quantized_rows(parts);
  CHECK(s.n_out == qa.n_out + qb.n_out + qc.n_out);
  CHECK(s.n_in == 32);
  CHECK(s.group_size == 16);
  for (int64_t o = 0; o < s.n_out; ++o) {
    const quantized_linear& src = o < qa.n_out ? qa : o < qa.n_out + qb.n_out ? qb : qc;
    const int64_t so = o < qa.n_out ? o : o < qa.n_out + qb.n_out ? o - qa.n_out : o - qa.n_out - qb.n_out;
    for (int64_t i = 0; i < s.n_in; ++i)
      REQUIRE(s.dequantized(o, i) == src.dequantized(so, i));
  }
  // Different groups, or a float part beside quantized ones: refused, naming the parts.
  quantized_linear g8 = quantized(k, 8), a2 = quantized(q, 16);
  CHECK(mentions(stack_refusal({{q, nullptr, &a2, nullptr}, {k, nullptr, &g8, nullptr}}),
                 {q, k, "quantized differently"}));
  model_weights copy = copy_weights(loaded.weights);
  CHECK(mentions(stack_refusal({{q, nullptr, &a2, nullptr}, {k, copy.find_mutable(k), nullptr, nullptr}}),
                 {q, k, "quantized"}));
  // Float parts of different dtypes stack as f32, each value exactly.
  const host_tensor& kf = copy.get(k);
  host_tensor kb(dtype::bf16, kf.shape);
  for (int64_t i = 0; i < kf.numel(); ++i)
    kb.data_as<uint16_t>()[i] = f32_to_bf16(kf.data_as<float>()[i]);
  const std::vector<stack_part> mixed{{q, copy.find_mutable(q), nullptr, nullptr}, {k, &kb, nullptr, nullptr}};
  CHECK(stack_refusal(mixed).empty());
  const host_tensor stacked = stack_dense_rows(mixed);
  REQUIRE(stacked.type == dtype::f32);
  CHECK(std::memcmp(stacked.data(), copy.get(q).data(), copy.get(q).nbytes()) == 0);
  for (int64_t i = 0; i < kb.numel(); ++i)
    REQUIRE(stacked.data_as<float>()[copy.get(q).numel() + i] == bf16_to_f32(kb.data_as<uint16_t>()[i]));
}

TEST_CASE(
    "stacked weights: Llama, Mistral, Qwen2 (biases) and Qwen3 (q/k norm) give the float64 reference's ids at "
    "tp 1/2/4 and pp 2") {
  const std::vector<int32_t> prompt{3, 14, 15, 62, 5, 35, 59, 26, 53};
  constexpr int64_t n = 24;
  uint64_t seed = 30;
  for (const std::string& json : {llama_json(), mistral_json(), qwen2_json(), qwen3_json()}) {
    const test_model m = make_model(json, ++seed);
    const std::vector<int32_t> expected = reference_greedy(m.cfg, m.weights, prompt, n);
    INFO(m.cfg.architecture << " reference ids: " << fmt::format("{}", fmt::join(expected, " ")));
    CHECK(std::set<int32_t>(expected.begin(), expected.end()).size() >= 6);  // not stuck on one token
    for (auto [tp, pp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
      INFO(m.cfg.architecture << " tp " << tp << " pp " << pp);
      CHECK(engine_greedy(m.dir, tp, pp, prompt, n) == expected);
      CHECK(engine_greedy(m.dir, tp, pp, prompt, n, {}, false) == expected);  // bound apart (row-major f32)
    }
  }
}

TEST_CASE("stacked weights: with only q_proj quantized, q|k|v is bound apart and still follows the reference") {
  const test_model m = make_model(llama_json(), 40);
  // The reference reads q_proj's dequantized values (8 bits, per channel), the engine its codes.
  model_weights ref = copy_weights(m.weights);
  for (int64_t l = 0; l < m.cfg.n_layer; ++l) {
    host_tensor& h = const_cast<host_tensor&>(ref.get(fmt::format("model.layers.{}.self_attn.q_proj.weight", l)));
    const quantized_linear qw = quantize_linear_rtn(h.data_as<float>(), h.shape[0], h.shape[1], 8, 0, true);
    for (int64_t o = 0; o < qw.n_out; ++o)
      for (int64_t i = 0; i < qw.n_in; ++i)
        h.data_as<float>()[o * qw.n_in + i] = qw.dequantized(o, i);
  }
  const std::vector<int32_t> prompt{3, 14, 15, 62, 5, 35, 59, 26, 53};
  constexpr int64_t n = 16;
  const std::vector<int32_t> expected = reference_greedy(m.cfg, ref, prompt, n);
  auto quantize_q = [&](model_weights& w) {
    for (int64_t l = 0; l < m.cfg.n_layer; ++l) {
      const std::string name = fmt::format("model.layers.{}.self_attn.q_proj.weight", l);
      if (const host_tensor* h = w.find(name))
        w.replace_with_quantized(name, quantize_linear_rtn(h->data_as<float>(), h->shape[0], h->shape[1], 8, 0, true));
    }
  };
  // The stack is refused and bound apart.
  {
    const loaded_shard loaded = load_shard(m.dir, shard_spec{}, {});
    model_weights w = copy_weights(loaded.weights);
    quantize_q(w);
    stacking_cpu_backend be{1};
    const model_tensors t = bind_weights(llama_weight_table(loaded.config, shard_spec{}), std::move(w), {}, be);
    CHECK_FALSE(t.layers[0].qkv.is_merged());
    CHECK(t.layers[0].qkv.parts[0].shape == tensor_shape{32, 32});
    CHECK(t.layers[0].qkv.parts[2].shape == tensor_shape{32, 32});
    CHECK(t.layers[0].gate_up.is_merged());
  }
  for (auto [tp, pp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}}) {
    INFO("tp " << tp << " pp " << pp);
    CHECK(engine_greedy(m.dir, tp, pp, prompt, n, quantize_q) == expected);
  }
}

TEST_CASE("stacked weights: the plain CPU backend binds row-major parts apart where they lie, biases with them") {
  const test_model m = make_model(qwen2_json(), 50);
  for (int tp : {1, 2}) {
    CAPTURE(tp);
    shard_spec shard;
    shard.tp_size = tp;
    const loaded_shard loaded = load_shard(m.dir, shard, {});
    model_weights w = copy_weights(loaded.weights);
    const std::string p = "model.layers.1.";
    const std::vector<std::string> qkv{p + "self_attn.q_proj.", p + "self_attn.k_proj.", p + "self_attn.v_proj."};
    const std::vector<std::string> gate_up{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"};
    std::vector<const void*> qkv_data, qkv_bias_data, gate_up_data;
    for (const std::string& name : qkv) {
      qkv_data.push_back(w.get(name + "weight").data());
      qkv_bias_data.push_back(w.get(name + "bias").data());
    }
    for (const std::string& name : gate_up)
      gate_up_data.push_back(w.get(name).data());
    cpu::cpu_backend be{1};
    const model_tensors t = bind_weights(llama_weight_table(loaded.config, shard), std::move(w), shard, be);
    const layer_weights& l = t.layers[1];
    REQUIRE_FALSE(l.qkv.is_merged());
    REQUIRE_FALSE(l.gate_up.is_merged());
    CHECK(l.qkv.bias.empty());
    for (size_t i = 0; i < qkv.size(); ++i) {
      CAPTURE(qkv[i]);
      CHECK(l.qkv.parts[i].data() == qkv_data[i]);  // the loaded buffer itself, not a copy
      CHECK(l.qkv.part_biases[i].data() == qkv_bias_data[i]);
      CHECK(rows_equal(l.qkv.parts[i], 0, loaded.weights.get(qkv[i] + "weight")));
      CHECK(rows_equal(l.qkv.part_biases[i], 0, loaded.weights.get(qkv[i] + "bias")));
    }
    CHECK(l.qkv.parts[0].shape == tensor_shape{4 / tp * 8, 32});
    CHECK(l.qkv.parts[1].shape == tensor_shape{8, 32});
    for (size_t i = 0; i < gate_up.size(); ++i) {
      CAPTURE(gate_up[i]);
      CHECK(l.gate_up.parts[i].data() == gate_up_data[i]);
      CHECK(rows_equal(l.gate_up.parts[i], 0, loaded.weights.get(gate_up[i])));
    }
  }
}
