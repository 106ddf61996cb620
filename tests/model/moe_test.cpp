// Mixture-of-experts models (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE): config validation, transformers'
// top-k routing, and greedy decoding of small random-weight models against the independent float64 reference
// (reference_llama + reference_moe) under every layout: tp 1/2/4, pp 2, expert parallelism over tp 2 and 4, and
// lockstep expert parallelism over data-parallel replicas (idle replicas serving their experts). A rank under expert
// parallelism holds only its experts.
#include "comm/collective.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "model/moe_layer.hpp"
#include "model_test_util.hpp"
#include "moe_model_json.hpp"
#include "reference_llama.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
using namespace actorllm::model;
using namespace actorllm::model::test_util;

namespace {

/// `json` with each {from, to} replaced once (JSON objects with repeated keys would be ambiguous).
std::string replaced(std::string json, const std::vector<std::pair<std::string, std::string>>& edits) {
  for (const auto& [from, to] : edits) {
    const size_t at = json.find(from);
    REQUIRE(at != std::string::npos);
    json.replace(at, from.size(), to);
  }
  return json;
}

/// A layout to run: tp ranks per stage, pp stages, expert parallelism, expert-parallel load balancing.
struct layout {
  int tp = 1;
  int pp = 1;
  bool ep = false;
  bool eplb = false;
};

std::string describe(const layout& l) {
  return fmt::format("tp {} pp {}{}{}", l.tp, l.pp, l.ep ? " ep" : "", l.eplb ? " eplb" : "");
}

/// EPLB settings that rearrange often during a short generation: every 5 steps, from the last 4 steps' load, with
/// the fewest redundant slots (at least one) that split evenly over `ep` ranks.
expert_balancing frequent_eplb(int64_t n_expert, int64_t ep) {
  expert_balancing b;
  b.enabled = true;
  b.n_redundant = ep - n_expert % ep;
  b.window_size = 4;
  b.step_interval = 5;
  return b;
}

/// Whether `m`'s balancer has rearranged, and has moved some layer's experts away from the initial placement.
struct balancing_seen {
  uint64_t rearrangements = 0;
  bool moved = false;
};
balancing_seen balancing_of(const llama_model& m) {
  balancing_seen seen;
  const expert_balancer* b = m.balancer();
  if (b == nullptr)
    return seen;
  seen.rearrangements = b->stats().rearrangements;
  const model_config& cfg = m.config();
  const layer_placement start = initial_placement(cfg.n_expert, m.shard().n_physical_experts(cfg.n_expert));
  for (int64_t l = m.shard().layer_begin; l < m.shard().layer_end; ++l)
    if (cfg.is_moe_layer(l) && b->placement(l).phys_to_log != start.phys_to_log)
      seen.moved = true;
  return seen;
}

/// Writes `w` as DIR/model.safetensors beside DIR/config.json.
std::filesystem::path write_checkpoint(const std::string& config_json, const model_weights& w) {
  auto dir = temp_dir("actorllm-moe");
  model::test_util::write_checkpoint(dir, config_json, w);
  return dir;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// What one run of the engine gives: rank 0's greedy ids and each (stage, rank)'s weight bytes and experts.
struct run_result {
  std::vector<int32_t> ids;
  std::vector<size_t> weight_bytes;  ///< per (stage, rank), stage-major
  balancing_seen balancing;          ///< rank 0's, over its stages
};

/// Greedy decoding of `n` tokens after `prompt` under `l`: one thread per TP rank, each holding its shard of every
/// stage (the stages run one after the other, hidden states handed on inside the thread).
run_result engine_greedy(const std::filesystem::path& dir, const layout& l, const std::vector<int32_t>& prompt,
                         int64_t n, load_options load = {}) {
  const model_config cfg = load_model_config(dir);
  std::vector<std::shared_ptr<comm::shared_memory_group>> groups;
  for (int s = 0; s < l.pp; ++s)
    groups.push_back(std::make_shared<comm::shared_memory_group>(l.tp));
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(l.tp));
  run_result result;
  result.weight_bytes.resize(static_cast<size_t>(l.tp * l.pp));
  std::vector<std::thread> ranks;
  for (int r = 0; r < l.tp; ++r) {
    ranks.emplace_back([&, r] {
      cpu::cpu_backend be{1};
      std::vector<std::unique_ptr<comm::shared_memory_collective>> comms;
      std::vector<std::unique_ptr<llama_model>> stages;
      std::vector<std::unique_ptr<kv_cache>> caches;
      for (int s = 0; s < l.pp; ++s) {
        shard_spec shard;
        shard.tp_rank = r;
        shard.tp_size = l.tp;
        shard.layer_begin = cfg.n_layer * s / l.pp;
        shard.layer_end = cfg.n_layer * (s + 1) / l.pp;
        shard.expert_parallel = l.ep;
        if (l.eplb)
          shard.eplb = frequent_eplb(cfg.n_expert, l.tp);
        comms.push_back(std::make_unique<comm::shared_memory_collective>(groups[static_cast<size_t>(s)], r));
        auto loaded = load_shard(dir, shard, load);
        stages.push_back(
            std::make_unique<llama_model>(loaded.config, std::move(loaded.weights), shard, *comms.back(), be));
        result.weight_bytes[static_cast<size_t>(s * l.tp + r)] = stages.back()->weight_bytes();
        caches.push_back(std::make_unique<kv_cache>(be, stages.back()->cache_shape(16), 8));
      }
      std::vector<int32_t> table{5, 0, 7, 2, 1, 6, 3, 4};
      auto step = [&](std::span<const int32_t> tokens, int32_t pos) {
        forward_batch fb;
        fb.add_sequence(tokens, pos, table, true);
        std::vector<float> hidden;
        for (int s = 0; s < l.pp; ++s)
          hidden = stages[static_cast<size_t>(s)]->forward(fb, *caches[static_cast<size_t>(s)], hidden);
        return hidden;
      };
      std::vector<int32_t> out;
      auto logits = step(prompt, 0);
      while (true) {
        out.push_back(argmax(logits));
        if (static_cast<int64_t>(out.size()) == n)
          break;
        const int32_t tok[1] = {out.back()};
        logits = step(tok, static_cast<int32_t>(prompt.size() + out.size() - 1));
      }
      outputs[static_cast<size_t>(r)] = out;
      if (r == 0)
        for (const auto& stage : stages) {
          const balancing_seen seen = balancing_of(*stage);
          result.balancing.rearrangements += seen.rearrangements;
          result.balancing.moved = result.balancing.moved || seen.moved;
        }
    });
  }
  for (auto& t : ranks)
    t.join();
  for (int r = 1; r < l.tp; ++r)
    CHECK(outputs[static_cast<size_t>(r)] == outputs[0]);  // every rank sees the same logits
  result.ids = outputs[0];
  return result;
}

/// What a lockstep run gives: each replica's greedy ids and each (replica, rank)'s weight bytes.
struct lockstep_result {
  std::vector<std::vector<int32_t>> ids;  ///< per replica
  std::vector<size_t> weight_bytes;       ///< per (replica, rank), replica-major
  balancing_seen balancing;               ///< the EP group's rank 0's
};

/// Lockstep expert parallelism over dp replicas of tp ranks each (vLLM's DP+EP), one thread per (replica, rank):
/// the EP group spans all dp × tp ranks, each replica has its own TP group. Replica i decodes prompts[i] greedily for
/// n_tokens[i] tokens (one step each), then runs idle steps (llama_model::idle_step) until every replica has run as
/// many steps as the busiest, as its scheduler would: its experts keep serving the others' tokens.
lockstep_result lockstep_greedy(const std::filesystem::path& dir, int tp, int dp,
                                const std::vector<std::vector<int32_t>>& prompts, const std::vector<int64_t>& n_tokens,
                                bool eplb = false) {
  const model_config cfg = load_model_config(dir);
  const int64_t n_steps = *std::max_element(n_tokens.begin(), n_tokens.end());
  auto expert_group = std::make_shared<comm::shared_memory_group>(dp * tp, "the expert-parallel group");
  std::vector<std::shared_ptr<comm::shared_memory_group>> tp_groups;
  for (int d = 0; d < dp; ++d)
    tp_groups.push_back(std::make_shared<comm::shared_memory_group>(tp, fmt::format("replica {}'s TP group", d)));
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(dp * tp));
  std::vector<std::string> errors(static_cast<size_t>(dp * tp));
  lockstep_result result;
  result.weight_bytes.resize(static_cast<size_t>(dp * tp));
  std::vector<std::thread> ranks;
  for (int d = 0; d < dp; ++d)
    for (int r = 0; r < tp; ++r)
      ranks.emplace_back([&, d, r] {
        // A rank that fails aborts the groups, so that the others fail too instead of waiting for it forever.
        try {
          cpu::cpu_backend be{1};
          shard_spec shard;
          shard.tp_rank = r;
          shard.tp_size = tp;
          shard.layer_begin = 0;
          shard.layer_end = cfg.n_layer;
          shard.expert_parallel = true;
          shard.dp_rank = d;
          shard.dp_size = dp;
          if (eplb)
            shard.eplb = frequent_eplb(cfg.n_expert, int64_t{dp} * tp);
          comm::shared_memory_collective tp_comm{tp_groups[static_cast<size_t>(d)], r};
          comm::shared_memory_collective ep_comm{expert_group, shard.ep_rank()};
          auto loaded = load_shard(dir, shard, {});
          llama_model m{loaded.config, std::move(loaded.weights), shard, tp_comm, be, &ep_comm};
          const size_t slot = static_cast<size_t>(d * tp + r);
          if (!m.serves_experts())
            throw std::runtime_error("the shard serves no experts");
          result.weight_bytes[slot] = m.weight_bytes();
          kv_cache cache{be, m.cache_shape(16), 8};
          const std::vector<int32_t> table{5, 0, 7, 2, 1, 6, 3, 4};
          const std::vector<int32_t>& prompt = prompts[static_cast<size_t>(d)];
          std::vector<int32_t> out;
          for (int64_t step = 0; step < n_steps; ++step) {
            if (static_cast<int64_t>(out.size()) == n_tokens[static_cast<size_t>(d)]) {
              m.idle_step();
              continue;
            }
            forward_batch fb;
            if (out.empty()) {
              fb.add_sequence(prompt, 0, table, true);
            } else {
              const int32_t tok[1] = {out.back()};
              fb.add_sequence(tok, static_cast<int32_t>(prompt.size() + out.size() - 1), table, true);
            }
            out.push_back(argmax(m.forward(fb, cache)));
          }
          outputs[slot] = out;
          if (slot == 0)
            result.balancing = balancing_of(m);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(d * tp + r)] = e.what();
          expert_group->abort(e.what());
          tp_groups[static_cast<size_t>(d)]->abort(e.what());
        }
      });
  for (auto& t : ranks)
    t.join();
  for (const auto& e : errors)
    CHECK_MESSAGE(e.empty(), e);
  for (int d = 0; d < dp; ++d) {
    for (int r = 1; r < tp; ++r)
      CHECK(outputs[static_cast<size_t>(d * tp + r)] == outputs[static_cast<size_t>(d * tp)]);
    result.ids.push_back(outputs[static_cast<size_t>(d * tp)]);
  }
  return result;
}

