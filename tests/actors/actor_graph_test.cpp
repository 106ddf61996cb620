// The engine and scheduler actors over fake pipeline stages, run by CAF's deterministic test coordinator: every
// message is delivered when the test says so, so "two plans in flight" and "blocks free while a step is still in
// flight" are observed exactly, with no sleeps and no real model. Every fake stage gets every plan from the scheduler
// and keeps the block tables its diffs build up (runner::persistent_batch), a paged cache of token ids, and
// "predicts" a hash of everything a sequence's block table holds, so a wrong block table, a missed diff or a bad
// recompute after preemption changes the output.
#include "actorllm/proto/type_ids.hpp"
#include "actors/runtime/engine_actor.hpp"
#include "actors/runtime/scheduler_actor.hpp"
#include "deterministic_system.hpp"
#include "kernels/backend.hpp"
#include "runner/persistent_batch.hpp"
#include "runner/sequence_samplers.hpp"
#include "runner/step_inbox.hpp"
#include "support/test_paths.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <span>

using namespace actorllm;

namespace {

uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

int32_t fake_next(std::span<const int32_t> tokens, int32_t vocab) {
  uint64_t h = 0x12345;
  for (int32_t t : tokens)
    h = mix(h, static_cast<uint32_t>(t));
  return 3 + static_cast<int32_t>(h % static_cast<uint64_t>(vocab - 3));  // never a special token
}

// What a greedy request generates alone: the reference every batched run must reproduce.
std::vector<int32_t> alone(std::vector<int32_t> tokens, int32_t max_tokens, int32_t vocab) {
  std::vector<int32_t> out;
  while (static_cast<int32_t>(out.size()) < max_tokens) {
    out.push_back(fake_next(tokens, vocab));
    tokens.push_back(out.back());
  }
  return out;
}

using fake_stage = caf::typed_actor<caf::reacts_to<proto::shared_plan>, caf::reacts_to<proto::stage_handoff>,
                                    caf::reacts_to<proto::connect_atom, proto::result_sink>>;

// Block ids the plans shipped, and how many the whole tables of their sequences held.
struct block_counts {
  size_t shipped = 0;
  size_t whole = 0;
};

struct fake_stage_state {
  int32_t block_size = 4;
  int32_t vocab = 32;
  std::vector<int32_t> cache;  // one token id per KV slot
  bool samples = false;
  proto::shard_link next;
  proto::result_sink results;
  runner::sequence_samplers samplers;
  std::shared_ptr<backend> be = make_backend(device_kind::cpu, 1);  // the sampler's
  std::optional<uint64_t> fail_step;
  std::shared_ptr<std::vector<uint64_t>> steps_seen = std::make_shared<std::vector<uint64_t>>();
  runner::persistent_batch tables;
  runner::step_inbox inbox;
  std::shared_ptr<block_counts> blocks = std::make_shared<block_counts>();
};

struct fake_stage_args {
  int32_t block_size = 4;
  int32_t n_blocks = 0;
  int32_t vocab = 32;
  bool samples = false;
  proto::shard_link next;
  std::optional<uint64_t> fail_step;
  std::shared_ptr<std::vector<uint64_t>> steps_seen;
  std::shared_ptr<block_counts> blocks = std::make_shared<block_counts>();
  bool expects_handoff = false;  // a later stage: its hidden states come from the previous one
};

proto::step_result fake_forward(fake_stage_state& st, const proto::step_plan& plan, const tensor& hidden) {
  proto::step_result failed;
  failed.step_id = plan.step_id;
  if (st.fail_step && plan.step_id == *st.fail_step) {
    failed.error = "fake stage: step failed on purpose";
    return failed;
  }
  if (!hidden.empty() && proto::hidden_floats(hidden) != std::vector<float>(plan.tokens.begin(), plan.tokens.end())) {
    failed.error = "fake stage: hidden states are not the previous stage's";
    return failed;
  }
  if (auto err = st.tables.apply(plan); !err.empty()) {
    failed.error = "fake stage: " + err;
    return failed;
  }
  const model::forward_batch& batch = st.tables.batch();
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    st.blocks->shipped += plan.sequences[i].blocks.size();
    st.blocks->whole += batch.sequences[i].block_table.size();
  }
  const auto bs = static_cast<size_t>(st.block_size);
  auto slot = [&](const model::batch_sequence& s, int32_t pos) {
    return static_cast<size_t>(s.block_table.at(static_cast<size_t>(pos / st.block_size))) * bs +
           static_cast<size_t>(pos % st.block_size);
  };
  for (const auto& s : batch.sequences)
    for (int32_t q = 0; q < s.n_query; ++q) {
      const auto row = static_cast<size_t>(s.query_begin + q);
      st.cache.at(slot(s, plan.positions[row])) = plan.tokens[row];
    }
  if (!st.samples)
    return {};
  tensor logits_tensor =
      make_host_tensor(dtype::f32, {static_cast<int64_t>(plan.sample_rows.size()), static_cast<int64_t>(st.vocab)});
  std::span<float> logits{logits_tensor.data_as<float>(), static_cast<size_t>(logits_tensor.numel())};
  std::fill(logits.begin(), logits.end(), 0.0f);
  for (size_t i = 0; i < plan.sample_rows.size(); ++i) {
    const int32_t row = plan.sample_rows[i];
    for (const auto& s : batch.sequences) {
      if (row < s.query_begin || row >= s.query_begin + s.n_query)
        continue;
      std::vector<int32_t> seen;
      for (int32_t pos = 0; pos <= plan.positions[static_cast<size_t>(row)]; ++pos)
        seen.push_back(st.cache.at(slot(s, pos)));
      logits[i * static_cast<size_t>(st.vocab) + static_cast<size_t>(fake_next(seen, st.vocab))] = 30.0f;
    }
  }
  return st.samplers.sample(plan, *st.be, logits_tensor);
}

