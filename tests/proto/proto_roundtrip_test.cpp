// Every protocol type survives CAF's binary serialization, on its own and inside a caf::message (which only works
// for types registered through the type-ID block), and errors keep their code and message.
#include "actorllm/proto/type_ids.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/message.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <doctest/doctest.h>

#include <limits>

using namespace actorllm;

namespace {

struct proto_fixture {
  static caf::actor_system_config& config() {
    static caf::actor_system_config cfg = [] {
      caf::actor_system_config c;
      c.set("scheduler.max-threads", 1);
      proto::add_message_types(c);
      return c;
    }();
    return cfg;
  }
  caf::actor_system sys{config()};

  template <class T>
  T roundtrip(const T& in) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    T copy = in;
    auto err = sink(copy);
    REQUIRE_MESSAGE(!err, sys.render(err));
    REQUIRE(!buf.empty());
    T out;
    caf::binary_deserializer source{sys, buf};
    err = source(out);
    REQUIRE_MESSAGE(!err, sys.render(err));
    return out;
  }

  // Through a type-erased caf::message: needs the registered type name on both ends.
  template <class T>
  T roundtrip_message(const T& in) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    caf::message msg = caf::make_message(in);
    auto err = sink(msg);
    REQUIRE_MESSAGE(!err, sys.render(err));
    caf::message back;
    caf::binary_deserializer source{sys, buf};
    err = source(back);
    REQUIRE_MESSAGE(!err, sys.render(err));
    REQUIRE(back.match_elements<T>());
    return back.get_as<T>(0);
  }
};

sampling_params full_sampling_params() {
  sampling_params p;
  p.n = 3;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.min_p = 0.05f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  p.repetition_penalty = 1.1f;
  p.seed = std::numeric_limits<uint64_t>::max() - 3;
  p.max_tokens = 77;
  p.min_tokens = 2;
  p.stop = {"\n\n", "The end", "é"};
  p.stop_token_ids = {13, 2};
  p.include_stop_str_in_output = true;
  p.ignore_eos = true;
  p.logprobs = 5;
  p.logprob_token_ids = {4, 0, 4};
  p.skip_special_tokens = false;
  p.structured_pattern = "[a-z]+";
  p.reasoning_end_token_id = 19;
  p.reasoning_start_token_id = 18;
  return p;
}

completion_output full_completion(uint32_t index) {
  completion_output c;
  c.index = index;
  c.token_ids = {5, 6, 7, 2};
  c.text = "a story\xe2\x80\x99s end";
  c.finish_reason = finish_reason::stop;
  c.stop_string = "end";
  c.stop_token_id = 2;
  c.logprobs = {{5, -0.5f, {{5, -0.5f}, {9, -1.25f}}}, {6, -0.125f, {}}};
  c.cumulative_logprob = -0.625;
  return c;
}

proto::step_plan full_plan() {
  proto::step_plan p;
  p.step_id = 42;
  p.tokens = {1, 15, 22, 9};
  p.positions = {0, 1, 2, 17};
  p.sequences = {{{10, 0}, 0, 3, true, {4, 1}}, {{11, 2}, 3, 1, false, {}}, {{12, 0}, 4, 0, false, {8}}};
  p.dropped_seqs = {{3, 0}, {4, 1}};
  p.sample_rows = {2, 3};
  p.sample_seqs = {{10, 0}, {11, 2}};
  ops::sampling_spec spec;
  spec.params = {0.8f, 0.95f, 50, 0.1f, 1.2f, 0.3f, 0.4f, 3, -1, {5, 6}, {{7}, {8, 9}}, 2, {2}, {{5, 1.5f}}};
  spec.seed = 1234;
  spec.structured_pattern = "[a-z]+";
  spec.reasoning_end_token_id = 19;
  spec.logprob_token_ids = {3, 11};
  p.new_requests = {{10, spec, {1, 15, 22}, {7, 8}}};
  p.released_requests = {3, 4};
  return p;
}

}  // namespace