const std::vector<layout> all_layouts{{1, 1, false}, {2, 1, false}, {4, 1, false}, {1, 2, false},
                                      {2, 1, true},  {4, 1, true},  {2, 2, true}};

/// The engine under every layout gives the reference's greedy ids, and the reference with another top-k or the
/// other renormalisation gives different ones (so the test can tell).
void check_model(const std::string& config_json, uint64_t seed) {
  const model_config cfg = parse_model_config(config_json, "config.json");
  REQUIRE(cfg.n_expert > 0);
  const model_weights w = random_weights(cfg, seed, dtype::f32);
  const auto dir = write_checkpoint(config_json, w);
  const std::vector<int32_t> prompt{3, 14, 15, 92, 65, 35, 89, 79};
  constexpr int64_t n = 48;
  const std::vector<int32_t> expected = reference_greedy(cfg, w, prompt, n);
  INFO(cfg.architecture << " reference ids: " << fmt::format("{}", fmt::join(expected, " ")));
  // A model stuck on one token would make every comparison below trivially true.
  CHECK(std::set<int32_t>(expected.begin(), expected.end()).size() >= 8);
  for (const layout& l : all_layouts) {
    INFO(cfg.architecture << " " << describe(l));
    CHECK(engine_greedy(dir, l, prompt, n).ids == expected);
  }
  // Expert-parallel load balancing: redundant copies, replicas taking turns, and the experts rearranged every 5
  // steps while the tokens are generated; the ids stay the reference's.
  for (const layout& l : {layout{2, 1, true, true}, layout{4, 1, true, true}, layout{2, 2, true, true}}) {
    INFO(cfg.architecture << " " << describe(l));
    const run_result got = engine_greedy(dir, l, prompt, n);
    CHECK(got.ids == expected);
    CHECK(got.balancing.rearrangements >= static_cast<uint64_t>(n / 5));
    CHECK(got.balancing.moved);
  }
  // Lockstep DP+EP: replica 0 decodes the prompt; replica 1 decodes another for 12 tokens, then idles while its
  // experts serve replica 0's tokens (and with 3 replicas, replica 2 only idles).
  const std::vector<int32_t> other{7, 1, 60, 33, 21};
  const std::vector<int32_t> other_expected = reference_greedy(cfg, w, other, 12);
  for (auto [dp, tp] : {std::pair{2, 1}, std::pair{2, 2}, std::pair{3, 1}}) {
    if (dp * tp > cfg.n_expert)
      continue;
    INFO(cfg.architecture << " lockstep dp " << dp << " x tp " << tp);
    std::vector<std::vector<int32_t>> prompts{prompt, other};
    std::vector<int64_t> counts{n, 12};
    if (dp == 3) {
      prompts.push_back({});
      counts.push_back(0);
    }
    const lockstep_result got = lockstep_greedy(dir, tp, dp, prompts, counts);
    CHECK(got.ids[0] == expected);
    CHECK(got.ids[1] == other_expected);
    // With EPLB: the idle replicas' steps count too, and their experts move like the busy ones'.
    const lockstep_result balanced = lockstep_greedy(dir, tp, dp, prompts, counts, true);
    CHECK(balanced.ids[0] == expected);
    CHECK(balanced.ids[1] == other_expected);
    CHECK(balanced.balancing.rearrangements >= static_cast<uint64_t>(n / 5));
    CHECK(balanced.balancing.moved);
  }
  model_config other_k = cfg;
  other_k.n_expert_used = cfg.n_expert_used + 1;
  CHECK(reference_greedy(other_k, w, prompt, n) != expected);
  model_config other_norm = cfg;
  other_norm.norm_topk_prob = !cfg.norm_topk_prob;
  CHECK(reference_greedy(other_norm, w, prompt, n) != expected);
}

}  // namespace

