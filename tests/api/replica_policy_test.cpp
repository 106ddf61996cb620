// The replica layer's plain classes, without actors: the request book (attempts, resubmissions, what a caller
// sees across a failover), the router (least outstanding work, prefix affinity within a slack) and the replica
// supervisor (restart policy and backoff per replica).
#include "api/delivery.hpp"
#include "api/replica_supervisor.hpp"
#include "api/request_book.hpp"
#include "api/router.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace actorllm;
using namespace actorllm::detail;

namespace {

struct recording_channel final : channel {
  std::vector<stream_delta> deltas;
  std::vector<request_output> outputs;
  std::vector<error> errors;
  void on_delta(stream_delta&& d) override { deltas.push_back(std::move(d)); }
  void on_output(request_output&& o) override { outputs.push_back(std::move(o)); }
  void on_error(error&& e) override { errors.push_back(std::move(e)); }
};

proto::submit_request submission(uint64_t attempt, int32_t n = 1, int32_t max_tokens = 10) {
  proto::submit_request s;
  s.request_id = attempt;
  s.prompt_is_tokens = true;
  s.prompt_ids = {1, 2, 3, 4, 5};
  s.prompt_text = "hello";
  s.params.n = n;
  s.params.max_tokens = max_tokens;
  s.params.logprobs = 0;
  return s;
}

stream_delta delta(uint64_t attempt, uint32_t index, int32_t token, std::string text) {
  stream_delta d;
  d.request_id = attempt;
  d.index = index;
  d.token_ids = {token};
  d.text = std::move(text);
  d.logprobs = {{token, -0.5f, {}}};
  return d;
}

void take(request_book& book, proto::output_batch b) {
  request_book::deliveries out;
  book.take(std::move(b), out);
  deliver(out);
}

}  // namespace

TEST_CASE("request book: an n = 1 request resumes elsewhere with its tokens so far, under its own id") {
  request_book book;
  auto ch = std::make_shared<recording_channel>();
  book.add(7, submission(7), ch, /*user_stream=*/true, /*replica=*/1);
  proto::output_batch b;
  b.deltas = {delta(7, 0, 40, "a"), delta(7, 0, 41, "b")};
  take(book, std::move(b));
  REQUIRE(ch->deltas.size() == 2);
  CHECK(ch->deltas[0].request_id == 7);
  CHECK(book.work(2) == std::vector<int64_t>{0, 8});  // 10 - 2 tokens to go; the prompt is done

  // The replica fails it: the book says move it, and from now on ignores that attempt.
  proto::output_batch failed;
  failed.failures = {{7, errc::engine_failure, "request 7: the engine failed: worker 0 is gone"}};
  request_book::deliveries out;
  book.take(std::move(failed), out);
  REQUIRE(out.to_fail_over.size() == 1);
  CHECK(out.to_fail_over[0].id == 7);
  CHECK(out.to_fail_over[0].replica == 1);
  CHECK(out.errors.empty());
  auto sub = book.resubmission(7, 0, 99);
  REQUIRE(sub);
  CHECK(sub->request_id == 99);
  CHECK(sub->prompt_ids == std::vector<int32_t>{1, 2, 3, 4, 5});
  REQUIRE(sub->resume_tokens.size() == 2);
  CHECK(sub->resume_tokens[1].token == 41);
  CHECK(sub->resume_tokens[1].logprob == -0.5f);
  CHECK(book.moves(7) == 1);
  CHECK(book.requests(2) == std::vector<int64_t>{1, 0});

  // Late news from the dead attempt is dropped; the new one's reaches the caller as request 7.
  proto::output_batch late;
  late.deltas = {delta(7, 0, 55, "zzz")};
  take(book, std::move(late));
  CHECK(ch->deltas.size() == 2);
  proto::output_batch next;
  next.deltas = {delta(99, 0, 42, "c")};
  request_output o;
  o.request_id = 99;
  o.outputs.resize(1);
  o.outputs[0].token_ids = {40, 41, 42};
  next.outputs = {o};
  take(book, std::move(next));
  REQUIRE(ch->deltas.size() == 3);
  CHECK(ch->deltas[2].request_id == 7);
  CHECK(ch->deltas[2].token_ids == std::vector<int32_t>{42});
  REQUIRE(ch->outputs.size() == 1);
  CHECK(ch->outputs[0].request_id == 7);
  CHECK(book.size() == 0);
}