TEST_CASE_FIXTURE(proto_fixture, "public value types round-trip, optionals set and unset") {
  auto p = full_sampling_params();
  CHECK(roundtrip(p) == p);
  CHECK(roundtrip(sampling_params{}) == sampling_params{});
  sampling_params unset;
  unset.max_tokens.reset();
  CHECK(roundtrip(unset) == unset);
  CHECK(!roundtrip(unset).max_tokens.has_value());

  engine_config cfg;
  cfg.model = "/models/llama";
  cfg.tensor_parallel_size = 4;
  cfg.pipeline_parallel_size = 2;
  cfg.pp_layer_partition = "3,2";
  cfg.kv_cache_memory = size_t{5} << 33;
  cfg.seed = 99;
  cfg.device = "cuda";
  auto cfg_back = roundtrip(cfg);
  CHECK(cfg_back.model == cfg.model);
  CHECK(cfg_back.device == "cuda");
  CHECK(cfg_back.tensor_parallel_size == 4);
  CHECK(cfg_back.pp_layer_partition == "3,2");
  CHECK(cfg_back.kv_cache_memory == cfg.kv_cache_memory);
  CHECK(cfg_back.seed == 99);

  auto c = full_completion(1);
  CHECK(roundtrip(c) == c);
  completion_output running;
  running.token_ids = {1};
  CHECK(roundtrip(running) == running);
  CHECK(!roundtrip(running).finish_reason.has_value());

  request_output out;
  out.request_id = 7;
  out.prompt = "Once upon a time";
  out.prompt_token_ids = {1, 403, 407};
  out.outputs = {full_completion(0), full_completion(1)};
  out.finished = true;
  out.usage = {3, 8};
  CHECK(roundtrip(out) == out);

  stream_delta d;
  d.request_id = 7;
  d.index = 1;
  d.token_ids = {9};
  d.text = " there";
  d.logprobs = {{9, -0.1f, {{9, -0.1f}}}};
  d.finish_reason = finish_reason::length;
  CHECK(roundtrip(d) == d);

  engine_stats s;
  s.healthy = false;
  s.failure = "shard 1 of stage 0 failed";
  s.n_requests = 3;
  s.n_running = 2;
  s.n_waiting = 5;
  s.n_preemptions = 11;
  s.n_steps = 1000;
  s.n_steps_in_flight = 2;
  s.n_blocks = 64;
  s.n_free_blocks = 10;
  s.forward_seconds = 12.5;
  s.sample_seconds = 0.25;
  s.block_size = 16;
  s.kv_cache_usage = 54.0 / 64.0;
  s.prefix_cache_queries = 4000;
  s.prefix_cache_hits = 3200;
  s.n_cached_blocks = 40;
  CHECK(roundtrip(s) == s);
}