fake_stage::behavior_type fake_stage_behavior(fake_stage::stateful_pointer<fake_stage_state> self,
                                              fake_stage_args args) {
  auto& st = self->state;
  st.block_size = args.block_size;
  st.vocab = args.vocab;
  st.cache.assign(static_cast<size_t>(args.n_blocks * args.block_size), -1);
  st.samples = args.samples;
  st.next = args.next;
  st.fail_step = args.fail_step;
  st.steps_seen = args.steps_seen;
  st.blocks = args.blocks;
  st.inbox.expect_handoff(args.expects_handoff);
  auto run_ready = [self] {
    auto& s = self->state;
    while (auto step = s.inbox.next()) {
      const proto::step_plan& plan = *step->plan;
      s.steps_seen->push_back(plan.step_id);
      if (s.samples)
        s.samplers.apply(plan);
      proto::step_result r = fake_forward(s, plan, step->handoff.hidden);
      if (!r.error.empty() || s.samples) {
        self->send(s.results, std::move(r));
        continue;
      }
      tensor hidden = make_host_tensor(dtype::f32, {static_cast<int64_t>(plan.tokens.size())});
      std::copy(plan.tokens.begin(), plan.tokens.end(), hidden.data_as<float>());
      self->send(s.next, proto::stage_handoff{plan.step_id, std::move(hidden), {}});
    }
  };
  return {
      [self, run_ready](proto::shared_plan& p) {
        self->state.inbox.push(std::move(p.plan));
        run_ready();
      },
      [self, run_ready](proto::stage_handoff& h) {
        self->state.inbox.push(std::move(h));
        run_ready();
      },
      [self](proto::connect_atom, proto::result_sink sink) { self->state.results = std::move(sink); },
  };
}

struct news {
  std::vector<int32_t> streamed_ids;
  std::optional<request_output> output;
  std::optional<proto::request_failure> failure;
};

struct graph_fixture : test::deterministic_system {
  proto::engine_actor engine;
  proto::scheduler_actor scheduler;
  std::vector<fake_stage> stages;
  std::shared_ptr<std::vector<uint64_t>> first_stage_steps = std::make_shared<std::vector<uint64_t>>();
  std::shared_ptr<std::vector<uint64_t>> last_stage_steps = std::make_shared<std::vector<uint64_t>>();
  std::shared_ptr<block_counts> first_stage_blocks = std::make_shared<block_counts>();
  std::map<uint64_t, news> received;
  int32_t vocab = 32;

  // The actors hold each other (engine <-> scheduler <-> stages): stop them, or the system waits for them forever.
  ~graph_fixture() {
    for (const auto& s : stages)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    if (scheduler)
      caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
    if (engine)
      caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    sched.run();
  }

