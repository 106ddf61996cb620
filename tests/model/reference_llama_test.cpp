// The float64 reference forward pass (reference_llama.hpp) checked on its own: against stories260K's golden
// outputs (an independent numpy float64 implementation), against transformers' rope formulas, and on tiny random
// Mistral / Qwen2 / Qwen3 models, where a sliding window must bound exactly which tokens each position sees.
#include "reference_llama.hpp"

#include "model/model_source.hpp"
#include "model/stories_golden.hpp"
#include "model/weight_table.hpp"
#include "model_test_util.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace actorllm;
using namespace actorllm::model;
using namespace actorllm::model::test_util;

namespace {

const test::stories_golden& load_golden() { return test::load_stories_golden(); }

const loaded_shard& stories() {
  static const loaded_shard s = load_shard(test::model_dir("stories260K"), {}, {});
  return s;
}

/// Row `t` of a [n_tokens, n_vocab] logits matrix.
std::vector<double> row(const std::vector<double>& logits, int64_t n_vocab, int64_t t) {
  auto begin = logits.begin() + t * n_vocab;
  return {begin, begin + n_vocab};
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

/// The first `n` of `ids`.
std::vector<int32_t> first(const std::vector<int32_t>& ids, size_t n) {
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(std::min(n, ids.size()))};
}

/// Tiny configs of each family; `extra` is spliced into the JSON object.
model_config mistral_config(const std::string& extra = R"("sliding_window": 3)") {
  return parse_model_config(fmt::format(R"({{"architectures": ["MistralForCausalLM"], "model_type": "mistral",
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 40, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
      "rope_theta": 10000.0, "tie_word_embeddings": false, {}}})",
                                        extra),
                            "mistral/config.json");
}

model_config qwen2_config(const std::string& extra) {
  return parse_model_config(fmt::format(R"({{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 1, "vocab_size": 40, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
      "rope_theta": 1000000.0, "tie_word_embeddings": true, {}}})",
                                        extra),
                            "qwen2/config.json");
}

model_config qwen3_config(const std::string& extra) {
  return parse_model_config(fmt::format(R"({{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 40, "max_position_embeddings": 64,
      "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "attention_bias": false,
      "rope_parameters": {{"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}, {}}})",
                                        extra),
                            "qwen3/config.json");
}

std::vector<int32_t> some_tokens(size_t n, int32_t n_vocab, uint32_t salt) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i)
    t[i] = static_cast<int32_t>((i * 17 + salt * 7 + (i * i) % 5) % static_cast<size_t>(n_vocab));
  return t;
}

/// With the same window W > 0 on all L layers, position q depends on exactly the last R = L * (W - 1) + 1 tokens:
/// its logits equal those of that suffix computed alone from position 0 (RoPE is relative), a token just outside
/// changes nothing, and the oldest token inside does change them.
void check_receptive_field(const model_config& cfg, const model_weights& w, int64_t window) {
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    REQUIRE(cfg.window_for(l) == window);
  const int64_t reach = cfg.n_layer * (window - 1) + 1;
  const size_t n = 12;
  REQUIRE(static_cast<int64_t>(n) > reach + 1);
  const std::vector<int32_t> tokens = some_tokens(n, static_cast<int32_t>(cfg.n_vocab), 1);
  const std::vector<double> logits = reference_logits(cfg, w, tokens);
  REQUIRE(logits.size() == n * static_cast<size_t>(cfg.n_vocab));
  for (int64_t q = reach; q < static_cast<int64_t>(n); ++q) {
    CAPTURE(q);
    std::vector<int32_t> suffix(tokens.begin() + (q - reach + 1), tokens.begin() + q + 1);
    const auto alone = reference_logits(cfg, w, suffix);
    CHECK(max_abs_diff(row(logits, cfg.n_vocab, q), row(alone, cfg.n_vocab, reach - 1)) < 1e-9);

    std::vector<int32_t> changed = tokens;
    auto flip = [&](int64_t pos) {
      changed = tokens;
      auto& tok = changed[static_cast<size_t>(pos)];
      tok = static_cast<int32_t>((tok + 1) % cfg.n_vocab);
      return row(reference_logits(cfg, w, changed), cfg.n_vocab, q);
    };
    if (q - reach >= 0)
      CHECK(flip(q - reach) == row(logits, cfg.n_vocab, q));                       // outside: bit for bit the same
    CHECK(max_abs_diff(flip(q - reach + 1), row(logits, cfg.n_vocab, q)) > 1e-6);  // oldest visible token
  }
}

}  // namespace