TEST_CASE("MoE configs: Mixtral, Qwen2-MoE and Qwen3-MoE keys are read with transformers' defaults") {
  const model_config mixtral = parse_model_config(mixtral_json(), "mixtral/config.json");
  CHECK(mixtral.n_expert == 8);
  CHECK(mixtral.n_expert_used == 2);
  CHECK(mixtral.n_ff_exp == 32);
  CHECK(mixtral.norm_topk_prob);
  CHECK(mixtral.n_ff_shexp == 0);
  CHECK(mixtral.window_for(0) == 0);  // MixtralConfig's sliding_window defaults to None
  CHECK(mixtral.is_moe_layer(0));
  CHECK(mixtral.is_moe_layer(1));

  const model_config q2 = parse_model_config(qwen2_moe_json(), "qwen2_moe/config.json");
  CHECK(q2.n_expert == 8);
  CHECK(q2.n_expert_used == 3);
  CHECK(q2.n_ff_exp == 16);
  CHECK(q2.n_ff_shexp == 40);
  CHECK(!q2.norm_topk_prob);
  CHECK(q2.attention_bias);  // Qwen2-MoE's q/k/v have biases, o_proj none
  CHECK(!q2.o_proj_bias);
  CHECK(q2.is_moe_layer(0));
  CHECK(!q2.is_moe_layer(1));  // mlp_only_layers
  CHECK(q2.is_moe_layer(2));

  const model_config step2 =
      parse_model_config(replaced(qwen2_moe_json(), {{R"("decoder_sparse_step": 1)", R"("decoder_sparse_step": 2)"},
                                                     {R"("mlp_only_layers": [1])", R"("mlp_only_layers": [])"}}),
                         "step/config.json");
  CHECK(!step2.is_moe_layer(0));
  CHECK(step2.is_moe_layer(1));
  CHECK(!step2.is_moe_layer(2));

  const model_config q3 = parse_model_config(qwen3_moe_json(), "qwen3_moe/config.json");
  CHECK(q3.n_expert == 6);
  CHECK(q3.norm_topk_prob);
  CHECK(q3.qk_norm);
  CHECK(q3.n_ff_shexp == 0);
  // Qwen3MoeConfig's defaults: norm_topk_prob false, moe_intermediate_size 768, decoder_sparse_step 1.
  const model_config q3_defaults = parse_model_config(
      R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 48,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 97, "max_position_embeddings": 128})",
      "q3/config.json");
  CHECK(!q3_defaults.norm_topk_prob);
  CHECK(q3_defaults.n_ff_exp == 768);
  CHECK(q3_defaults.n_expert == 128);
  CHECK(q3_defaults.n_expert_used == 8);
}