  struct options {
    int32_t pp = 1;
    int32_t n_blocks = 64;
    int32_t block_size = 4;
    int32_t max_num_seqs = 8;
    int32_t max_num_batched_tokens = 16;
    int32_t max_model_len = 64;
    int32_t vocab = 32;
    std::optional<uint64_t> fail_step;
    std::optional<text::tokenizer> tokenizer;
    std::chrono::milliseconds step_timeout{0};
  };

  void build(options o) {
    vocab = o.vocab;
    stages.resize(static_cast<size_t>(o.pp));
    for (int32_t s = o.pp - 1; s >= 0; --s) {
      fake_stage_args a;
      a.block_size = o.block_size;
      a.n_blocks = o.n_blocks;
      a.vocab = o.vocab;
      a.samples = s == o.pp - 1;
      if (s + 1 < o.pp)
        a.next = stages[static_cast<size_t>(s + 1)];
      a.expects_handoff = s > 0;
      if (s == 0) {
        a.fail_step = o.fail_step;
        a.steps_seen = first_stage_steps;
        a.blocks = first_stage_blocks;
      } else {
        a.steps_seen = s == o.pp - 1 ? last_stage_steps : std::make_shared<std::vector<uint64_t>>();
      }
      stages[static_cast<size_t>(s)] = sys.spawn(fake_stage_behavior, a);
    }
    actors::scheduler_args sa;
    sa.config.n_blocks = o.n_blocks;
    sa.config.block_size = o.block_size;
    sa.config.max_num_seqs = o.max_num_seqs;
    sa.config.max_num_batched_tokens = o.max_num_batched_tokens;
    sa.config.max_model_len = o.max_model_len;
    sa.config.pp_size = o.pp;
    for (const auto& stage : stages)
      sa.shards.push_back(stage);
    sa.step_timeout = o.step_timeout;
    scheduler = actors::spawn_scheduler(sys, sa);
    for (const auto& s : stages)
      self->send(s, proto::connect_atom::value, caf::actor_cast<proto::result_sink>(scheduler));
    actors::engine_args ea;
    ea.scheduler = scheduler;
    ea.tokenizer = std::move(o.tokenizer);
    ea.limits = actors::model_limits{o.vocab, o.max_model_len, {}, 0};
    engine = actors::spawn_engine(sys, std::move(ea));
    sched.run();
  }

  void submit(uint64_t id, std::vector<int32_t> prompt, sampling_params p, bool stream = true) {
    proto::submit_request r;
    r.request_id = id;
    r.prompt_is_tokens = true;
    r.prompt_ids = std::move(prompt);
    r.params = std::move(p);
    r.stream = stream;
    r.sink = caf::actor_cast<proto::output_sink>(self);
    self->send(engine, std::move(r));
  }

  void submit_text(uint64_t id, std::string prompt, sampling_params p) {
    proto::submit_request r;
    r.request_id = id;
    r.prompt_text = std::move(prompt);
    r.params = std::move(p);
    r.stream = true;
    r.sink = caf::actor_cast<proto::output_sink>(self);
    self->send(engine, std::move(r));
  }

  caf::resumable* job_of(const caf::abstract_actor* a) const {
    return dynamic_cast<caf::resumable*>(const_cast<caf::abstract_actor*>(a));
  }

  // Runs only the engine's and the scheduler's messages: the stages hold whatever reaches them.
  void run_control() {
    auto* e = job_of(caf::actor_cast<caf::abstract_actor*>(engine));
    auto* s = job_of(caf::actor_cast<caf::abstract_actor*>(scheduler));
    sched.run_jobs_filtered([&](caf::resumable* r) { return r == e || r == s; });
  }

  // Takes every output_batch that reached the test.
  void drain() {
    while (!self->mailbox().empty())
      self->receive([&](proto::output_batch& b) {
        for (auto& d : b.deltas)
          received[d.request_id].streamed_ids.insert(received[d.request_id].streamed_ids.end(), d.token_ids.begin(),
                                                     d.token_ids.end());
        for (auto& o : b.outputs) {
          CHECK(!received[o.request_id].output);  // one final output per request
          received[o.request_id].output = std::move(o);
        }
        for (auto& f : b.failures)
          received[f.request_id].failure = std::move(f);
      });
  }