TEST_CASE("reference: stories260K first-step logits match the golden float64 logits within 1e-6") {
  const auto& m = stories();
  for (const auto& p : load_golden().prompts) {
    const auto logits = reference_logits(m.config, m.weights, p.prompt_ids);
    REQUIRE(logits.size() == p.prompt_ids.size() * static_cast<size_t>(m.config.n_vocab));
    const auto last = row(logits, m.config.n_vocab, static_cast<int64_t>(p.prompt_ids.size()) - 1);
    const double diff = max_abs_diff(last, p.first_step_logits);
    MESSAGE("prompt of " << p.prompt_ids.size() << " tokens: max |reference - golden| = " << diff);
    CHECK(diff < 1e-6);
  }
}

TEST_CASE("reference: greedy decoding of stories260K reproduces the golden continuations") {
  const auto& m = stories();
  const auto& g = load_golden();
  CHECK(reference_greedy(m.config, m.weights, g.bos_prompt_ids, 10) == first(g.bos_output_ids, 10));
  for (const auto& p : g.prompts)
    CHECK(reference_greedy(m.config, m.weights, p.prompt_ids, 10) == first(p.greedy_output_ids, 10));
}

TEST_CASE("reference: rotary frequencies follow transformers' default, linear and llama3 formulas") {
  model_config cfg;
  cfg.head_dim = 128;
  cfg.rope_theta = 500000.0;
  auto plain = reference_inv_freq(cfg);
  REQUIRE(plain.size() == 64);
  CHECK(plain[0] == 1.0);
  CHECK(plain[1] == doctest::Approx(0.8146172338565447).epsilon(1e-14));
  CHECK(plain[63] == doctest::Approx(2.455140791131609e-06).epsilon(1e-14));

  cfg.rope.type = rope_scaling::kind::linear;
  cfg.rope.factor = 4.0;
  auto linear = reference_inv_freq(cfg);
  for (size_t i = 0; i < plain.size(); ++i)
    CHECK(linear[i] == doctest::Approx(plain[i] / 4.0).epsilon(1e-14));

  // Llama 3.1's: wavelengths below 8192/4 kept, above 8192/1 divided by 8, smoothed between (values computed with
  // transformers' _compute_llama3_parameters formula).
  cfg.rope = {rope_scaling::kind::llama3, 8.0, 1.0, 4.0, 8192};
  auto llama3 = reference_inv_freq(cfg);
  CHECK(llama3[20] == doctest::Approx(0.016560440080994446).epsilon(1e-14));
  CHECK(llama3[28] == doctest::Approx(0.0032114459947525913).epsilon(1e-14));  // wavelength 1956: kept
  CHECK(llama3[29] == doctest::Approx(0.002166570763503359).epsilon(1e-14));   // 2402: smoothed
  CHECK(llama3[32] == doctest::Approx(0.0005248461609929547).epsilon(1e-14));
  CHECK(llama3[35] == doctest::Approx(9.556212353964683e-05).epsilon(1e-14));  // 8219: divided
  CHECK(llama3[63] == doctest::Approx(3.068925988914511e-07).epsilon(1e-14));
}

TEST_CASE("reference: random_weights fills every declared tensor, reproducibly") {
  const model_config cfg = qwen2_config(R"("use_sliding_window": true, "sliding_window": 2, "max_window_layers": 1)");
  const weight_table table = llama_weight_table(cfg, shard_spec{});
  for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(type));
    const model_weights a = random_weights(cfg, 7, type);
    const model_weights b = random_weights(cfg, 7, type);
    const model_weights c = random_weights(cfg, 8, type);
    CHECK(a.size() == table.weights.size());
    for (const auto& decl : table.weights) {
      CAPTURE(decl.name);
      const host_tensor* t = a.find(decl.name);
      REQUIRE(t != nullptr);
      CHECK(t->type == type);
      CHECK(t->shape == decl.shape);
      CHECK(std::memcmp(t->data(), b.get(decl.name).data(), t->nbytes()) == 0);
      CHECK(std::memcmp(t->data(), c.get(decl.name).data(), t->nbytes()) != 0);
    }
    // Qwen2 has q/k/v biases and a tied lm_head.
    CHECK(a.find("model.layers.1.self_attn.k_proj.bias") != nullptr);
    CHECK(a.find("lm_head.weight") == nullptr);
    const model_weights copy = copy_weights(a);
    CHECK(reference_logits(cfg, copy, {1, 2, 3}) == reference_logits(cfg, a, {1, 2, 3}));
  }
}

