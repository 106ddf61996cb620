// The scheduler's side of multi-LoRA: each batch sequence carries its request's adapter (which the plan names once in
// its loras), the running sequences apply at most max_loras adapters at once (a waiting request whose adapter would be
// one too many waits while the ones behind it go ahead), a request naming an adapter is refused while LoRA is off,
// and an adapter's prompt never hits the base model's (or another adapter's) cached blocks.
#include "engine/scheduler_core.hpp"

#include "fake_model.hpp"

#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

using namespace actorllm::engine;
using actorllm::engine::test::driver;
using actorllm::engine::test::make_scheduler;
using actorllm::engine::test::run_alone;
using actorllm::engine::test::scheduled_seqs;

namespace {

constexpr int32_t vocab = 101;

request make_request(uint64_t id, int32_t lora, int32_t prompt_len = 6, int32_t max_tokens = 5, int32_t seed = -1) {
  request r;
  r.id = id;
  for (int32_t i = 0; i < prompt_len; ++i)
    r.prompt.push_back(((seed < 0 ? static_cast<int32_t>(id) : seed) * 31 + i * 7) % vocab);
  r.max_tokens = max_tokens;
  r.lora = lora_ref{lora, "adapter-" + std::to_string(lora), "/adapters/" + std::to_string(lora)};
  return r;
}

void add(scheduler_core& s, const request& r) {
  auto ok = s.add_request(r);
  REQUIRE_MESSAGE(ok.has_value(), (ok.has_value() ? "" : ok.error().message));
}

scheduler_config lora_config(int32_t max_loras) {
  return scheduler_config{.max_num_seqs = 8,
                          .max_num_batched_tokens = 512,
                          .block_size = 4,
                          .n_blocks = 128,
                          .max_model_len = 64,
                          .max_loras = max_loras};
}

}  // namespace

TEST_CASE("scheduler: with max_loras 1 the adapters take turns, base requests run beside them, all finish") {
  const scheduler_config cfg = lora_config(1);
  auto s = make_scheduler(cfg);
  // Adapter 1, adapter 2, base, adapter 1 again: request 4 joins request 1, request 2 waits, request 3 is not held up.
  const std::vector<request> reqs{make_request(1, 1), make_request(2, 2), make_request(3, 0), make_request(4, 1)};
  std::map<uint64_t, int32_t> lora_of;
  for (const request& r : reqs) {
    add(s, r);
    lora_of[r.id] = r.lora.id;
  }
  driver d(s, vocab);
  d.keep_history = true;
  d.run_to_completion();
  REQUIRE_FALSE(d.history.empty());
  std::set<uint64_t> in_first;
  for (size_t p = 0; p < d.history.size(); ++p) {
    const step_plan& plan = d.history[p];
    std::set<int32_t> adapters;
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const seq_id seq = scheduled_seqs(plan)[i];
      CHECK(plan.sequences[i].lora_id == lora_of.at(seq.request_id));
      if (plan.sequences[i].lora_id != 0)
        adapters.insert(plan.sequences[i].lora_id);
      if (p == 0)
        in_first.insert(seq.request_id);
    }
    CHECK(adapters.size() <= 1);
  }
  CHECK(in_first == std::set<uint64_t>{1, 3, 4});  // 2 waited for adapter 1 to leave; 3 and 4 went ahead of it
  for (const request& r : reqs) {
    const seq_id id{r.id, 0};
    CAPTURE(to_string(id));
    auto ref = run_alone(r, 0, cfg.max_model_len, vocab, true);
    CHECK(d.outputs.at(id) == ref.output);
  }
  CHECK(s.allocator().n_free_blocks() == cfg.n_blocks);
}

TEST_CASE("scheduler: with max_loras 2 two adapters and the base model share a step") {
  auto s = make_scheduler(lora_config(2));
  for (const request& r : {make_request(1, 1), make_request(2, 2), make_request(3, 0), make_request(4, 3)})
    add(s, r);
  auto plan = s.schedule();
  REQUIRE(plan);
  std::set<int32_t> loras;
  for (const auto& seq : plan->sequences)
    loras.insert(seq.lora_id);
  CHECK(loras == std::set<int32_t>{0, 1, 2});  // adapter 3 would be a third
  // The plan names each adapter its sequences apply, once, as the shards load it.
  CHECK(plan->loras == std::vector<lora_ref>{{1, "adapter-1", "/adapters/1"}, {2, "adapter-2", "/adapters/2"}});
}

TEST_CASE("scheduler: a request naming an adapter is refused while LoRA is off, and a negative id always") {
  auto off = make_scheduler(lora_config(0));
  auto refused = off.add_request(make_request(1, 1));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == engine_errc::invalid_argument);
  CHECK(refused.error().message.find("enable-lora") != std::string::npos);
  auto on = make_scheduler(lora_config(1));
  auto negative = on.add_request(make_request(2, -3));
  REQUIRE_FALSE(negative.has_value());
  CHECK(negative.error().message.find("-3") != std::string::npos);
  CHECK(on.add_request(make_request(3, 0)).has_value());
}

TEST_CASE("scheduler: the prefix cache keeps each adapter's blocks apart from the base model's and each other's") {
  auto s = make_scheduler(lora_config(2));
  driver d(s, vocab);
  const uint64_t queries0 = s.prefix_cache_hits();
  add(s, make_request(1, 0, 24, 2, 9));  // the same 24-token prompt every time
  d.run_to_completion();
  add(s, make_request(2, 1, 24, 2, 9));  // adapter 1: no hit on the base model's blocks
  d.run_to_completion();
  CHECK(s.prefix_cache_hits() == queries0);
  add(s, make_request(3, 2, 24, 2, 9));  // adapter 2: no hit on adapter 1's
  d.run_to_completion();
  CHECK(s.prefix_cache_hits() == queries0);
  add(s, make_request(4, 1, 24, 2, 9));  // adapter 1 again: hits its own 20 full-block tokens
  d.run_to_completion();
  CHECK(s.prefix_cache_hits() == queries0 + 20);
  add(s, make_request(5, 0, 24, 2, 9));  // the base model again: hits its own
  d.run_to_completion();
  CHECK(s.prefix_cache_hits() == queries0 + 40);
}
