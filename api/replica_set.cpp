// The data-parallel replica set: see replica_set.hpp.
#include "api/replica_set.hpp"

#include "actorllm/proto/atoms.hpp"
#include "actorllm/proto/error.hpp"
#include "actors/executors/executor.hpp"
#include "actors/executors/lockstep_replicas.hpp"
#include "actors/executors/replica_watch.hpp"
#include "api/engine_calls.hpp"
#include "text/tokenizer_error.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <utility>

namespace actorllm::detail {

namespace {

std::vector<int32_t> replica_ranks(const engine_config& config) {
  if (config.data_parallel_rank >= 0)
    return {config.data_parallel_rank};
  std::vector<int32_t> ranks(static_cast<size_t>(std::max(config.data_parallel_size, 1)));
  for (size_t i = 0; i < ranks.size(); ++i)
    ranks[i] = static_cast<int32_t>(i);
  return ranks;
}

router::options router_options(const engine_config& config) {
  router::options o;
  o.block_size = config.block_size * config.decode_context_parallel_size *
                 std::max(1, config.prefill_context_parallel_size);  // the scheduler's blocks
  o.prefix_affinity = config.enable_prefix_caching;
  o.affinity_slack = std::max<int64_t>(config.max_num_batched_tokens, 1);
  return o;
}

}  // namespace

replica_set::replica_set(caf::actor_system& sys, const engine_config& config)
    : sys_(sys),
      config_(config),
      dp_size_(std::max(config.data_parallel_size, 1)),
      ranks_(replica_ranks(config)),
      supervisor_(static_cast<int32_t>(ranks_.size()), {config.restart_workers, config.max_worker_restarts}, ranks_),
      router_(static_cast<int32_t>(ranks_.size()), router_options(config)) {
  if (config.data_parallel_rank >= dp_size_)
    throw error{errc::invalid_config, fmt::format("data_parallel_rank: {} is not in [0, {}) (data_parallel_size {})",
                                                  config.data_parallel_rank, dp_size_, dp_size_)};
  replicas_.resize(ranks_.size());
  watches_.resize(ranks_.size());
  watch_generations_.resize(ranks_.size(), 0);
  lockstep_ = actors::steps_in_lockstep(config_);
  try {
    if (lockstep_) {
      auto set = actors::build_lockstep_replicas(sys_, config_, dp_size_);
      replicas_ = std::move(set.replicas);
      expert_group_ = std::move(set.expert_group);
      expert_store_ = std::move(set.expert_store);
    } else {
      for (size_t i = 0; i < ranks_.size(); ++i)
        replicas_[i] = build(static_cast<int32_t>(i));
    }
  } catch (...) {
    for (auto& r : replicas_)
      if (r.engine)
        actors::stop_replica(sys_, r);
    replicas_.clear();
    throw;
  }
  // The facts only: no handles, so that no actor or process outlives its replica through this copy.
  const actors::replica& r0 = replicas_.front();
  first_.model = r0.model;
  first_.stages = r0.stages;
  first_.cache = r0.cache;
  first_.max_model_len = r0.max_model_len;
  first_.tokenizer = r0.tokenizer;
  first_.executor = r0.executor;
  lora_check_ = std::make_unique<lora_check>(config_, first_.model);
  delivery_ = spawn_delivery(sys_, [this](proto::output_batch& b) { on_batch(b); });
  if (ranks_.size() > 1)
    log::info("replicas", "{} data-parallel replicas behind one endpoint: requests go to the least loaded{}",
              ranks_.size(), config.enable_prefix_caching ? ", or where their prompt's prefix is cached" : "");
  for (size_t i = 0; i < ranks_.size(); ++i)
    watch(static_cast<int32_t>(i));
  supervisor_thread_ = std::thread{[this] { supervise(); }};
}

replica_set::~replica_set() {
  {
    std::lock_guard lock{mutex_};
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  if (supervisor_thread_.joinable())
    supervisor_thread_.join();
  actors::lockstep_set set;  // the replicas, and under lockstep what their EP group meets in
  {
    std::lock_guard lock{mutex_};
    for (auto& w : watches_)
      if (w)
        caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    watches_.clear();
    set.replicas = std::move(replicas_);
    replicas_.clear();
    set.expert_group = std::move(expert_group_);
    set.expert_store = std::move(expert_store_);
  }
  // Draining aborts what still runs: those outputs reach their callers through the delivery thread.
  if (lockstep_) {
    actors::stop_lockstep_set(sys_, set, "the engine shut down", /*failed=*/false);
  } else {
    for (auto& r : set.replicas)
      if (r.engine)
        actors::stop_replica(sys_, r);
  }
  set.replicas.clear();
  first_ = actors::replica{};
  if (delivery_) {
    // The delivery actor has handed out everything sent before its exit message (one mailbox, in order).
    caf::scoped_actor self{sys_};
    self->monitor(delivery_);
    caf::anon_send_exit(delivery_, caf::exit_reason::user_shutdown);
    self->receive([](caf::down_msg&) {}, caf::after(std::chrono::seconds{10}) >> [] {});
    delivery_ = nullptr;
  }
  std::vector<std::shared_ptr<channel>> left;
  request_book::deliveries parked;
  {
    std::lock_guard lock{mutex_};
    left = book_.take_all();
    std::swap(parked, parked_);
  }
  deliver(parked);
  for (auto& ch : left)
    if (ch)
      ch->on_error(error{errc::shut_down, "the engine shut down before the request finished"});
}

actors::replica replica_set::build(int32_t index) {
  actors::replica_slot slot;
  slot.dp_rank = ranks_.at(static_cast<size_t>(index));
  slot.dp_size = dp_size_;
  return actors::build_replica(sys_, config_, slot);
}

std::vector<bool> replica_set::serving_locked() const {
  std::vector<bool> serving(replicas_.size(), false);
  for (size_t i = 0; i < replicas_.size(); ++i)
    serving[i] = supervisor_.serving(static_cast<int32_t>(i)) && replicas_[i].engine != nullptr;
  return serving;
}

std::string replica_set::unavailable_locked() const {
  std::string reasons;
  for (int32_t i = 0; i < supervisor_.size(); ++i) {
    if (supervisor_.serving(i))
      continue;
    if (!reasons.empty())
      reasons += "; ";
    reasons += supervisor_.size() > 1
                   ? fmt::format("replica {}: {}", ranks_[static_cast<size_t>(i)], supervisor_.failure(i))
                   : supervisor_.failure(i);
  }
  return (supervisor_.all_given_up() ? "the engine cannot serve any more: "
                                     : "the engine is restarting its workers after a failure: ") +
         reasons;
}

uint64_t replica_set::submit(const prompt& p, const sampling_params& params, int32_t priority, bool stream,
                             std::shared_ptr<channel> ch) {
  const uint64_t id = next_id_.fetch_add(1);
  proto::submit_request req;
  req.request_id = id;
  req.prompt_is_tokens = p.is_tokens();
  req.prompt_text = p.text();
  req.prompt_ids = p.token_ids();
  req.params = params;
  req.priority = priority;
  req.cache_salt = p.cache_salt();
  if (const auto& lora = p.lora()) {
    if (std::string why = lora_check_->problem(*lora); !why.empty()) {
      std::lock_guard lock{mutex_};
      parked_.errors.emplace_back(std::move(ch), error{errc::invalid_argument, fmt::format("request {}: {}", id, why)});
      caf::anon_send(delivery_, proto::output_batch{});
      return id;
    }
    req.lora = proto::lora_ref{lora->id, lora->name, lora->path};
  }
  // With other replicas to move to, the deltas are the record a failover resumes from (the book passes them on only
  // if asked); with one replica there is nowhere to move, so only a caller who asked gets deltas, as before.
  req.stream = stream || ranks_.size() > 1;
  req.sink = delivery_;
  // A refusal reaches the caller on the delivery thread, like every other outcome: callers may hold their own lock
  // around submit that their callbacks take.
  auto refuse = [&](error e) {
    {
      std::lock_guard lock{mutex_};
      parked_.errors.emplace_back(std::move(ch), std::move(e));
    }
    caf::anon_send(delivery_, proto::output_batch{});  // wakes it to hand out what was parked
    return id;
  };
  if (!req.prompt_is_tokens && first_.tokenizer) {
    // Tokenized once, here: the router needs the ids, and a failover resubmits them.
    try {
      req.prompt_ids = first_.tokenizer->encode(req.prompt_text, /*add_special_tokens=*/true);
      req.prompt_is_tokens = true;
    } catch (const text::tokenizer_error& e) {
      return refuse(
          error{errc::invalid_argument, fmt::format("request {}: the prompt cannot be tokenized: {}", id, e.what())});
    }
  }
  proto::engine_actor engine;
  std::optional<error> unavailable;
  {
    std::lock_guard lock{mutex_};
    const auto serving = serving_locked();
    const auto work = book_.work(static_cast<int32_t>(replicas_.size()));
    if (auto r = router_.pick(req.prompt_ids, work, serving, req.cache_salt)) {
      engine = replicas_[static_cast<size_t>(*r)].engine;
      router_.routed(req.prompt_ids, *r, req.cache_salt);
      book_.add(id, req, ch, stream, *r);
    } else {
      unavailable.emplace(errc::engine_failure, unavailable_locked());
    }
  }
  if (unavailable)
    return refuse(std::move(*unavailable));
  caf::anon_send(engine, std::move(req));
  return id;
}

void replica_set::place_locked(uint64_t id, const std::string& reason, request_book::deliveries& out) {
  if (book_.aborting(id)) {
    if (auto done = book_.finish_aborted(id))
      out.outputs.push_back(std::move(*done));
    return;
  }
  if (set_restarting_ && !stopping_) {
    if (book_.moves(id) < max_set_resumes) {
      awaiting_set_.push_back(id);  // its set comes back: it resumes there (restart_lockstep_set)
      return;
    }
    // Its set failed again with it: it may be what fails the set, which it should not take down a third time.
    if (auto ch = book_.fail(id))
      out.errors.emplace_back(
          std::move(ch),
          error{errc::engine_failure,
                fmt::format("{} (the request had resumed after a restart of its expert-parallel set already: it may "
                            "be what fails the set)",
                            reason)});
    return;
  }
  const auto serving = serving_locked();
  const auto work = book_.work(static_cast<int32_t>(replicas_.size()));
  auto r = stopping_ ? std::nullopt : router_.pick({}, work, serving);
  if (!r || book_.moves(id) >= max_moves) {
    const std::string why = !r || stopping_ ? reason
                                            : fmt::format(
                                                  "{} (the request moved replicas {} times already: it may be "
                                                  "what fails them)",
                                                  reason, book_.moves(id));
    if (auto ch = book_.fail(id))
      out.errors.emplace_back(std::move(ch), error{stopping_ ? errc::shut_down : errc::engine_failure, why});
    return;
  }
  const uint64_t attempt = next_id_.fetch_add(1);
  auto sub = book_.resubmission(id, *r, attempt);
  if (!sub)
    return;
  sub->sink = delivery_;
  router_.routed({}, *r);
  log::info("replicas", "request {} moves to replica {} ({} token(s) so far, resumed there)", id,
            ranks_[static_cast<size_t>(*r)], sub->resume_tokens.size());
  caf::anon_send(replicas_[static_cast<size_t>(*r)].engine, std::move(*sub));
}

void replica_set::report_failure_locked(int32_t replica, const std::string& reason, std::vector<uint64_t>& lost) {
  auto d = supervisor_.on_failure(replica, reason);
  if (!d)
    return;  // already known
  if (lockstep_) {
    // The others' steps wait for this replica's experts: abort their group, and restart the set together.
    const int32_t rank = ranks_[static_cast<size_t>(replica)];
    log::error("replicas", "replica {} failed: {}; the replicas of its expert-parallel set restart together", rank,
               reason);
    if (expert_group_)
      expert_group_->abort(fmt::format("replica {} failed", rank));
    // The set's requests wait for its restart (workers: stopped at once by it, which ends any step still blocked).
    set_restarting_ = d->restart;
    for (int32_t j = 0; j < supervisor_.size(); ++j) {
      if (j != replica)
        supervisor_.on_failure(
            j, fmt::format("restarts with replica {} of its expert-parallel set, which failed: {}", rank, reason));
      auto moved = book_.lose_replica(j);
      lost.insert(lost.end(), moved.begin(), moved.end());
    }
    jobs_.push_back({replica, *d});
    jobs_cv_.notify_all();
    return;
  }
  log::error("replicas", "replica {} failed: {}{}", ranks_[static_cast<size_t>(replica)], reason,
             supervisor_.any_serving() ? "; its requests move to the replicas that serve" : "");
  auto moved = book_.lose_replica(replica);
  lost.insert(lost.end(), moved.begin(), moved.end());
  jobs_.push_back({replica, *d});
  jobs_cv_.notify_all();
}

void replica_set::on_batch(proto::output_batch& batch) {
  request_book::deliveries out;
  {
    std::lock_guard lock{mutex_};
    std::swap(out, parked_);
    book_.take(std::move(batch), out);
    for (const auto& l : out.to_fail_over) {
      std::vector<uint64_t> lost;
      if (l.replica >= 0 && !stopping_)
        report_failure_locked(l.replica, l.reason, lost);
      lost.push_back(l.id);
      for (uint64_t id : lost)
        place_locked(id, l.reason, out);
    }
  }
  deliver(out);
}

void replica_set::watch(int32_t index) {
  const actors::replica& r = replicas_[static_cast<size_t>(index)];
  if (r.workers.empty())
    return;
  const uint64_t generation = ++watch_generations_[static_cast<size_t>(index)];
  watches_[static_cast<size_t>(index)] = actors::spawn_replica_watch(
      sys_, actors::watch_args_for(r, config_.tensor_parallel_size * std::max(1, config_.prefill_context_parallel_size),
                                   [this, index, generation](std::string reason) {
                                     {
                                       std::lock_guard lock{mutex_};
                                       // A watch stopped on purpose may have reported on its way out: old news.
                                       if (stopping_ || watch_generations_[static_cast<size_t>(index)] != generation)
                                         return;
                                       std::vector<uint64_t> lost;
                                       report_failure_locked(index, reason, lost);
                                       for (uint64_t id : lost)
                                         place_locked(id, "the engine's workers failed: " + reason, parked_);
                                     }
                                     // Channels hear only from the delivery thread: an empty batch wakes it to hand out
                                     // what was parked.
                                     caf::anon_send(delivery_, proto::output_batch{});
                                   }));
}

void replica_set::supervise() {
  for (;;) {
    failure_job job;
    actors::replica old;
    caf::actor old_watch;
    {
      std::unique_lock lock{mutex_};
      jobs_cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_)
        return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    if (lockstep_) {
      if (!restart_lockstep_set(job))
        return;
      continue;
    }
    {
      std::lock_guard lock{mutex_};
      old = std::move(replicas_[static_cast<size_t>(job.replica)]);
      replicas_[static_cast<size_t>(job.replica)] = actors::replica{};
      old_watch = std::move(watches_[static_cast<size_t>(job.replica)]);
      ++watch_generations_[static_cast<size_t>(job.replica)];
      router_.forget(job.replica);
    }
    const int32_t rank = ranks_[static_cast<size_t>(job.replica)];
    if (old_watch)
      caf::anon_send_exit(old_watch, caf::exit_reason::user_shutdown);
    // Its requests moved already: what the drain aborts now reaches nobody.
    if (old.engine)
      actors::stop_replica(sys_, old);
    old = actors::replica{};
    auto decision = job.decision;
    for (;;) {
      if (!decision.restart) {
        give_up(decision);
        break;
      }
      if (decision.wait.count() > 0) {
        std::unique_lock lock{mutex_};
        if (jobs_cv_.wait_for(lock, decision.wait, [this] { return stopping_; }))
          return;
      }
      log::warning("replicas", "{}", decision.why);
      const auto t0 = std::chrono::steady_clock::now();
      actors::replica fresh;
      std::string failure;
      try {
        fresh = build(job.replica);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      std::lock_guard lock{mutex_};
      if (stopping_) {
        if (fresh.engine)
          actors::stop_replica(sys_, fresh);
        return;
      }
      if (!failure.empty()) {
        log::error("replicas", "replica {}: the restart failed: {}", rank, failure);
        decision = supervisor_.on_restart_failed(job.replica, failure);
        continue;
      }
      replicas_[static_cast<size_t>(job.replica)] = std::move(fresh);
      supervisor_.on_restarted(job.replica);
      watch(job.replica);
      log::info("replicas", "replica {} serves again, {:.2f} s after its restart began", rank,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      break;
    }
  }
}

void replica_set::give_up(const replica_supervisor::decision& decision) {
  log::error("replicas", "{}", decision.why);
  std::function<void(const std::string&)> fatal;
  std::string why;
  {
    std::lock_guard lock{mutex_};
    if (supervisor_.all_given_up()) {
      fatal = fatal_handler_;
      why = ranks_.size() > 1 ? "every replica failed: " + unavailable_locked() : decision.why;
    }
  }
  if (fatal)
    fatal(why);
}

bool replica_set::restart_lockstep_set(failure_job job) {
  actors::lockstep_set old;
  {
    std::lock_guard lock{mutex_};
    // Their watches first: stopping the workers on purpose is no news (each watch reports once, and may not have).
    for (size_t i = 0; i < watches_.size(); ++i) {
      ++watch_generations_[i];
      if (watches_[i])
        caf::anon_send_exit(std::exchange(watches_[i], caf::actor{}), caf::exit_reason::user_shutdown);
    }
    old.replicas = std::move(replicas_);
    replicas_.assign(old.replicas.size(), actors::replica{});
    old.expert_group = std::move(expert_group_);
    old.expert_store = std::move(expert_store_);
    for (int32_t i = 0; i < static_cast<int32_t>(old.replicas.size()); ++i)
      router_.forget(i);
  }
  // Their requests wait for the set (or failed) already: nothing of the old set is waited for.
  actors::stop_lockstep_set(sys_, old, "its set is being restarted", /*failed=*/true);
  auto decision = job.decision;
  for (;;) {
    if (!decision.restart) {
      {
        // No set comes back: the requests that waited for it fail now.
        std::lock_guard lock{mutex_};
        set_restarting_ = false;
        for (uint64_t id : std::exchange(awaiting_set_, {}))
          place_locked(id, "its expert-parallel set failed and is not restarted: " + decision.why, parked_);
      }
      caf::anon_send(delivery_, proto::output_batch{});
      give_up(decision);
      return true;
    }
    if (decision.wait.count() > 0) {
      std::unique_lock lock{mutex_};
      if (jobs_cv_.wait_for(lock, decision.wait, [this] { return stopping_; }))
        return false;
    }
    {
      std::lock_guard lock{mutex_};
      if (stopping_)
        return false;
    }
    log::warning("replicas", "{} (with every replica of its expert-parallel set)", decision.why);
    const auto t0 = std::chrono::steady_clock::now();
    actors::lockstep_set fresh;
    std::string failure;
    try {
      fresh = actors::build_lockstep_replicas(sys_, config_, dp_size_);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    std::unique_lock lock{mutex_};
    if (stopping_) {
      lock.unlock();  // the set has no requests: nothing its drain sends needs the lock, but nothing should wait on it
      actors::stop_lockstep_set(sys_, fresh, "the engine shut down", /*failed=*/false);
      return false;
    }
    if (!failure.empty()) {
      log::error("replicas", "the expert-parallel set's restart failed: {}", failure);
      decision = supervisor_.on_restart_failed(job.replica, failure);
      for (int32_t j = 0; j < supervisor_.size(); ++j)
        if (j != job.replica)
          supervisor_.on_restart_failed(j, failure);
      continue;
    }
    replicas_ = std::move(fresh.replicas);
    expert_group_ = std::move(fresh.expert_group);
    expert_store_ = std::move(fresh.expert_store);
    for (int32_t j = 0; j < supervisor_.size(); ++j) {
      supervisor_.on_restarted(j);
      watch(j);  // as every rebuilt replica is (a no-op for uni replicas, which have no worker processes)
    }
    set_restarting_ = false;
    const std::vector<uint64_t> waiting = std::exchange(awaiting_set_, {});
    log::info("replicas",
              "the {} replicas of the expert-parallel set serve again, {:.2f} s after their restart began{}",
              replicas_.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              waiting.empty() ? std::string{} : fmt::format("; {} request(s) resume there", waiting.size()));
    for (uint64_t id : waiting)
      place_locked(id, "its expert-parallel set failed", parked_);
    lock.unlock();
    caf::anon_send(delivery_, proto::output_batch{});  // hands out what the placing parked (errors, aborts)
    return true;
  }
}

std::pair<proto::engine_actor, uint64_t> replica_set::mark_abort(uint64_t id) {
  std::lock_guard lock{mutex_};
  auto where = book_.abort(id);
  if (!where)
    return {};
  return {replicas_[static_cast<size_t>(where->first)].engine, where->second};
}

bool replica_set::abort(uint64_t id) {
  auto [engine, attempt] = mark_abort(id);
  if (!engine)
    return false;
  caf::scoped_actor self{sys_};
  bool live = false;
  self->request(engine, caf::infinite, proto::abort_atom::value, attempt)
      .receive([&](bool b) { live = b; }, [&](caf::error& err) { throw proto::to_exception(err); });
  return live;
}

void replica_set::abort_async(uint64_t id) {
  auto [engine, attempt] = mark_abort(id);
  if (engine)
    caf::anon_send(engine, proto::abort_atom::value, attempt);
}

void replica_set::stats_async(std::function<void(engine_stats)> done) {
  std::vector<proto::engine_actor> engines;
  engine_stats base;
  {
    std::lock_guard lock{mutex_};
    const auto n = static_cast<int32_t>(replicas_.size());
    const auto work = book_.work(n);
    const auto requests = book_.requests(n);
    for (int32_t i = 0; i < n; ++i) {
      replica_stats r;
      r.rank = ranks_[static_cast<size_t>(i)];
      r.healthy = supervisor_.serving(i) && replicas_[static_cast<size_t>(i)].engine != nullptr;
      r.failure = supervisor_.failure(i);
      r.restarts = supervisor_.restarts(i);
      r.n_requests = static_cast<uint64_t>(requests[static_cast<size_t>(i)]);
      r.routed_requests = router_.routed_counts()[static_cast<size_t>(i)];
      r.outstanding_tokens = work[static_cast<size_t>(i)];
      engines.push_back(r.healthy ? replicas_[static_cast<size_t>(i)].engine : proto::engine_actor{});
      base.replicas.push_back(std::move(r));
    }
    base.n_failovers = book_.n_failovers();
    base.healthy = supervisor_.any_serving();
    if (!base.healthy)
      base.failure = unavailable_locked();
  }
  ask_stats(sys_, std::move(engines),
            [base = std::move(base), done = std::move(done)](std::vector<stats_answer> answers) mutable {
              done(merge_stats(std::move(base), answers));
            });
}

engine_stats replica_set::stats() {
  std::promise<engine_stats> answer;
  auto snapshot = answer.get_future();
  stats_async([&answer](engine_stats s) { answer.set_value(std::move(s)); });
  return snapshot.get();
}

void replica_set::reset_prefix_cache_async(std::function<void(int32_t, std::optional<error>)> done) {
  std::vector<proto::engine_actor> engines;
  {
    std::lock_guard lock{mutex_};
    const auto serving = serving_locked();
    for (size_t i = 0; i < replicas_.size(); ++i)
      if (serving[i]) {
        engines.push_back(replicas_[i].engine);
        router_.forget(static_cast<int32_t>(i));
      }
  }
  reset_prefix_caches(sys_, std::move(engines), std::move(done));
}

int32_t replica_set::reset_prefix_cache() {
  std::promise<int32_t> answer;
  auto forgotten = answer.get_future();
  reset_prefix_cache_async([&answer](int32_t n, std::optional<error> failure) {
    if (failure)
      answer.set_exception(std::make_exception_ptr(std::move(*failure)));
    else
      answer.set_value(n);
  });
  return forgotten.get();
}

void replica_set::on_unrecoverable_failure(std::function<void(const std::string&)> handler) {
  std::lock_guard lock{mutex_};
  fatal_handler_ = std::move(handler);
}

}  // namespace actorllm::detail
