// Multi-LoRA serving through actorllm::LLM: PEFT adapters written here for a small random Llama, each request's
// greedy ids checked against the float64 reference run on the base weights with that adapter merged in
// (W + scaling * B A, which is what base + B A x computes), base and adapter requests sharing one batch, every
// layout (tp 1/2/4, pp 2) giving identical ids, max_loras 1 with two adapters queued, and the refusals.
#include "actorllm/llm.hpp"
#include "model/lora_adapter.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "model/model_test_util.hpp"
#include "model/reference_llama.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

using namespace actorllm;
namespace fs = std::filesystem;

namespace {

/// hidden 128, intermediate 256, 4 heads of 32, 2 kv heads, 2 layers, vocab 256: tp up to 4 splits every adapted
/// weight (kv heads replicated at tp 4).
constexpr const char* config_json = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
  "tie_word_embeddings": false})";

/// An adapter to write: its rank, alpha, targets and seed.
struct adapter_spec {
  std::string name;
  int64_t rank = 8;
  double alpha = 16;
  std::vector<std::string> modules;
  uint32_t seed = 1;
  bool rslora = false;
};

/// The in/out sizes of a module of config_json.
std::pair<int64_t, int64_t> module_shape(const std::string& m) {
  if (m == "q_proj" || m == "o_proj")
    return {128, 128};
  if (m == "k_proj" || m == "v_proj")
    return {128, 64};
  if (m == "gate_proj" || m == "up_proj")
    return {128, 256};
  return {256, 128};  // down_proj
}

std::string module_prefix(const std::string& m) {
  return m == "gate_proj" || m == "up_proj" || m == "down_proj" ? "mlp" : "self_attn";
}

/// A checkpoint of seeded random f32 weights and its adapters, made once per process and removed at exit.
class lora_models {
 public:
  static lora_models& get() {
    static lora_models m;
    return m;
  }
  const fs::path& base() const { return base_; }
  fs::path adapter(const std::string& name) const { return root_ / name; }
  const model::model_config& config() const { return cfg_; }

 private:
  lora_models() : root_(model::test_util::temp_dir("lora-models")), base_(root_ / "base") {
    fs::create_directories(base_);
    cfg_ = model::parse_model_config(config_json, "test config");
    model::test_util::write_checkpoint(base_, config_json, model::test_util::random_weights(cfg_, 11, dtype::f32));
    write({"attn", 8, 16, {"q_proj", "v_proj"}, 3});
    write({"all", 4, 8, {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, 5});
    write({"mlp", 16, 8, {"gate_proj", "up_proj", "down_proj"}, 7, true});
  }

  /// PEFT's layout; A uniform with variance 1/in, B with variance 1/r: large enough to change the greedy ids.
  void write(const adapter_spec& a) {
    const fs::path dir = root_ / a.name;
    fs::create_directories(dir);
    std::string modules;
    for (const auto& m : a.modules)
      modules += (modules.empty() ? "\"" : ", \"") + m + "\"";
    std::ofstream(dir / "adapter_config.json")
        << fmt::format(R"({{"peft_type": "LORA", "r": {}, "lora_alpha": {}, "target_modules": [{}],
          "lora_dropout": 0.0, "bias": "none", "use_rslora": {}, "task_type": "CAUSAL_LM",
          "base_model_name_or_path": "base"}})",
                       a.rank, a.alpha, modules, a.rslora ? "true" : "false");
    std::mt19937 rng{a.seed};
    std::vector<model::test_util::test_tensor> tensors;
    auto random = [&](int64_t rows, int64_t cols, double fan_in) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      const auto scale = static_cast<float>(std::sqrt(3.0 / fan_in));
      std::vector<float> v(static_cast<size_t>(rows * cols));
      for (float& x : v)
        x = u(rng) * scale;
      std::string bytes(v.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), v.data(), bytes.size());
      return bytes;
    };
    for (int64_t l = 0; l < cfg_.n_layer; ++l) {
      for (const auto& m : a.modules) {
        const auto [in, out] = module_shape(m);
        const std::string name = fmt::format("base_model.model.model.layers.{}.{}.{}", l, module_prefix(m), m);
        tensors.push_back({name + ".lora_A.weight", dtype::f32, {a.rank, in}, random(a.rank, in, double(in))});
        tensors.push_back({name + ".lora_B.weight", dtype::f32, {out, a.rank}, random(out, a.rank, double(a.rank))});
      }
    }
    model::test_util::write_file(dir / "adapter_model.safetensors", model::test_util::make_safetensors(tensors));
  }

  fs::path root_;
  fs::path base_;
  model::model_config cfg_;
};