TEST_CASE("request book: an n > 1 request runs again and swallows what its caller saw, a diverging run fails") {
  request_book book;
  auto ch = std::make_shared<recording_channel>();
  book.add(3, submission(3, /*n=*/2), ch, true, 0);
  proto::output_batch b;
  b.deltas = {delta(3, 0, 10, "x"), delta(3, 1, 20, "y"), delta(3, 0, 11, "z")};
  take(book, std::move(b));
  REQUIRE(ch->deltas.size() == 3);
  REQUIRE(book.lose_replica(0) == std::vector<uint64_t>{3});
  auto sub = book.resubmission(3, 1, 50);
  REQUIRE(sub);
  CHECK(sub->resume_tokens.empty());  // from the seed again

  proto::output_batch again;
  again.deltas = {delta(50, 0, 10, "x"), delta(50, 1, 20, "y"), delta(50, 0, 11, "z"), delta(50, 1, 21, "w")};
  take(book, std::move(again));
  REQUIRE(ch->deltas.size() == 4);  // only the new token reached the caller
  CHECK(ch->deltas[3].token_ids == std::vector<int32_t>{21});
  CHECK(ch->deltas[3].request_id == 3);

  // A second failover, and this time sequence 0 comes out different: the request fails, named.
  book.lose_replica(1);
  REQUIRE(book.resubmission(3, 0, 60));
  proto::output_batch diverged;
  diverged.deltas = {delta(60, 0, 13, "q")};
  take(book, std::move(diverged));
  REQUIRE(ch->errors.size() == 1);
  CHECK(std::string{ch->errors[0].what()}.find("came out different") != std::string::npos);
  CHECK(book.size() == 0);
}

TEST_CASE("request book: request errors name the caller's id, an abort between replicas ends with what it had") {
  request_book book;
  auto ch = std::make_shared<recording_channel>();
  book.add(5, submission(5), ch, false, 0);
  book.lose_attempt(5);
  REQUIRE(book.resubmission(5, 1, 77));
  proto::output_batch b;
  b.deltas = {delta(77, 0, 9, "n")};
  b.failures = {{77, errc::invalid_argument, "request 77: bad_words need a tokenizer"}};
  take(book, std::move(b));
  CHECK(ch->deltas.empty());  // the caller asked for no deltas
  REQUIRE(ch->errors.size() == 1);
  CHECK(std::string{ch->errors[0].what()} == "request 5: bad_words need a tokenizer");

  auto ch2 = std::make_shared<recording_channel>();
  book.add(6, submission(6), ch2, true, 0);
  proto::output_batch progress;
  progress.deltas = {delta(6, 0, 30, "he"), delta(6, 0, 31, "llo")};
  take(book, std::move(progress));
  REQUIRE(book.abort(6) == std::optional<std::pair<int32_t, uint64_t>>{{0, 6}});
  book.lose_replica(0);
  CHECK(!book.resubmission(6, 1, 80));  // aborted: not moved
  auto done = book.finish_aborted(6);
  REQUIRE(done);
  CHECK(done->second.request_id == 6);
  CHECK(done->second.outputs.at(0).token_ids == std::vector<int32_t>{30, 31});
  CHECK(done->second.outputs[0].text == "hello");
  CHECK(done->second.outputs[0].finish_reason == finish_reason::abort);
  CHECK(done->second.usage.completion_tokens == 2);
}

TEST_CASE("outstanding work counts the prompt until the first token, then the output still to come") {
  auto s = submission(1, /*n=*/2, /*max_tokens=*/10);
  CHECK(outstanding_tokens(s, {0, 0}, 256) == 5 + 20);
  CHECK(outstanding_tokens(s, {3, 1}, 256) == 7 + 9);
  s.params.max_tokens.reset();
  CHECK(outstanding_tokens(s, {0, 0}, 256) == 5 + 512);
}

TEST_CASE("router: least outstanding work, skipping replicas that do not serve") {
  router r{3, {.block_size = 4, .prefix_affinity = false}};
  const std::vector<int32_t> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  CHECK(r.pick(prompt, std::vector<int64_t>{30, 10, 20}, {true, true, true}) == 1);
  CHECK(r.pick(prompt, std::vector<int64_t>{30, 10, 20}, {true, false, true}) == 2);
  CHECK(r.pick(prompt, std::vector<int64_t>{30, 10, 20}, {false, false, false}) == std::nullopt);
  // Equal work: the replica that got fewer requests so far, then the lower rank.
  CHECK(r.pick(prompt, std::vector<int64_t>{0, 0, 0}, {true, true, true}) == 0);
  r.routed(prompt, 0);
  CHECK(r.pick(prompt, std::vector<int64_t>{0, 0, 0}, {true, true, true}) == 1);
  CHECK(r.routed_counts() == std::vector<uint64_t>{1, 0, 0});
}