TEST_CASE_FIXTURE(proto_fixture, "front-end and engine messages round-trip, also inside a caf::message") {
  // (An argument, however unused: CAF 0.17 dereferences a null argument tuple when the function takes none.)
  auto sink = sys.spawn([](caf::event_based_actor*, int) -> caf::behavior { return {[](proto::output_batch&) {}}; }, 0);
  proto::submit_request req;
  req.request_id = 12;
  req.prompt_is_tokens = true;
  req.prompt_ids = {1, 2, 3};
  req.params = full_sampling_params();
  req.priority = -1;
  req.cache_salt = "tenant-a";
  req.stream = true;
  req.sink = caf::actor_cast<proto::output_sink>(sink);
  req.resume_tokens = {{5, -0.5f, {{5, -0.5f}, {9, -1.5f}}}, {6, -0.25f, {}}};
  auto back = roundtrip(req);
  CHECK(back == req);
  CHECK(back.sink == req.sink);  // a local handle deserializes to the same actor
  CHECK(roundtrip_message(req) == req);
  proto::submit_request text_req;
  text_req.prompt_text = "Hello";
  CHECK(roundtrip(text_req) == text_req);  // a null sink survives too

  proto::output_batch batch;
  stream_delta d;
  d.request_id = 12;
  d.token_ids = {4};
  d.text = "x";
  batch.deltas = {d};
  request_output o;
  o.request_id = 12;
  o.outputs = {full_completion(0)};
  o.finished = true;
  batch.outputs = {o};
  batch.failures = {{13, errc::exceeds_max_model_len, "the prompt (600 tokens) is too long"}};
  CHECK(roundtrip(batch) == batch);
  CHECK(roundtrip_message(batch) == batch);

  proto::request_spec spec;
  spec.request_id = 12;
  spec.prompt_ids = {1, 2, 3};
  spec.max_tokens = 20;
  spec.n = 2;
  spec.priority = 3;
  spec.eos_token_ids = {2, 1};
  spec.ignore_eos = true;
  spec.stop_token_ids = {13};
  spec.min_tokens = 1;
  spec.sampling = {{0.5f, 0.9f, 10, 0.0f, 1.0f, 0.0f, 0.0f, -1, -1, {}, {}, 0, {}, {{3, -2.0f}}}, 77, "", -1, {}};
  CHECK(roundtrip(spec) == spec);
  CHECK(roundtrip_message(spec) == spec);
  spec.cache_salt = "tenant-b";
  spec.resume_output_ids = {5, 6};
  CHECK(roundtrip(spec) == spec);

  proto::step_update upd;
  upd.step_id = 9;
  upd.seqs = {{12, 0, 44, -0.5f, {{44, -0.5f}}, std::nullopt, 32},
              {12, 1, std::nullopt, 0.0f, {}, finish_reason::abort, 0}};
  upd.failure = "";
  CHECK(roundtrip(upd) == upd);
  CHECK(roundtrip_message(upd) == upd);
  proto::step_update failed;
  failed.failure = "stage 1 rank 0: forward failed";
  CHECK(roundtrip(failed) == failed);

  proto::finish_sequences fin{{{12, 0}, {13, 4}}};
  CHECK(roundtrip(fin) == fin);
  CHECK(roundtrip_message(fin) == fin);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(proto_fixture, "a shared plan is serialized once however many messages carry it") {
  const proto::shared_plan shared{std::make_shared<const proto::step_plan>(full_plan())};
  const uint64_t before = proto::plan_serializations().load();
  for (int shard = 0; shard < 4; ++shard) {  // as the scheduler sends it to 4 shards in other processes
    auto back = roundtrip_message(shared);
    REQUIRE(back.plan != nullptr);
    CHECK(back.plan != shared.plan);  // a fresh plan, equal by value
    CHECK(*back.plan == *shared.plan);
    CHECK(roundtrip(shared) == shared);
  }
  CHECK(proto::plan_serializations().load() - before == 1);
  // Another step's plan is serialized on its own.
  proto::step_plan next = full_plan();
  next.step_id = 43;
  const proto::shared_plan other{std::make_shared<const proto::step_plan>(next)};
  CHECK(roundtrip(other).plan->step_id == 43);
  CHECK(proto::plan_serializations().load() - before == 2);
  // Printing a plan (CAF's to_string) serializes nothing.
  CHECK(caf::deep_to_string(other).find("43") != std::string::npos);
  CHECK(proto::plan_serializations().load() - before == 2);
}

TEST_CASE_FIXTURE(proto_fixture, "step plans, stage handoffs and step results round-trip") {
  auto plan = full_plan();
  CHECK(roundtrip(plan) == plan);
  CHECK(roundtrip_message(plan) == plan);

  tensor hidden = make_host_tensor(dtype::f32, {3, 1});
  const float values[] = {0.5f, -1.0f, 3.25f};
  std::copy(std::begin(values), std::end(values), hidden.data_as<float>());
  proto::stage_handoff handoff{42, hidden, {3, 0, 7}};
  auto handoff_back = roundtrip(handoff);
  CHECK(handoff_back == handoff);
  CHECK(handoff_back.hidden.shape == hidden.shape);
  CHECK(handoff_back.hidden.buf != hidden.buf);  // fresh floats, equal by value
  CHECK(roundtrip_message(handoff) == handoff);
  proto::stage_handoff experts_only{43, {}, {1, 2}};
  CHECK(roundtrip(experts_only) == experts_only);
  CHECK(roundtrip(experts_only).hidden.empty());

  proto::step_result res;
  res.step_id = 42;
  res.tokens = {{15, -0.25f, {}}, {2, -3.5f, {{7, -0.1f}, {2, -3.5f}}}};
  res.forward_seconds = 0.125;
  res.sample_seconds = 0.0625;
  res.expert_tokens = {5, 0, 9, 1};
  CHECK(roundtrip(res) == res);
  CHECK(roundtrip_message(res) == res);
  proto::step_result failed;
  failed.step_id = 43;
  failed.error = "block 99 outside a cache of 64 blocks";
  CHECK(roundtrip(failed) == failed);

  proto::shard_profile prof{
      1, 3, 3, 5, 123456, 20480, 51, "bfloat16", "node-a/cuda:1", 85899345920, 21474836480, 17179869184, 19327352832};
  CHECK(roundtrip(prof) == prof);
  CHECK(roundtrip_message(prof) == prof);
  proto::kv_cache_config kv{51, 16, 20480};
  CHECK(roundtrip(kv) == kv);
  CHECK(roundtrip_message(kv) == kv);
  CHECK(kv.token_capacity() == 51 * 16);
}

TEST_CASE_FIXTURE(proto_fixture, "a shard assignment round-trips with its device, also inside a caf::message") {
  proto::shard_assignment a;
  a.model_dir = "/models/llama";
  a.tokenizer = "/models/llama-tokenizer";
  a.tp_rank = 1;
  a.tp_size = 2;
  a.layer_begin = 3;
  a.layer_end = 5;
  a.stage = 1;
  a.pp_size = 2;
  a.load_format = "dummy";
  a.dtype = "bfloat16";
  a.device = "cuda";
  a.seed = 42;
  a.n_threads = 4;
  a.samples = true;
  a.enforce_eager = true;
  a.max_num_seqs = 64;
  a.max_model_len = 4096;
  a.data_plane_host = "10.0.0.2";
  a.rendezvous_prefix = "gen-1234abcd";
  a.collective_timeout_ms = 5000;
  auto back = roundtrip(a);
  CHECK(back == a);
  CHECK(back.device == "cuda");
  CHECK(back.enforce_eager);  // a worker's shard is told to run eagerly (no decode graphs)
  CHECK(back.max_num_seqs == 64);
  CHECK(back.max_model_len == 4096);
  CHECK(roundtrip_message(a) == a);
  CHECK_FALSE(roundtrip(proto::shard_assignment{}).enforce_eager);
  CHECK(roundtrip(proto::shard_assignment{}).device == "cpu");
}

TEST_CASE_FIXTURE(proto_fixture, "errors keep their code and message across serialization") {
  auto err = proto::make_error(errc::invalid_config,
                               "8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3");
  CHECK(proto::code_of(err) == errc::invalid_config);
  CHECK(proto::message_of(err) == "8 attention heads and 4 kv heads are not divisible by tensor_parallel_size 3");
  auto back = roundtrip(err);
  CHECK(back == err);
  CHECK(proto::code_of(back) == errc::invalid_config);
  CHECK(proto::message_of(back) == proto::message_of(err));
  CHECK(sys.render(err).find("invalid_config: 8 attention heads") != std::string::npos);
  auto ex = proto::to_exception(back);
  CHECK(ex.code() == errc::invalid_config);
  CHECK(std::string{ex.what()}.find("tensor_parallel_size 3") != std::string::npos);
  // An error from CAF itself (a dead actor) maps to engine_failure with CAF's description.
  caf::error dead = caf::sec::request_receiver_down;
  CHECK(proto::code_of(dead) == errc::engine_failure);
  CHECK(proto::message_of(dead).find("request_receiver_down") != std::string::npos);
}

TEST_CASE("the engine core's errors, requests and events in the protocol's terms") {
  // Errors: the request-level codes keep their meaning, the core's own bookkeeping is a protocol violation.
  const caf::error full = proto::make_error(engine::engine_error{engine::engine_errc::exceeds_kv_cache, "42 blocks"});
  CHECK(proto::code_of(full) == errc::exceeds_kv_cache);
  CHECK(proto::message_of(full) == "42 blocks");
  CHECK(proto::to_errc(engine::engine_errc::duplicate_request) == errc::duplicate_request);
  CHECK(proto::to_errc(engine::engine_errc::unknown_step) == errc::internal);
  CHECK(proto::to_public(engine::finish_reason::length) == finish_reason::length);

  // A request_spec is the scheduler's request under the protocol's names.
  proto::request_spec spec;
  spec.request_id = 7;
  spec.prompt_ids = {1, 2, 3};
  spec.max_tokens = 9;
  spec.n = 2;
  spec.priority = -1;
  spec.eos_token_ids = {0};
  spec.ignore_eos = true;
  spec.stop_token_ids = {4};
  spec.min_tokens = 1;
  spec.sampling.params.temperature = 0.5f;
  spec.sampling.params.prompt_logprobs = 2;
  spec.cache_salt = "tenant";
  spec.resume_output_ids = {8};
  spec.lora = {3, "sql", "/adapters/sql"};
  const proto::request_spec copy = spec;
  const engine::request req = proto::to_engine_request(proto::request_spec{spec});
  CHECK(req.id == 7);
  CHECK(req.prompt == copy.prompt_ids);
  CHECK(req.max_tokens == 9);
  CHECK(req.n == 2);
  CHECK(req.priority == -1);
  CHECK(req.eos_token_ids == copy.eos_token_ids);
  CHECK(req.ignore_eos);
  CHECK(req.stop_token_ids == copy.stop_token_ids);
  CHECK(req.min_tokens == 1);
  CHECK(req.cache_salt == copy.cache_salt);
  CHECK(req.resume_output == copy.resume_output_ids);
  CHECK(req.score_prompt);  // prompt logprobs asked for
  CHECK(req.lora == copy.lora);
  CHECK(req.sampling == copy.sampling);

  // A step's news: each event takes the token of the sample row it names.
  proto::step_result res;
  res.step_id = 5;
  res.tokens = {{11, -0.5f, {}}, {12, -1.5f, {{12, -1.5f}}}, {13, -2.5f, {}}};
  res.prompt_scores = {{{7, 0}, 0, 2, -0.25f, 1, {{2, -0.25f}}}};
  std::vector<engine::seq_event> events(2);
  events[0].seq = {7, 1};  // row 0's sequence ended meanwhile: no event for it
  events[0].new_token = 12;
  events[0].sample_row = 1;
  events[0].n_cached_tokens = 16;
  events[1].seq = {9, 0};
  events[1].new_token = 13;
  events[1].finished = engine::finish_reason::stop;
  events[1].sample_row = 2;
  const proto::step_update upd = proto::make_step_update(res, events);
  CHECK(upd.step_id == 5);
  REQUIRE(upd.prompts.size() == 1);
  CHECK(upd.prompts[0].request_id == 7);
  CHECK(upd.prompts[0].entry.rank == 1);
  REQUIRE(upd.seqs.size() == 2);
  CHECK(upd.seqs[0].request_id == 7);
  CHECK(upd.seqs[0].index == 1);
  CHECK(upd.seqs[0].token == 12);
  CHECK(upd.seqs[0].logprob == -1.5f);
  CHECK(upd.seqs[0].top.size() == 1);
  CHECK(upd.seqs[0].num_cached_tokens == 16);
  CHECK_FALSE(upd.seqs[0].finished.has_value());
  CHECK(upd.seqs[1].token == 13);
  CHECK(upd.seqs[1].logprob == -2.5f);
  CHECK(upd.seqs[1].finished == finish_reason::stop);
}