TEST_CASE("MoE configs: impossible or unimplemented routing is refused by name") {
  CHECK(mentions(error_of([] {
                   parse_model_config(
                       replaced(mixtral_json(), {{R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 9)"}}), "m");
                 }),
                 {"num_experts_per_tok", "9", "num_local_experts", "8"}));
  CHECK(mentions(error_of([] {
                   parse_model_config(
                       replaced(qwen2_moe_json(), {{R"("mlp_only_layers": [1])", R"("mlp_only_layers": [3])"}}), "q");
                 }),
                 {"mlp_only_layers", "layer 3"}));
  CHECK(mentions(error_of([] { parse_model_config(qwen3_moe_json(R"(, "n_group": 4)"), "q"); }), {"n_group"}));
  CHECK(mentions(error_of([] { parse_model_config(qwen3_moe_json(R"(, "scoring_func": "sigmoid")"), "q"); }),
                 {"scoring_func", "sigmoid"}));
  CHECK(mentions(error_of([] { parse_model_config(qwen3_moe_json(R"(, "shared_expert_intermediate_size": 8)"), "q"); }),
                 {"shared_expert_intermediate_size", "Qwen3MoeForCausalLM"}));
  CHECK(mentions(error_of([] { parse_model_config(mixtral_json(R"(, "norm_topk_prob": false)"), "m"); }),
                 {"norm_topk_prob", "Mixtral"}));
  // A dense architecture that carries experts is still refused.
  CHECK(mentions(error_of([] {
                   parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                       "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 97,
                       "max_position_embeddings": 128, "num_local_experts": 8})",
                                      "l");
                 }),
                 {"num_local_experts", "dense"}));
}