TEST_CASE("router: a prompt goes where its longest prefix was computed, unless that replica is overloaded") {
  router r{2, {.block_size = 4, .prefix_affinity = true, .affinity_slack = 100}};
  const std::vector<int32_t> shared{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> a = shared;
  a.insert(a.end(), {9, 10, 11});
  std::vector<int32_t> b = shared;
  b.insert(b.end(), {12, 13, 14});
  CHECK(r.block_hashes(a).size() == 2);  // the last token never counts: (11 - 1) / 4 full blocks
  r.routed(a, 1);
  CHECK(r.pick(b, std::vector<int64_t>{0, 50}, {true, true}) == 1);   // shares 2 blocks with replica 1
  CHECK(r.pick(b, std::vector<int64_t>{0, 101}, {true, true}) == 0);  // over the slack: least loaded
  CHECK(r.pick(b, std::vector<int64_t>{0, 50}, {true, false}) == 0);  // replica 1 does not serve
  const std::vector<int32_t> other{7, 7, 7, 7, 7, 7, 7, 7, 7};
  CHECK(r.pick(other, std::vector<int64_t>{10, 0}, {true, true}) == 1);  // no prefix anywhere: least loaded
  CHECK(r.pick(other, std::vector<int64_t>{0, 10}, {true, true}) == 0);
  // A salted prompt shares no cached block with an unsalted one (the engines' cache keys include the salt).
  CHECK(r.pick(b, std::vector<int64_t>{0, 50}, {true, true}, std::string{"tenant-a"}) == 0);
  r.forget(1);  // restarted with an empty cache
  CHECK(r.pick(b, std::vector<int64_t>{0, 50}, {true, true}) == 0);
}

TEST_CASE("router: remembered prefixes are bounded, least recently used forgotten first") {
  router r{2, {.block_size = 1, .prefix_affinity = true, .remembered_blocks = 4}};
  const std::vector<int32_t> first{1, 2, 3, 0};  // 3 blocks
  const std::vector<int32_t> second{9, 8, 0};    // 2 more: the oldest block of `first` goes
  r.routed(first, 1);
  CHECK(r.pick(first, std::vector<int64_t>{0, 10}, {true, true}) == 1);
  r.routed(second, 1);
  CHECK(r.pick(second, std::vector<int64_t>{0, 10}, {true, true}) == 1);
  CHECK(r.pick(first, std::vector<int64_t>{0, 10}, {true, true}) == 0);  // its leading block was forgotten
}

TEST_CASE("replica supervisor: restarts at once, backs off 1, 2, 4, 8 s after failed tries, gives up per replica") {
  replica_supervisor s{2, {.restart = true, .max_restarts = 3}};
  CHECK(s.any_serving());
  auto d = s.on_failure(1, "worker 0 is gone");
  REQUIRE(d);
  CHECK(d->restart);
  CHECK(d->wait.count() == 0);
  CHECK(!s.serving(1));
  CHECK(s.serving(0));
  CHECK(s.failure(1) == "worker 0 is gone");
  CHECK(!s.on_failure(1, "the same failure, reported again"));  // one failure, one restart
  auto again = s.on_restart_failed(1, "node b is gone");
  CHECK(again.restart);
  CHECK(again.wait == std::chrono::milliseconds{1000});
  auto third = s.on_restart_failed(1, "node b is gone");
  CHECK(third.wait == std::chrono::milliseconds{2000});
  auto last = s.on_restart_failed(1, "node b is gone");
  CHECK(!last.restart);
  CHECK(last.why.find("gave up after 3 restart(s)") != std::string::npos);
  CHECK(s.state_of(1) == replica_supervisor::state::given_up);
  CHECK(s.any_serving());
  CHECK(!s.all_given_up());

  auto d0 = s.on_failure(0, "step timeout");
  REQUIRE(d0);
  s.on_restarted(0);
  CHECK(s.serving(0));
  CHECK(s.failure(0).empty());
  CHECK(s.restarts(0) == 1);
}

TEST_CASE("replica supervisor: with restarts off a failed replica is given up at once") {
  replica_supervisor s{1, {.restart = false, .max_restarts = 3}};
  auto d = s.on_failure(0, "worker 0 is gone");
  REQUIRE(d);
  CHECK(!d->restart);
  CHECK(d->why.find("restart_workers = false") != std::string::npos);
  CHECK(s.all_given_up());
  CHECK(!s.any_serving());
}

TEST_CASE("replica supervisor: its messages name a replica by its data-parallel rank, not its index") {
  // An engine that serves only rank 3 of 4 (--data-parallel-rank 3) holds one replica, at index 0.
  replica_supervisor s{1, {.restart = true, .max_restarts = 1}, {3}};
  auto d = s.on_failure(0, "worker 0 is gone");
  REQUIRE(d);
  CHECK(d->why.rfind("replica 3: restart 1 of at most 1", 0) == 0);
  const auto given_up = s.on_restart_failed(0, "no device");
  CHECK(given_up.why.rfind("replica 3: gave up after 1 restart(s)", 0) == 0);
}