  // Stats through the engine, with only the control actors running (so steps in flight stay in flight).
  engine_stats stats() {
    engine_stats out;
    auto h = self->request(engine, caf::infinite, caf::get_atom::value, proto::stats_atom::value);
    run_control();
    h.receive([&](engine_stats& s) { out = s; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    return out;
  }

  bool abort(uint64_t id) {
    bool live = false;
    auto h = self->request(engine, caf::infinite, proto::abort_atom::value, id);
    run_control();
    h.receive([&](bool b) { live = b; }, [&](caf::error& e) { FAIL(sys.render(e)); });
    return live;
  }
};

sampling_params greedy(int32_t max_tokens) {
  sampling_params p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

}  // namespace

TEST_CASE_FIXTURE(graph_fixture, "with pp 2 the scheduler keeps two plans in flight and the outputs are as alone") {
  options o;
  o.pp = 2;
  build(o);
  std::vector<std::vector<int32_t>> prompts{{1, 5, 6}, {1, 7, 8, 9, 10, 11}, {1, 12}};
  std::vector<int32_t> lengths{9, 5, 12};
  for (size_t i = 0; i < prompts.size(); ++i)
    submit(i + 1, prompts[i], greedy(lengths[i]));
  // Engine and scheduler only: the first two submissions each start a plan, the third waits for a free slot.
  run_control();
  CHECK(*first_stage_steps == std::vector<uint64_t>{});  // nothing delivered to the stage yet
  auto s = stats();
  CHECK(s.n_steps_in_flight == 2);
  CHECK(s.n_requests == 3);
  CHECK(s.n_steps == 0);

  sched.run();
  drain();
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i + 1);
    auto& n = received[i + 1];
    REQUIRE(n.output);
    const auto expected = alone(prompts[i], lengths[i], vocab);
    CHECK(n.output->outputs.at(0).token_ids == expected);
    CHECK(n.streamed_ids == expected);
    CHECK(n.output->outputs[0].finish_reason == finish_reason::length);
    CHECK(n.output->usage.prompt_tokens == static_cast<int32_t>(prompts[i].size()));
  }
  CHECK(first_stage_steps->size() >= 12);
  CHECK(*last_stage_steps == *first_stage_steps);  // every stage got every plan, in the same order
  auto after = stats();
  CHECK(after.n_free_blocks == after.n_blocks);
  CHECK(after.n_steps_in_flight == 0);
  CHECK(after.n_requests == 0);
  CHECK(after.n_steps == first_stage_steps->size());
  // The plans shipped each block id about once, not each sequence's whole table every step.
  CHECK(first_stage_blocks->shipped < first_stage_blocks->whole / 2);
}

TEST_CASE_FIXTURE(graph_fixture, "an abort frees the request's blocks before its step in flight has come back") {
  options o;
  o.pp = 1;
  o.n_blocks = 32;
  build(o);
  submit(7, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, greedy(40));
  // Deliver messages one actor at a time until the first delta reaches the test.
  while (self->mailbox().empty()) {
    REQUIRE(sched.has_job());
    sched.run_once();
  }
  auto running = stats();
  CHECK(running.n_running == 1);
  CHECK(running.n_free_blocks < running.n_blocks);
  CHECK(running.n_steps_in_flight == 1);

  CHECK(abort(7));
  auto after = stats();
  CHECK(after.n_free_blocks == after.n_blocks);  // free now...
  CHECK(after.n_running == 0);
  CHECK(after.n_requests == 0);
  CHECK(after.n_steps_in_flight == 1);  // ...although its step has not come back yet
  drain();
  REQUIRE(received[7].output);
  CHECK(received[7].output->outputs[0].finish_reason == finish_reason::abort);
  const auto n_tokens = received[7].output->outputs[0].token_ids.size();
  CHECK(n_tokens >= 1);

  sched.run();  // the step in flight returns; its token for the aborted request is dropped
  drain();
  CHECK(received[7].output->outputs[0].token_ids.size() == n_tokens);
  CHECK(stats().n_steps_in_flight == 0);
  CHECK(!abort(7));
}