/// The base weights with `adapter` merged in (W + B A, B already scaled), in f32.
model::model_weights merged_weights(const std::string& adapter) {
  auto loaded = model::load_shard(lora_models::get().base(), model::shard_spec{}, {});
  if (adapter.empty())
    return std::move(loaded.weights);
  const model::model_config& cfg = loaded.config;
  const model::lora_adapter a =
      model::load_lora_adapter(lora_models::get().adapter(adapter), cfg, model::shard_spec{}, 64);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    for (size_t t = 0; t < model::n_lora_targets; ++t) {
      const model::lora_matrices& m = a.layers[static_cast<size_t>(l)][t];
      if (m.empty())
        continue;
      const std::string module{model::lora_target_module(static_cast<model::lora_target>(t))};
      const std::string name = fmt::format("model.layers.{}.{}.{}.weight", l, module_prefix(module), module);
      model::host_tensor* w = loaded.weights.find_mutable(name);
      REQUIRE(w != nullptr);
      REQUIRE(w->type == dtype::f32);
      auto* data = static_cast<float*>(w->data());
      for (int64_t o = 0; o < m.out; ++o)
        for (int64_t i = 0; i < m.in; ++i) {
          double delta = 0;
          for (int64_t r = 0; r < a.rank; ++r)
            delta += double(m.b[size_t(o * a.rank + r)]) * double(m.a[size_t(r * m.in + i)]);
          data[o * m.in + i] = static_cast<float>(double(data[o * m.in + i]) + delta);
        }
    }
  }
  return std::move(loaded.weights);
}

const std::vector<std::vector<int32_t>>& prompts() {
  static const std::vector<std::vector<int32_t>> p{{1, 17, 42, 99, 3, 250, 7}, {1, 200, 5, 5, 5, 61}};
  return p;
}

struct layout {
  int tp = 1;
  int pp = 1;
};

engine_config lora_config(layout l, int32_t max_loras = 3) {
  engine_config c;
  c.model = lora_models::get().base().string();
  c.tensor_parallel_size = l.tp;
  c.pipeline_parallel_size = l.pp;
  c.kv_cache_memory = size_t{8} << 20;
  c.threads = 2;
  c.enable_lora = true;
  c.max_loras = max_loras;
  c.max_lora_rank = 16;
  return c;
}

lora_request request_for(const std::string& adapter, int32_t id) {
  return lora_request{adapter, id, lora_models::get().adapter(adapter).string()};
}

/// Every (prompt, adapter) pair as one request each, all submitted together: base rows and every adapter's rows
/// share steps. Returns the ids per pair, adapter-major ("" is the base model).
std::vector<std::vector<int32_t>> engine_greedy(LLM& llm, const std::vector<std::string>& adapters, int32_t n) {
  std::vector<prompt> ps;
  for (size_t a = 0; a < adapters.size(); ++a)
    for (const auto& p : prompts()) {
      prompt pr{p};
      if (!adapters[a].empty())
        pr.with_lora(request_for(adapters[a], static_cast<int32_t>(a) + 1));
      ps.push_back(std::move(pr));
    }
  sampling_params sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = n;
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : llm.generate(ps, sp))
    out.push_back(r.outputs.at(0).token_ids);
  return out;
}

const std::vector<std::string>& adapters() {
  static const std::vector<std::string> a{"", "attn", "all", "mlp"};
  return a;
}

constexpr int32_t n_tokens = 12;

/// The tp 1 ids of adapters() in one mixed batch, computed once.
const std::vector<std::vector<int32_t>>& tp1_ids() {
  static const std::vector<std::vector<int32_t>> ids = [] {
    LLM llm{lora_config({1, 1})};
    return engine_greedy(llm, adapters(), n_tokens);
  }();
  return ids;
}

}  // namespace