TEST_CASE("reference: a Mistral-style window bounds exactly which tokens each position sees") {
  const model_config cfg = mistral_config();
  check_receptive_field(cfg, random_weights(cfg, 1, dtype::f32), 3);
  check_receptive_field(cfg, random_weights(cfg, 2, dtype::bf16), 3);

  // Without the window the oldest token still matters at the last position.
  const model_config full = mistral_config(R"("sliding_window": null)");
  const model_weights w = random_weights(full, 1, dtype::f32);
  auto tokens = some_tokens(12, 40, 1);
  const auto base = row(reference_logits(full, w, tokens), 40, 11);
  tokens[0] = (tokens[0] + 1) % 40;
  CHECK(max_abs_diff(row(reference_logits(full, w, tokens), 40, 11), base) > 1e-6);
}

TEST_CASE("reference: Qwen2-style (biases, tied) and Qwen3-style (qk_norm, llama3 rope) windows") {
  const model_config qwen2 = qwen2_config(R"("use_sliding_window": true, "sliding_window": 2, "max_window_layers": 0)");
  check_receptive_field(qwen2, random_weights(qwen2, 3, dtype::f32), 2);
  const model_config qwen3 = qwen3_config(R"("use_sliding_window": true, "sliding_window": 3,
      "layer_types": ["sliding_attention", "sliding_attention"])");
  CHECK(qwen3.qk_norm);
  CHECK(qwen3.rope.type == rope_scaling::kind::llama3);
  check_receptive_field(qwen3, random_weights(qwen3, 4, dtype::f32), 3);
}

TEST_CASE("reference: Qwen3's q_norm/k_norm normalise each head, so scaling one head's projection changes nothing") {
  const model_config cfg = qwen3_config(R"("use_sliding_window": false)");
  const model_weights w = random_weights(cfg, 6, dtype::f32);
  const auto tokens = some_tokens(6, 40, 3);
  const auto base = reference_logits(cfg, w, tokens);
  // Multiplies rows [first_row, first_row + n_rows) (or all elements when n_rows is 0) of tensor `name` by `factor`.
  auto scaled = [&](const std::string& name, int64_t first_row, int64_t n_rows, float factor) {
    model_weights copy = copy_weights(w);
    auto& t = const_cast<host_tensor&>(copy.get(name));  // `copy` is ours: writing through it is fine
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    const int64_t end = n_rows == 0 ? t.numel() : (first_row + n_rows) * cols;
    for (int64_t i = first_row * cols; i < end; ++i)
      t.data_as<float>()[i] *= factor;
    return reference_logits(cfg, copy, tokens);
  };
  // One query head of layer 0 and one key head of layer 1 (head_dim 16) rescaled: the per-head RMSNorm undoes it
  // (up to eps).
  CHECK(max_abs_diff(scaled("model.layers.0.self_attn.q_proj.weight", 16, 16, 4.0f), base) < 1e-4);
  CHECK(max_abs_diff(scaled("model.layers.1.self_attn.k_proj.weight", 16, 16, 0.25f), base) < 1e-4);
  // The gains themselves do matter.
  CHECK(max_abs_diff(scaled("model.layers.0.self_attn.q_norm.weight", 0, 0, 2.0f), base) > 1e-3);
  CHECK(max_abs_diff(scaled("model.layers.1.self_attn.k_norm.weight", 0, 0, 2.0f), base) > 1e-3);
  // Without qk_norm the same rescaling shows.
  const model_config mistral = mistral_config(R"("sliding_window": null)");
  const model_weights mw = random_weights(mistral, 6, dtype::f32);
  model_weights mcopy = copy_weights(mw);
  auto& q = const_cast<host_tensor&>(mcopy.get("model.layers.0.self_attn.q_proj.weight"));
  for (int64_t i = 8 * 32; i < 16 * 32; ++i)
    q.data_as<float>()[i] *= 4.0f;
  CHECK(max_abs_diff(reference_logits(mistral, mcopy, tokens), reference_logits(mistral, mw, tokens)) > 1e-3);
}