TEST_CASE_FIXTURE(graph_fixture, "a cache too small for every request preempts, recomputes and still gives alone's") {
  // 12 blocks of 4 slots; each request needs up to 8 blocks, 8 requests at once need far more.
  options o;
  o.pp = 2;
  o.n_blocks = 12;
  o.max_num_seqs = 6;
  build(o);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> lengths;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p{1};
    for (int t = 0; t < 3 + 2 * i; ++t)
      p.push_back(3 + (i * 7 + t * 3) % 29);
    prompts.push_back(p);
    lengths.push_back(10 + i);
    sampling_params params = greedy(lengths.back());
    if (i % 3 == 0) {  // seeded sampling: each sequence's generator survives its preemptions
      params.temperature = 1.0f;
      params.seed = 100 + i;
    }
    submit(i + 1, p, params);
  }
  sched.run();
  drain();
  auto s = stats();
  CHECK(s.n_preemptions > 0);
  CHECK(s.n_free_blocks == s.n_blocks);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i + 1);
    REQUIRE(received[i + 1].output);
    // A spike of 30 over zeros: sampling at temperature 1 picks the predicted token too (p > 1 - 1e-11).
    CHECK(received[i + 1].output->outputs[0].token_ids == alone(prompts[i], lengths[i], vocab));
  }
}

TEST_CASE_FIXTURE(graph_fixture, "a failed step fails every live request and marks the replica unhealthy") {
  options o;
  o.pp = 1;
  o.fail_step = 3;
  build(o);
  submit(1, {1, 2, 3}, greedy(20));
  submit(2, {1, 4}, greedy(20));
  sched.run();
  drain();
  for (uint64_t id : {1, 2}) {
    REQUIRE(received[id].failure);
    CHECK(received[id].failure->code == errc::engine_failure);
    CHECK(received[id].failure->message.find("step failed on purpose") != std::string::npos);
    CHECK(!received[id].output);
  }
  auto s = stats();
  CHECK(!s.healthy);
  CHECK(s.failure.find("step failed on purpose") != std::string::npos);
  CHECK(s.n_free_blocks == s.n_blocks);
  submit(3, {1, 2}, greedy(4));
  sched.run();
  drain();
  REQUIRE(received[3].failure);
  CHECK(received[3].failure->code == errc::engine_failure);
}

TEST_CASE_FIXTURE(graph_fixture, "a step that gets no result within the step timeout fails the replica") {
  options o;
  o.step_timeout = std::chrono::milliseconds{200};
  build(o);
  submit(1, {1, 2, 3}, greedy(20));
  run_control();  // the plan reaches the stage, which never runs: its result never comes
  CHECK(stats().n_steps_in_flight == 1);
  sched.advance_time(std::chrono::milliseconds{150});  // the watch looks (every 50 ms) and finds it young enough
  run_control();
  CHECK(stats().healthy);
  sched.advance_time(std::chrono::milliseconds{100});  // now 250 ms old
  run_control();
  drain();
  REQUIRE(received[1].failure);
  CHECK(received[1].failure->code == errc::engine_failure);
  CHECK(received[1].failure->message.find("step 1 got no result within 0.2 s") != std::string::npos);
  const auto s = stats();
  CHECK(!s.healthy);
  CHECK(s.n_free_blocks == s.n_blocks);
}

TEST_CASE_FIXTURE(graph_fixture, "steps that come back in time never trip the step timeout") {
  options o;
  o.step_timeout = std::chrono::milliseconds{200};
  build(o);
  submit(1, {1, 2, 3}, greedy(12));
  for (int i = 0; i < 20; ++i) {  // every step answers at once; time passes between them
    sched.run();
    sched.advance_time(std::chrono::milliseconds{150});
  }
  sched.run();
  drain();
  REQUIRE(received[1].output);
  CHECK(received[1].output->outputs.front().token_ids == alone({1, 2, 3}, 12, 32));
  CHECK(stats().healthy);
}

TEST_CASE_FIXTURE(graph_fixture, "rejections come back as failures naming the numbers") {
  options o;
  o.pp = 1;
  o.n_blocks = 4;
  o.max_model_len = 64;
  build(o);
  submit(1, {1, 2, 3}, greedy(40));  // 42 slots: more than the 16 of the whole cache
  sampling_params many = greedy(4);
  many.n = 9;
  submit(2, {1, 2}, many);        // more sequences than max_num_seqs
  submit(3, {1, 99}, greedy(4));  // outside the vocabulary of 32
  sched.run();
  drain();
  REQUIRE(received[1].failure);
  CHECK(received[1].failure->code == errc::exceeds_kv_cache);
  CHECK(received[1].failure->message.find("whole cache holds 4 blocks (16 tokens)") != std::string::npos);
  REQUIRE(received[2].failure);
  CHECK(received[2].failure->code == errc::too_many_sequences);
  REQUIRE(received[3].failure);
  CHECK(received[3].failure->message.find("outside the vocabulary of 32") != std::string::npos);
  CHECK(stats().n_requests == 0);
}