TEST_CASE("top-k routing follows transformers: softmax, largest first, ties to the lower id, optional renorm") {
  // Two tokens over 4 experts. Token 0: experts 1 and 3 tie for the top; token 1: a clear order 2 > 0 > 3 > 1.
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f, 3.0f, 0.0f};
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  route_top_k(logits, 4, 2, false, ids, w);
  CHECK(ids == std::vector<int32_t>{1, 3, 2, 0});
  double z0 = std::exp(0.5) + 2 * std::exp(2.0) + std::exp(-1.0);
  CHECK(w[0] == doctest::Approx(std::exp(2.0) / z0));
  CHECK(w[1] == doctest::Approx(std::exp(2.0) / z0));
  route_top_k(logits, 4, 2, true, ids, w);
  CHECK(w[0] == doctest::Approx(0.5));
  CHECK(w[2] + w[3] == doctest::Approx(1.0));
  CHECK(w[2] == doctest::Approx(std::exp(3.0) / (std::exp(3.0) + std::exp(1.0))));
  // Three-way tie: the lowest ids win.
  const std::vector<float> flat{1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<int32_t> ids3(3);
  std::vector<float> w3(3);
  route_top_k(flat, 4, 3, false, ids3, w3);
  CHECK(ids3 == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("expert placement: contiguous ranges, the remainder on the first ranks, and its inverse") {
  CHECK(experts_of_rank(8, 1, 4).begin == 2);
  CHECK(experts_of_rank(8, 1, 4).count == 2);
  CHECK(experts_of_rank(6, 0, 4).count == 2);
  CHECK(experts_of_rank(6, 1, 4).begin == 2);
  CHECK(experts_of_rank(6, 2, 4).begin == 4);
  CHECK(experts_of_rank(6, 3, 4).begin == 5);
  CHECK(experts_of_rank(6, 3, 4).count == 1);
  for (int64_t n_expert : {4, 6, 7, 8, 60})
    for (int64_t ep : {1, 2, 3, 4})
      for (int64_t r = 0; r < ep; ++r) {
        const expert_range range = experts_of_rank(n_expert, r, ep);
        for (int64_t e = range.begin; e < range.begin + range.count; ++e)
          CHECK(rank_of_expert(n_expert, ep, e) == r);
      }
}

TEST_CASE("Mixtral: greedy ids equal the float64 reference under tp 1/2/4, pp 2 and expert parallelism") {
  check_model(mixtral_json(), 11);
}

TEST_CASE("Qwen2-MoE (shared expert, a dense layer): greedy ids equal the float64 reference under every layout") {
  check_model(qwen2_moe_json(), 12);
}

TEST_CASE("Qwen3-MoE (q/k norm, renormalised top-k, uneven expert placement): greedy ids equal the reference") {
  check_model(qwen3_moe_json(), 13);
}

TEST_CASE("expert parallelism: a rank loads only its experts, whole, and holds less than a tensor-parallel rank") {
  const model_config cfg = parse_model_config(mixtral_json(), "config.json");
  const model_weights w = random_weights(cfg, 21, dtype::f32);
  const auto dir = write_checkpoint(mixtral_json(), w);
  for (int tp : {2, 4}) {
    size_t ep_total = 0;
    for (int r = 0; r < tp; ++r) {
      shard_spec shard;
      shard.tp_rank = r;
      shard.tp_size = tp;
      shard.expert_parallel = true;
      const loaded_shard ep = load_shard(dir, shard, {});
      shard.expert_parallel = false;
      const loaded_shard tp_only = load_shard(dir, shard, {});
      const expert_range mine = experts_of_rank(cfg.n_expert, r, tp);
      CHECK(mine.count == cfg.n_expert / tp);
      int64_t experts_held = 0;
      for (const auto& [name, t] : ep.weights.tensors()) {
        if (name.find(".experts.") == std::string::npos)
          continue;
        ++experts_held;
        const int64_t e = std::stoll(name.substr(name.find(".experts.") + 9));
        INFO(name);
        CHECK(e >= mine.begin);
        CHECK(e < mine.begin + mine.count);
        CHECK(t.numel() == cfg.n_ff_exp * cfg.n_embd);  // whole, not sliced
      }
      CHECK(experts_held == 3 * mine.count * cfg.n_layer);
      // Expert bytes: a TP rank holds 1/tp of all experts, an EP rank all of 1/tp of them: the same here, and the
      // attention (TP-sliced in both) is the same too, so the totals agree; what differs is what a rank reads
      // per token (the active experts only).
      CHECK(ep.weights.total_bytes() == tp_only.weights.total_bytes());
      const size_t expert_bytes = static_cast<size_t>(3 * cfg.n_expert * cfg.n_ff_exp * cfg.n_embd) * sizeof(float);
      MESSAGE("tp " << tp << " ep rank " << r << ": " << ep.weights.total_bytes()
                    << " bytes (all experts: " << expert_bytes * static_cast<size_t>(cfg.n_layer) << ")");
      ep_total += ep.weights.total_bytes();
    }
    // Experts are not replicated: over the group every expert weight is held exactly once.
    const loaded_shard full = load_shard(dir, {}, {});
    size_t full_expert_bytes = 0, full_other_bytes = 0;
    for (const auto& [name, t] : full.weights.tensors())
      (name.find(".experts.") != std::string::npos ? full_expert_bytes : full_other_bytes) += t.nbytes();
    CHECK(ep_total >= full_expert_bytes);
    CHECK(ep_total - full_expert_bytes <= static_cast<size_t>(tp) * full_other_bytes);
  }
  // More ranks than experts is refused by name.
  shard_spec too_many;
  too_many.tp_size = 16;
  too_many.tp_rank = 0;
  too_many.expert_parallel = true;
  CHECK(mentions(error_of([&] { llama_weight_table(cfg, too_many); }), {"expert parallelism", "16", "8"}));
}

TEST_CASE("lockstep expert parallelism: a dp 2 x tp 2 rank holds a quarter of the experts, half a tp 2 EP rank's") {
  const model_config cfg = parse_model_config(mixtral_json(), "config.json");
  const model_weights w = random_weights(cfg, 22, dtype::f32);
  const auto dir = write_checkpoint(mixtral_json(), w);
  auto expert_bytes = [](const loaded_shard& s) {
    size_t bytes = 0;
    for (const auto& [name, t] : s.weights.tensors())
      if (name.find(".experts.") != std::string::npos)
        bytes += t.nbytes();
    return bytes;
  };
  std::set<int64_t> held;  // every expert of every layer, over the 4 ranks
  for (int d = 0; d < 2; ++d)
    for (int r = 0; r < 2; ++r) {
      shard_spec shard;
      shard.tp_rank = r;
      shard.tp_size = 2;
      shard.expert_parallel = true;
      const loaded_shard one_replica = load_shard(dir, shard, {});
      shard.dp_rank = d;
      shard.dp_size = 2;
      const loaded_shard lockstep = load_shard(dir, shard, {});
      const expert_range mine = experts_of_rank(cfg.n_expert, shard.ep_rank(), 4);
      CHECK(mine.count == 2);
      for (const auto& [name, t] : lockstep.weights.tensors()) {
        if (name.find(".experts.") == std::string::npos)
          continue;
        const int64_t e = std::stoll(name.substr(name.find(".experts.") + 9));
        INFO(name);
        CHECK(e >= mine.begin);
        CHECK(e < mine.begin + mine.count);
        held.insert(e);
      }
      CHECK(expert_bytes(lockstep) * 2 == expert_bytes(one_replica));
      CHECK(lockstep.weights.total_bytes() < one_replica.weights.total_bytes());
      MESSAGE("dp 2 x tp 2 lockstep rank "
              << shard.ep_rank() << ": " << lockstep.weights.total_bytes()
              << " bytes (a tp 2 EP rank of one replica: " << one_replica.weights.total_bytes() << ")");
    }
  CHECK(held.size() == static_cast<size_t>(cfg.n_expert));
}

TEST_CASE("--load-format dummy: MoE models load with a fixed seed, the same under tp 2 and expert parallelism") {
  for (const std::string& json : {mixtral_json(), qwen2_moe_json(), qwen3_moe_json()}) {
    auto dir = temp_dir("actorllm-moe-dummy");
    write_file(dir / "config.json", json);
    load_options load;
    load.format = load_format::dummy;
    load.seed = 7;
    const std::vector<int32_t> prompt{1, 2, 3, 4, 5};
    const auto one = engine_greedy(dir, {1, 1, false}, prompt, 16, load);
    INFO(json);
    CHECK(engine_greedy(dir, {2, 1, false}, prompt, 16, load).ids == one.ids);
    CHECK(engine_greedy(dir, {2, 1, true}, prompt, 16, load).ids == one.ids);
  }
}

TEST_CASE("all_to_all_rows (the default, over all_gather) delivers uneven rows in source order and back") {
  for (int n : {1, 2, 3, 4}) {
    auto grp = std::make_shared<comm::shared_memory_group>(n);
    std::vector<std::thread> ranks;
    std::vector<int> ok(static_cast<size_t>(n), 0);
    for (int r = 0; r < n; ++r)
      ranks.emplace_back([&, r] {
        comm::shared_memory_collective c{grp, r};
        constexpr int64_t width = 3;
        // Rank r sends (r + d) % 3 rows to rank d, each row [r, d, i].
        std::vector<int64_t> counts(static_cast<size_t>(n));
        std::vector<float> send;
        for (int d = 0; d < n; ++d) {
          counts[static_cast<size_t>(d)] = (r + d) % 3;
          for (int64_t i = 0; i < counts[static_cast<size_t>(d)]; ++i)
            send.insert(send.end(), {static_cast<float>(r), static_cast<float>(d), static_cast<float>(i)});
        }
        std::vector<float> recv;
        const std::vector<int64_t> from = c.all_to_all_rows(send.data(), counts, width, recv);
        bool good = static_cast<int>(from.size()) == n;
        size_t at = 0;
        for (int s = 0; s < n && good; ++s) {
          good = from[static_cast<size_t>(s)] == (s + r) % 3;
          for (int64_t i = 0; i < from[static_cast<size_t>(s)] && good; ++i, at += width)
            good = recv[at] == static_cast<float>(s) && recv[at + 1] == static_cast<float>(r) &&
                   recv[at + 2] == static_cast<float>(i);
        }
        // And back: what came in returns to its source in the order it was sent.
        std::vector<float> back;
        c.all_to_all_rows(recv.data(), from, width, back);
        ok[static_cast<size_t>(r)] = good && at == recv.size() && back == send;
      });
    for (auto& t : ranks)
      t.join();
    for (int r = 0; r < n; ++r) {
      INFO("group of " << n << ", rank " << r);
      CHECK(ok[static_cast<size_t>(r)]);
    }
  }
}