TEST_CASE("reference: biases: v_proj's bias passes through attention unchanged into o_proj's") {
  // Softmax weights sum to 1, so a v bias b adds Wo b to every attention output: moving it into o_proj's bias gives
  // the same logits. Checks that both biases are applied, and where.
  const model_config cfg = parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 40, "max_position_embeddings": 64, "attention_bias": true})",
                                              "llama/config.json");
  REQUIRE(cfg.attention_bias);
  REQUIRE(cfg.o_proj_bias);
  const model_weights w = random_weights(cfg, 9, dtype::f32);
  const auto tokens = some_tokens(6, 40, 4);
  const auto base = reference_logits(cfg, w, tokens);
  model_weights moved = copy_weights(w);
  auto& bv = const_cast<host_tensor&>(moved.get("model.layers.1.self_attn.v_proj.bias"));
  auto& bo = const_cast<host_tensor&>(moved.get("model.layers.1.self_attn.o_proj.bias"));
  const host_tensor& wo =
      w.get("model.layers.1.self_attn.o_proj.weight");  // [32, 32]; kv head h serves q heads 2h, 2h+1
  for (int64_t r = 0; r < 32; ++r) {
    double add = 0.0;
    for (int64_t c = 0; c < 32; ++c)
      add += double(wo.data_as<float>()[r * 32 + c]) * double(bv.data_as<float>()[(c / 8 / 2) * 8 + c % 8]);
    bo.data_as<float>()[r] = static_cast<float>(bo.data_as<float>()[r] + add);
  }
  std::fill_n(bv.data_as<float>(), bv.numel(), 0.0f);
  CHECK(max_abs_diff(reference_logits(cfg, moved, tokens), base) < 1e-5);
  // Dropping the v bias without moving it does change the logits, and so do the q/k biases (rotated with q and k,
  // they do not cancel in the softmax).
  model_weights dropped = copy_weights(w);
  auto zero = [&](const std::string& name) {
    auto& t = const_cast<host_tensor&>(dropped.get(name));
    std::fill_n(t.data_as<float>(), t.numel(), 0.0f);
    return reference_logits(cfg, dropped, tokens);
  };
  const auto no_v = zero("model.layers.1.self_attn.v_proj.bias");
  CHECK(max_abs_diff(no_v, base) > 1e-3);
  const auto no_q = zero("model.layers.0.self_attn.q_proj.bias");
  CHECK(max_abs_diff(no_q, no_v) > 1e-3);
  CHECK(max_abs_diff(zero("model.layers.0.self_attn.k_proj.bias"), no_q) > 1e-3);
}

TEST_CASE("reference: a window only on the layers max_window_layers leaves changes only the positions it cuts") {
  // Layer 0 full, layer 1 window 2: positions 0 and 1 see everything either way; later ones lose keys in layer 1.
  const model_config mixed = qwen2_config(R"("use_sliding_window": true, "sliding_window": 2, "max_window_layers": 1)");
  const model_config full = qwen2_config(R"("use_sliding_window": false, "sliding_window": 2)");
  REQUIRE(mixed.layer_window == std::vector<int64_t>{0, 2});
  REQUIRE(full.layer_window == std::vector<int64_t>{0, 0});
  const model_weights w = random_weights(mixed, 5, dtype::f32);
  const auto tokens = some_tokens(8, 40, 2);
  const auto a = reference_logits(mixed, w, tokens);
  const auto b = reference_logits(full, w, tokens);
  for (int64_t t = 0; t < 8; ++t) {
    CAPTURE(t);
    if (t < 2)
      CHECK(row(a, 40, t) == row(b, 40, t));
    else
      CHECK(max_abs_diff(row(a, 40, t), row(b, 40, t)) > 1e-6);
  }
  // A window as long as the sequence is full attention.
  const model_config wide = qwen2_config(R"("use_sliding_window": true, "sliding_window": 8, "max_window_layers": 0)");
  CHECK(reference_logits(wide, w, tokens) == b);
}

TEST_CASE("reference: missing weights and bad tokens are refused") {
  const model_config cfg = mistral_config();
  const model_weights w = random_weights(cfg, 1, dtype::f32);
  CHECK(mentions(error_of([&] { reference_logits(cfg, w, {1, 40}); }), {"40", "n_vocab"}));
  model_weights partial;
  for (const auto& [name, t] : w.tensors())
    if (name != "model.layers.1.mlp.up_proj.weight")
      std::memcpy(partial.insert(name, host_tensor(t.type, t.shape)).data(), t.data(), t.nbytes());
  CHECK(mentions(error_of([&] { reference_logits(cfg, partial, {1}); }), {"model.layers.1.mlp.up_proj.weight"}));
}
