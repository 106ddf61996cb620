// model_runner and decode graphs: when a shard captures them (graph_options from --enforce-eager and the shard's
// layout; never on the CPU backend), the memory it reserves for them in its profile, and plans run through a
// runner on the recording backend (tests/support/recording_graph_backend.hpp) giving the eager runner's tokens, with
// every all-decode step replayed from a graph and prefill steps run eagerly.
#include "kernels/cpu/cpu_backend.hpp"
#include "model/model_source.hpp"
#include "model/stories_golden.hpp"
#include "runner/model_runner.hpp"
#include "support/recording_graph_backend.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <memory>

using namespace actorllm;

namespace {

std::unique_ptr<runner::model_runner> stories_runner(std::unique_ptr<backend> be, runner::graph_options o) {
  auto loaded = model::load_shard(test::model_dir("stories260K"), {}, {});
  auto runner =
      std::make_unique<runner::model_runner>(std::move(be), std::make_unique<single_rank_collective>(), loaded.config,
                                             std::move(loaded.weights), model::shard_spec{}, true);
  runner->set_graph_options(o);
  return runner;
}

runner::graph_options graphs_on(int32_t max_num_seqs) {
  runner::graph_options o;
  o.enabled = true;
  o.max_num_seqs = max_num_seqs;
  return o;
}

// Greedy decoding of `prompts` (one request each) through a runner's plans: step 1 prefills every prompt in one
// batch, then each step decodes one token of every sequence. Returns the tokens per request.
std::vector<std::vector<int32_t>> run_plans(runner::model_runner& runner,
                                            const std::vector<std::vector<int32_t>>& prompts, int n_steps) {
  const auto n = static_cast<uint64_t>(prompts.size());
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (int step = 0; step < n_steps; ++step) {
    engine::step_plan plan;
    plan.step_id = static_cast<uint64_t>(step) + 1;
    for (uint64_t r = 0; r < n; ++r) {
      const engine::seq_id seq{r + 1, 0};
      engine::scheduled_sequence s;
      s.seq = seq;
      s.query_begin = static_cast<int32_t>(plan.tokens.size());
      const auto& prompt = prompts[r];
      if (step == 0) {
        engine::sampler_setup setup;
        setup.request_id = r + 1;
        setup.spec.params.temperature = 0.0f;
        plan.new_requests.push_back(setup);
        for (size_t i = 0; i < prompt.size(); ++i) {
          plan.tokens.push_back(prompt[i]);
          plan.positions.push_back(static_cast<int32_t>(i));
        }
        s.n_query = static_cast<int32_t>(prompt.size());
        s.new_table = true;
        s.blocks = {static_cast<int32_t>(4 * r), static_cast<int32_t>(4 * r + 1), static_cast<int32_t>(4 * r + 2)};
      } else {
        plan.tokens.push_back(out[r].back());
        plan.positions.push_back(static_cast<int32_t>(prompt.size() + out[r].size() - 1));
        s.n_query = 1;
      }
      plan.sample_rows.push_back(static_cast<int32_t>(plan.tokens.size()) - 1);
      plan.sample_seqs.push_back(seq);
      plan.sequences.push_back(std::move(s));
    }
    const runner::step_output o = runner.run(plan, tensor{});
    REQUIRE(o.error.empty());
    REQUIRE(o.result.error.empty());
    REQUIRE(o.result.tokens.size() == n);
    for (uint64_t r = 0; r < n; ++r)
      out[r].push_back(o.result.tokens[r].token);
  }
  return out;
}

}  // namespace

TEST_CASE("a CPU shard never captures decode graphs, and reserves no memory for them") {
  auto runner = stories_runner(std::make_unique<cpu::cpu_backend>(1), graphs_on(8));
  CHECK(runner->graphs_disabled_reason().find("CPU") != std::string::npos);
  CHECK(runner->graph_memory_estimate(16) == 0);
  runner->allocate_cache(16, 16);
  CHECK(runner->graphs() == nullptr);
}

TEST_CASE("--enforce-eager: a graph-capable shard captures none") {
  runner::graph_options eager = graphs_on(8);
  eager.enabled = false;
  auto runner = stories_runner(std::make_unique<test::recording_graph_backend>(), eager);
  CHECK(runner->graphs_disabled_reason() == "--enforce-eager");
  CHECK(runner->graph_memory_estimate(16) == 0);
  runner->allocate_cache(16, 16);
  CHECK(runner->graphs() == nullptr);
}

TEST_CASE("a graph-capable shard captures graphs up to max_num_seqs and reserves their memory in its profile") {
  auto runner = stories_runner(std::make_unique<test::recording_graph_backend>(), graphs_on(3));
  CHECK(runner->graphs_disabled_reason().empty());
  const size_t reserve = runner->graph_memory_estimate(16);
  CHECK(reserve > 0);
  // stories260K: 512-token context in 32 blocks, vocab 512, sizes 1, 2, 4.
  CHECK(reserve >= 4u * 512 * 4 + 1000);  // at least the logits of the largest graph and the backend's reserve
  CHECK(runner->profile_forward(32, 16) >= reserve);
  runner->allocate_cache(16, 16);
  REQUIRE(runner->graphs() != nullptr);
  CHECK(std::vector<int32_t>(runner->graphs()->sizes().begin(), runner->graphs()->sizes().end()) ==
        std::vector<int32_t>{1, 2, 4});
  CHECK(runner->graphs()->max_blocks_per_seq() == 32);
  // A max_model_len narrows the block tables.
  runner::graph_options narrow = graphs_on(3);
  narrow.max_model_len = 100;
  runner->set_graph_options(narrow);
  runner->allocate_cache(16, 16);
  REQUIRE(runner->graphs() != nullptr);
  CHECK(runner->graphs()->max_blocks_per_seq() == 7);
}

TEST_CASE("plans through a graph runner: decode steps replay graphs, tokens equal the eager runner's and the golden") {
  const test::stories_golden& g = test::load_stories_golden();
  const std::vector<std::vector<int32_t>> prompts{g.bos_prompt_ids, g.prompts[0].prompt_ids, g.prompts[1].prompt_ids};
  const int n_steps = 20;

  auto eager = stories_runner(std::make_unique<cpu::cpu_backend>(1), graphs_on(4));
  eager->allocate_cache(16, 16);
  const auto eager_tokens = run_plans(*eager, prompts, n_steps);

  auto graphs = stories_runner(std::make_unique<test::recording_graph_backend>(), graphs_on(4));
  graphs->allocate_cache(16, 16);
  REQUIRE(graphs->graphs() != nullptr);
  const auto graph_tokens = run_plans(*graphs, prompts, n_steps);
  CHECK(graphs->graph_replays() == static_cast<uint64_t>(n_steps - 1));  // the prefill step ran eagerly
  CHECK(eager->graph_replays() == 0);
  CHECK(graph_tokens == eager_tokens);
  const std::vector<std::vector<int32_t>> golden{g.bos_output_ids, g.prompts[0].greedy_output_ids,
                                                 g.prompts[1].greedy_output_ids};
  for (size_t r = 0; r < prompts.size(); ++r)
    CHECK(graph_tokens[r] == std::vector<int32_t>(golden[r].begin(), golden[r].begin() + n_steps));
}