TEST_CASE_FIXTURE(graph_fixture, "a stop string found by the engine finishes the sequence in the scheduler at once") {
  auto tok = text::tokenizer::from_directory(test::model_dir("stories260K"));
  options o;
  o.pp = 2;
  o.max_model_len = 64;
  o.vocab = 512;
  o.tokenizer = tok;
  build(o);
  submit_text(1, "Once upon a time", greedy(30));
  sched.run();
  drain();
  REQUIRE(received[1].output);
  const std::string text = received[1].output->outputs[0].text;
  // A stop string from the middle of what the fake model writes: two ASCII letters.
  std::string stop;
  for (size_t i = text.size() / 3; i + 1 < text.size() && stop.empty(); ++i)
    if (std::isalpha(static_cast<unsigned char>(text[i])) && std::isalpha(static_cast<unsigned char>(text[i + 1])))
      stop = text.substr(i, 2);
  REQUIRE(!stop.empty());
  sampling_params p = greedy(30);
  p.stop = {stop};
  submit_text(2, "Once upon a time", p);
  // Run until the output arrives, then look at the scheduler before anything else runs.
  while (!received[2].output) {
    REQUIRE(sched.has_job());
    sched.run_once();
    drain();
  }
  const auto& c = received[2].output->outputs[0];
  CHECK(c.finish_reason == finish_reason::stop);
  CHECK(c.stop_string == stop);
  CHECK(c.text == text.substr(0, text.find(stop)));
  CHECK(c.token_ids.size() < 30);
  auto s = stats();
  CHECK(s.n_running == 0);
  CHECK(s.n_free_blocks == s.n_blocks);
  sched.run();
}

TEST_CASE_FIXTURE(graph_fixture, "a request resumed from a dead replica's output carries on as if uninterrupted") {
  options o;
  o.pp = 2;
  o.block_size = 4;
  build(o);
  const std::vector<int32_t> prompt{1, 5, 6, 7, 9};
  const auto expected = alone(prompt, 14, vocab);
  for (size_t cut : {size_t{1}, size_t{6}, size_t{13}}) {
    CAPTURE(cut);
    const uint64_t id = 100 + cut;
    proto::submit_request r;
    r.request_id = id;
    r.prompt_is_tokens = true;
    r.prompt_ids = prompt;
    r.params = greedy(14);
    r.params.logprobs = 0;
    r.stream = true;
    r.sink = caf::actor_cast<proto::output_sink>(self);
    for (size_t i = 0; i < cut; ++i)
      r.resume_tokens.push_back({expected[i], -0.25f, {}});
    self->send(engine, std::move(r));
    sched.run();
    drain();
    auto& n = received[id];
    REQUIRE(n.output);
    // The new tokens depend on every earlier one through the KV slots: the resumed ones were prefilled.
    CHECK(n.output->outputs.at(0).token_ids == expected);
    CHECK(n.streamed_ids == std::vector<int32_t>(expected.begin() + static_cast<std::ptrdiff_t>(cut), expected.end()));
    CHECK(n.output->outputs[0].finish_reason == finish_reason::length);
    REQUIRE(n.output->outputs[0].logprobs.size() == expected.size());
    CHECK(n.output->outputs[0].logprobs.front().logprob == -0.25f);  // the dead replica's, kept
    CHECK(n.output->usage.prompt_tokens == static_cast<int32_t>(prompt.size()));
    CHECK(n.output->usage.completion_tokens == static_cast<int32_t>(expected.size()));
  }

  // A resume that could not continue is refused by name.
  proto::submit_request bad;
  bad.request_id = 200;
  bad.prompt_is_tokens = true;
  bad.prompt_ids = prompt;
  bad.params = greedy(3);
  bad.sink = caf::actor_cast<proto::output_sink>(self);
  for (int32_t t : {5, 6, 7})
    bad.resume_tokens.push_back({t, 0.0f, {}});
  self->send(engine, bad);
  sched.run();
  drain();
  REQUIRE(received[200].failure);
  CHECK(received[200].failure->message.find("max_tokens 3 would already have finished it") != std::string::npos);
  auto s = stats();
  CHECK(s.n_free_blocks == s.n_blocks);
}