TEST_CASE("lora: base and three adapters in one batch each follow the float64 reference of their merged weights") {
  const auto& ids = tp1_ids();
  const model::model_config& cfg = lora_models::get().config();
  for (size_t a = 0; a < adapters().size(); ++a) {
    const model::model_weights ref = merged_weights(adapters()[a]);
    for (size_t p = 0; p < prompts().size(); ++p) {
      const auto& out = ids[a * prompts().size() + p];
      const double shortfall = model::test_util::worst_shortfall(cfg, ref, prompts()[p], out);
      INFO("adapter '", adapters()[a], "' prompt ", p, ": worst shortfall ", shortfall);
      CHECK(out.size() == static_cast<size_t>(n_tokens));
      CHECK(shortfall <= 1e-4);  // f32 arithmetic against double: only a near tie may go the other way
    }
  }
  // The adapters change the outputs (else the test would prove nothing about them).
  for (size_t a = 1; a < adapters().size(); ++a) {
    bool differs = false;
    for (size_t p = 0; p < prompts().size(); ++p)
      differs = differs || ids[a * prompts().size() + p] != ids[p];
    INFO("adapter '", adapters()[a], "'");
    CHECK(differs);
  }
}

TEST_CASE("lora: a request run alone gives the ids it gets in a mixed batch") {
  for (size_t a = 0; a < adapters().size(); ++a) {
    LLM llm{lora_config({1, 1})};  // an engine per adapter: engine_greedy numbers a one-adapter list's adapter 1
    const auto ids = engine_greedy(llm, {adapters()[a]}, n_tokens);
    for (size_t p = 0; p < prompts().size(); ++p) {
      INFO("adapter '", adapters()[a], "' prompt ", p);
      CHECK(ids[p] == tp1_ids()[a * prompts().size() + p]);
    }
  }
}

TEST_CASE("lora: tp 2 and 4 and pp 2 give the tp 1 ids") {
  for (layout l : std::vector<layout>{{2, 1}, {4, 1}, {1, 2}, {2, 2}}) {
    INFO("tp ", l.tp, " pp ", l.pp);
    LLM llm{lora_config(l)};
    CHECK(engine_greedy(llm, adapters(), n_tokens) == tp1_ids());
  }
}

TEST_CASE("lora: with max_loras 1 the adapters take turns and every request still gets its ids") {
  LLM llm{lora_config({1, 1}, 1)};
  CHECK(engine_greedy(llm, adapters(), n_tokens) == tp1_ids());
}

TEST_CASE("lora: refusals name the reason") {
  auto error_of = [](LLM& llm, const lora_request& lora) {
    std::vector<prompt> ps{prompt{prompts()[0]}.with_lora(lora)};
    sampling_params sp;
    sp.max_tokens = 2;
    try {
      (void)llm.generate(ps, sp);
    } catch (const error& e) {
      return std::string{e.what()};
    }
    return std::string{"(no error)"};
  };
  SUBCASE("LoRA off") {
    engine_config c = lora_config({1, 1});
    c.enable_lora = false;
    LLM llm{c};
    CHECK(model::test_util::mentions(error_of(llm, request_for("attn", 1)), {"enable_lora", "attn"}));
    CHECK(llm.add_lora(request_for("attn", 1)).has_value());
  }
  SUBCASE("bad adapters") {
    LLM llm{lora_config({1, 1})};
    CHECK(model::test_util::mentions(error_of(llm, lora_request{"gone", 1, "/nonexistent/adapter"}), {"gone"}));
    CHECK(model::test_util::mentions(error_of(llm, request_for("attn", 0)), {"id must be positive"}));
    REQUIRE_FALSE(llm.add_lora(request_for("attn", 1)).has_value());
    CHECK(model::test_util::mentions(error_of(llm, request_for("all", 1)), {"id 1 already names"}));
    engine_config small = lora_config({1, 1});
    small.max_lora_rank = 8;
    LLM low{small};
    CHECK(model::test_util::mentions(error_of(low, request_for("mlp", 1)), {"mlp", "16"}));  // rank 16 > 8
    // The engine still serves after the refusals.
    CHECK(engine_greedy(llm, {"", "attn"}, n_tokens) ==
          std::vector<std::vector<int32_t>>(tp1_ids().begin(), tp1_ids().begin() + 4));
  }
}
