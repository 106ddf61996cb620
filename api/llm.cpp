// actorllm::LLM: the embedding API over a `uni` replica. Requests go to the engine actor as submit_request
// messages; their news comes back to one detached client actor per LLM (the delivery thread), which hands it to
// the request's channel: a stream, a set of callbacks, or a generate() batch.
#include "actorllm/llm.hpp"

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster_executor.hpp"
#include "actors/control_network.hpp"
#include "actors/executor.hpp"
#include "actors/replica_watch.hpp"
#include "actors/uni_executor.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace actorllm {

namespace detail {

/// Where one request's news goes. Called on the delivery thread only.
struct channel {
  virtual ~channel() = default;
  virtual void on_delta(stream_delta&& delta) = 0;
  virtual void on_output(request_output&& output) = 0;
  virtual void on_error(error&& err) = 0;
};

/// The live requests' channels, shared by the API threads (which add) and the delivery thread (which takes).
class channel_registry {
 public:
  void add(uint64_t id, std::shared_ptr<channel> ch) {
    std::lock_guard lock{mutex_};
    channels_[id] = std::move(ch);
  }
  std::shared_ptr<channel> find(uint64_t id) {
    std::lock_guard lock{mutex_};
    auto it = channels_.find(id);
    return it == channels_.end() ? nullptr : it->second;
  }
  std::shared_ptr<channel> take(uint64_t id) {
    std::lock_guard lock{mutex_};
    auto it = channels_.find(id);
    if (it == channels_.end())
      return nullptr;
    auto ch = std::move(it->second);
    channels_.erase(it);
    return ch;
  }
  std::vector<uint64_t> ids() {
    std::lock_guard lock{mutex_};
    std::vector<uint64_t> out;
    for (const auto& [id, ch] : channels_)
      out.push_back(id);
    return out;
  }
  std::vector<std::shared_ptr<channel>> take_all() {
    std::lock_guard lock{mutex_};
    std::vector<std::shared_ptr<channel>> all;
    for (auto& [id, ch] : channels_)
      all.push_back(std::move(ch));
    channels_.clear();
    return all;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<channel>> channels_;
};

struct llm_impl {
  engine_config config;
  caf::actor_system_config caf_config;
  std::unique_ptr<caf::actor_system> sys;
  actors::replica replica;  // guarded by replica_mutex once the supervisor runs
  proto::output_sink client;
  std::shared_ptr<channel_registry> registry = std::make_shared<channel_registry>();
  std::atomic<uint64_t> next_id{1};
  model_info info;

  // Supervision of worker processes (executors mp and cluster): a watch reports the first failure, the supervisor
  // thread stops the failed replica and builds a new one while requests are refused with the reason.
  mutable std::mutex replica_mutex;
  std::condition_variable supervisor_cv;
  std::thread supervisor;
  caf::actor watch;
  bool failure_pending = false;
  bool restarting = false;
  bool stopping = false;
  std::string failure_reason;
  int32_t restarts = 0;
  std::function<void(const std::string&)> fatal_handler;  // set before any failure can happen (see LLM)
  std::optional<text::tokenizer> tokenizer;               // kept across restarts

  ~llm_impl() {
    if (!sys)
      return;
    {
      std::lock_guard lock{replica_mutex};
      stopping = true;
    }
    supervisor_cv.notify_all();
    if (supervisor.joinable())
      supervisor.join();
    if (watch)
      caf::anon_send_exit(watch, caf::exit_reason::user_shutdown);
    actors::stop_replica(*sys, replica);
    if (client)
      caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    // Drop our handles before the system goes: it joins every actor's thread on destruction.
    replica = actors::replica{};
    client = nullptr;
    watch = nullptr;
    sys.reset();
    // Whatever did not get its output (there should be nothing after the drain) learns why.
    for (auto& ch : registry->take_all())
      ch->on_error(error{errc::shut_down, "the engine shut down before the request finished"});
  }

  /// The engine to send to, or null (with the reason) while the replica restarts.
  proto::engine_actor engine(std::string* reason = nullptr) const {
    std::lock_guard lock{replica_mutex};
    if (restarting) {
      if (reason != nullptr)
        *reason = failure_reason;
      return {};
    }
    return replica.engine;
  }

  uint64_t submit(const prompt& p, const sampling_params& params, int32_t priority, bool stream,
                  std::shared_ptr<channel> ch) {
    const uint64_t id = next_id.fetch_add(1);
    proto::submit_request req;
    req.request_id = id;
    req.prompt_is_tokens = p.is_tokens();
    req.prompt_text = p.text();
    req.prompt_ids = p.token_ids();
    req.params = params;
    req.priority = priority;
    req.cache_salt = p.cache_salt();
    req.stream = stream;
    req.sink = client;
    registry->add(id, std::move(ch));
    std::string reason;
    if (auto e = engine(&reason)) {
      caf::anon_send(e, std::move(req));
    } else {
      // Answered on the delivery thread like every other outcome.
      proto::output_batch batch;
      batch.failures.push_back(
          {id, errc::engine_failure, "the engine is restarting its workers after a failure: " + reason});
      caf::anon_send(client, std::move(batch));
    }
    return id;
  }

  void abort_async(uint64_t id) const {
    if (auto e = engine())
      caf::anon_send(e, proto::abort_atom::value, id);
  }

  /// Starts watching the replica's worker processes, when it has any.
  void watch_replica() {
    if (replica.workers.empty())
      return;
    watch = actors::spawn_replica_watch(
        *sys, actors::watch_args_for(replica, config.tensor_parallel_size, [this](std::string reason) {
          {
            std::lock_guard lock{replica_mutex};
            failure_pending = true;
            failure_reason = std::move(reason);
          }
          supervisor_cv.notify_all();
        }));
    if (!supervisor.joinable())
      supervisor = std::thread{[this] { supervise(); }};
  }

  /// The supervisor thread: on each reported failure, replace the replica (or give up after max_worker_restarts).
  void supervise() {
    for (;;) {
      std::string reason;
      {
        std::unique_lock lock{replica_mutex};
        supervisor_cv.wait(lock, [this] { return failure_pending || stopping; });
        if (stopping)
          return;
        failure_pending = false;
        restarting = true;
        reason = failure_reason;
      }
      // In-flight requests already ended with the failure (the watch failed the scheduler). Stop what is left.
      actors::replica old;
      {
        std::lock_guard lock{replica_mutex};
        old = std::move(replica);
        replica = actors::replica{};
      }
      watch = nullptr;
      actors::stop_replica(*sys, old);
      old = actors::replica{};
      // Anything still registered was sent to the old replica and will never hear from it.
      proto::output_batch orphans;
      for (uint64_t id : registry->ids())
        orphans.failures.push_back({id, errc::engine_failure, "the engine's workers failed: " + reason});
      if (!orphans.empty())
        caf::anon_send(client, std::move(orphans));
      if (!config.restart_workers || restarts >= config.max_worker_restarts) {
        const std::string why = config.restart_workers
                                    ? fmt::format("gave up after {} worker restart(s): {}", restarts, reason)
                                    : "worker restarts are off (restart_workers = false): " + reason;
        log::error("supervisor", "{}", why);
        if (fatal_handler)
          fatal_handler(why);
        return;
      }
      ++restarts;
      log::warning("supervisor", "restarting the replica's workers (restart {} of at most {})", restarts,
                   config.max_worker_restarts);
      const auto t0 = std::chrono::steady_clock::now();
      actors::replica fresh;
      try {
        fresh = actors::build_replica(*sys, config);
      } catch (const std::exception& e) {
        // Trying again at once would meet the same cluster: wait 1, 2, 4, 8 s between tries, so a node agent that
        // comes back (restarted by its service manager, say) can still be placed before the restarts run out.
        const auto backoff = std::chrono::seconds{int64_t{1} << std::min(restarts - 1, 3)};
        const bool last = restarts >= config.max_worker_restarts;
        log::error("supervisor", "the restart failed: {}{}", e.what(),
                   last ? "" : fmt::format("; next try in {} s", backoff.count()));
        std::unique_lock lock{replica_mutex};
        failure_reason = std::string{"restart failed: "} + e.what();  // what stats() and refusals say meanwhile
        if (!last)
          supervisor_cv.wait_for(lock, backoff, [this] { return stopping; });
        failure_pending = true;  // try again (counts against max_worker_restarts)
        continue;
      }
      {
        std::lock_guard lock{replica_mutex};
        if (stopping) {
          old = std::move(fresh);
        } else {
          replica = std::move(fresh);
          restarting = false;
        }
      }
      if (old.engine) {  // built while the LLM was being destroyed
        actors::stop_replica(*sys, old);
        return;
      }
      log::info("supervisor", "serving again, {:.2f} s after the restart began",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      watch_replica();
    }
  }
};

/// A stream's shared state: a queue of deltas, the final output, and the coroutine waiting for them.
struct stream_state final : channel {
  uint64_t request_id = 0;
  std::weak_ptr<llm_impl> llm;
  mutable std::mutex mutex;
  std::condition_variable cv;
  std::deque<stream_delta> deltas;
  std::optional<request_output> output;
  std::optional<error> failure;
  bool done = false;
  std::coroutine_handle<> waiter;
  run_loop* waiter_loop = nullptr;

  void wake(std::unique_lock<std::mutex>& lock) {
    auto h = std::exchange(waiter, {});
    auto* loop = std::exchange(waiter_loop, nullptr);
    lock.unlock();
    cv.notify_all();
    if (h)
      resume_on(h, loop);
  }
  void on_delta(stream_delta&& delta) override {
    std::unique_lock lock{mutex};
    deltas.push_back(std::move(delta));
    wake(lock);
  }
  void on_output(request_output&& out) override {
    std::unique_lock lock{mutex};
    output = std::move(out);
    done = true;
    wake(lock);
  }
  void on_error(error&& err) override {
    std::unique_lock lock{mutex};
    failure = std::move(err);
    done = true;
    wake(lock);
  }
  bool ready() const { return !deltas.empty() || done; }
  std::optional<stream_delta> pop() {
    if (!deltas.empty()) {
      stream_delta d = std::move(deltas.front());
      deltas.pop_front();
      return d;
    }
    if (failure)
      throw *failure;
    return std::nullopt;
  }
};

namespace {

struct callback_channel final : channel {
  stream_callbacks callbacks;
  void on_delta(stream_delta&& delta) override {
    if (callbacks.on_delta)
      callbacks.on_delta(delta);
  }
  void on_output(request_output&& out) override {
    if (callbacks.on_output)
      callbacks.on_output(std::move(out));
  }
  void on_error(error&& err) override {
    if (callbacks.on_error)
      callbacks.on_error(err);
  }
};

/// generate()'s fan-in: one slot per prompt.
struct batch_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::optional<request_output>> outputs;
  std::optional<error> failure;
  size_t remaining = 0;
};

struct batch_channel final : channel {
  std::shared_ptr<batch_state> batch;
  size_t slot = 0;
  void on_delta(stream_delta&&) override {}
  void on_output(request_output&& out) override {
    std::lock_guard lock{batch->mutex};
    batch->outputs[slot] = std::move(out);
    --batch->remaining;
    batch->cv.notify_all();
  }
  void on_error(error&& err) override {
    std::lock_guard lock{batch->mutex};
    if (!batch->failure)
      batch->failure = std::move(err);
    --batch->remaining;
    batch->cv.notify_all();
  }
};

proto::output_sink::behavior_type client_behavior(proto::output_sink::pointer,
                                                  std::shared_ptr<channel_registry> registry) {
  return {
      [registry](proto::output_batch& batch) {
        for (auto& d : batch.deltas)
          if (auto ch = registry->find(d.request_id))
            ch->on_delta(std::move(d));
        for (auto& o : batch.outputs)
          if (auto ch = registry->take(o.request_id))
            ch->on_output(std::move(o));
        for (auto& f : batch.failures)
          if (auto ch = registry->take(f.request_id))
            ch->on_error(error{f.code, f.message});
      },
  };
}

// The registry goes in as an argument, not a capture: CAF 0.17 dereferences a null argument tuple for a function
// that takes none (harmless in practice, but undefined behaviour).
proto::output_sink spawn_client(caf::actor_system& sys, std::shared_ptr<channel_registry> registry) {
  return sys.spawn<caf::detached>(client_behavior, std::move(registry));
}

}  // namespace

}  // namespace detail

// -- generation_stream ------------------------------------------------------------------------------------------

bool generation_stream::next_awaiter::await_ready() const {
  std::lock_guard lock{state_->mutex};
  return state_->ready();
}

bool generation_stream::next_awaiter::await_suspend(std::coroutine_handle<> awaiting) {
  std::lock_guard lock{state_->mutex};
  if (state_->ready())
    return false;
  state_->waiter = awaiting;
  state_->waiter_loop = detail::run_loop::current();
  return true;
}

std::optional<stream_delta> generation_stream::next_awaiter::await_resume() {
  std::lock_guard lock{state_->mutex};
  return state_->pop();
}

generation_stream::generation_stream(std::shared_ptr<detail::stream_state> state) : state_(std::move(state)) {}
generation_stream::generation_stream(generation_stream&&) noexcept = default;
generation_stream& generation_stream::operator=(generation_stream&& other) noexcept {
  if (this != &other) {
    abort();
    state_ = std::move(other.state_);
  }
  return *this;
}

generation_stream::~generation_stream() { abort(); }

uint64_t generation_stream::request_id() const { return state_ ? state_->request_id : 0; }

std::optional<stream_delta> generation_stream::wait_next() {
  std::unique_lock lock{state_->mutex};
  state_->cv.wait(lock, [this] { return state_->ready(); });
  return state_->pop();
}

bool generation_stream::finished() const {
  std::lock_guard lock{state_->mutex};
  return state_->done;
}

const request_output& generation_stream::output() const {
  std::lock_guard lock{state_->mutex};
  if (state_->failure)
    throw *state_->failure;
  if (!state_->output)
    throw error{errc::invalid_argument, "the stream's request has not finished yet"};
  return *state_->output;
}

void generation_stream::abort() {
  if (!state_)
    return;
  {
    std::lock_guard lock{state_->mutex};
    if (state_->done)
      return;
  }
  if (auto llm = state_->llm.lock())
    llm->abort_async(state_->request_id);
}

// -- LLM ----------------------------------------------------------------------------------------------------------

LLM::LLM(engine_config config) : impl_(std::make_shared<detail::llm_impl>()) {
  auto& im = *impl_;
  im.config = std::move(config);
  proto::add_message_types(im.caf_config);
  // CAF's own threads only run the event-based actors (engine, scheduler, block manager); shards have their own.
  im.caf_config.set("scheduler.max-threads", 2);
  if (im.config.cluster_address.empty())
    if (const char* env = std::getenv("ACTORLLM_CLUSTER_ADDRESS"))
      im.config.cluster_address = env;
  im.config.distributed_executor_backend = actors::resolve_executor(im.config);
  if (im.config.distributed_executor_backend == "uni" &&
      !(im.config.cluster_tls_certificate.empty() && im.config.cluster_tls_key.empty() &&
        im.config.cluster_tls_ca_file.empty()))
    log::warning("executor",
                 "the control-plane TLS settings are not used: executor uni runs every shard in this "
                 "process, with no connection to secure");
  if (im.config.distributed_executor_backend != "uni") {
    const auto tls = actors::control_tls::from_environment(
        {im.config.cluster_tls_certificate, im.config.cluster_tls_key, im.config.cluster_tls_ca_file});
    tls.check();
    if (tls.enabled())
      log::info("executor",
                "control plane over TLS (certificate {}, CA {}); tensors between workers travel over "
                "Gloo's TCP transport, unencrypted",
                tls.certificate, tls.ca_file);
    // The cluster's workers and head know the cluster token; an mp engine's workers are its children and get a
    // key of their own through their environment.
    const std::string control_key = im.config.distributed_executor_backend == "cluster"
                                        ? actors::cluster_token(im.config)
                                        : actors::new_control_key();
    actors::enable_network(im.caf_config, tls, control_key);
  }
  im.sys = std::make_unique<caf::actor_system>(im.caf_config);
  try {
    im.replica = actors::build_replica(*im.sys, im.config);
  } catch (...) {
    im.sys.reset();
    throw;
  }
  im.client = detail::spawn_client(*im.sys, im.registry);
  im.tokenizer = im.replica.tokenizer;
  im.watch_replica();
  auto& info = im.info;
  info.n_vocab = im.replica.model.n_vocab;
  info.max_model_len = im.replica.max_model_len;
  info.eos_token_ids = im.replica.model.eos_token_ids;
  if (info.eos_token_ids.empty() && im.replica.tokenizer && im.replica.tokenizer->eos_id())
    info.eos_token_ids.push_back(*im.replica.tokenizer->eos_id());
  info.has_tokenizer = im.replica.tokenizer.has_value();
  info.executor = im.config.distributed_executor_backend;
  info.n_blocks = im.replica.cache.n_blocks;
  info.block_size = im.replica.cache.block_size;
  info.max_num_seqs = im.config.max_num_seqs;
  for (const auto& s : im.replica.stages)
    info.stage_layers.push_back(s.n_layers());
}

LLM::~LLM() = default;

std::vector<request_output> LLM::generate(const std::vector<prompt>& prompts, const sampling_params& params,
                                          const std::vector<int32_t>& priorities) {
  if (!priorities.empty() && priorities.size() != prompts.size())
    throw error{errc::invalid_argument, "generate: " + std::to_string(priorities.size()) + " priorities for " +
                                            std::to_string(prompts.size()) + " prompts"};
  auto batch = std::make_shared<detail::batch_state>();
  batch->outputs.resize(prompts.size());
  batch->remaining = prompts.size();
  std::vector<uint64_t> ids;
  ids.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto ch = std::make_shared<detail::batch_channel>();
    ch->batch = batch;
    ch->slot = i;
    const int32_t priority = priorities.empty() ? 0 : priorities[i];
    ids.push_back(impl_->submit(prompts[i], params, priority, /*stream=*/false, std::move(ch)));
  }
  std::unique_lock lock{batch->mutex};
  batch->cv.wait(lock, [&] { return batch->remaining == 0 || batch->failure; });
  if (batch->failure) {
    error failure = *batch->failure;
    lock.unlock();
    for (size_t i = 0; i < ids.size(); ++i)
      abort(ids[i]);
    throw failure;
  }
  std::vector<request_output> out;
  out.reserve(prompts.size());
  for (auto& o : batch->outputs)
    out.push_back(std::move(*o));
  return out;
}

request_output LLM::generate(const prompt& p, const sampling_params& params, int32_t priority) {
  return std::move(generate(std::vector<prompt>{p}, params, {priority}).front());
}

generation_stream LLM::stream(const prompt& p, const sampling_params& params, int32_t priority) {
  auto state = std::make_shared<detail::stream_state>();
  state->llm = impl_;
  state->request_id = impl_->submit(p, params, priority, /*stream=*/true, state);
  return generation_stream{std::move(state)};
}

uint64_t LLM::submit(const prompt& p, const sampling_params& params, stream_callbacks callbacks, int32_t priority) {
  auto ch = std::make_shared<detail::callback_channel>();
  ch->callbacks = std::move(callbacks);
  return impl_->submit(p, params, priority, /*stream=*/true, std::move(ch));
}

bool LLM::abort(uint64_t request_id) {
  caf::scoped_actor self{*impl_->sys};
  bool live = false;
  auto engine = impl_->engine();
  if (!engine)
    return false;  // restarting: the request ended with the failure already
  self->request(engine, caf::infinite, proto::abort_atom::value, request_id)
      .receive([&](bool b) { live = b; }, [&](caf::error& err) { throw proto::to_exception(err); });
  return live;
}

engine_stats LLM::stats() const {
  caf::scoped_actor self{*impl_->sys};
  engine_stats out;
  std::string reason;
  auto engine = impl_->engine(&reason);
  if (!engine) {
    out.healthy = false;
    out.failure = "restarting the workers after a failure: " + reason;
    return out;
  }
  self->request(engine, std::chrono::seconds{10}, caf::get_atom::value, proto::stats_atom::value)
      .receive([&](engine_stats& s) { out = std::move(s); },
               [&](caf::error& err) {
                 // The engine went away (a replica being replaced) or did not answer: report, don't throw.
                 out.healthy = false;
                 out.failure = "the engine did not answer: " + impl_->sys->render(err);
               });
  return out;
}

int32_t LLM::reset_prefix_cache() {
  caf::scoped_actor self{*impl_->sys};
  auto engine = impl_->engine();
  if (!engine)
    return 0;  // restarting: the new replica starts with an empty cache
  int32_t n = 0;
  self->request(engine, std::chrono::seconds{10}, proto::reset_prefix_cache_atom::value)
      .receive([&](int32_t forgotten) { n = forgotten; }, [&](caf::error& err) { throw proto::to_exception(err); });
  return n;
}

const model_info& LLM::info() const { return impl_->info; }

void LLM::on_unrecoverable_failure(std::function<void(const std::string&)> handler) {
  std::lock_guard lock{impl_->replica_mutex};
  impl_->fatal_handler = std::move(handler);
}

std::vector<int32_t> LLM::tokenize(const std::string& text) const {
  if (!impl_->tokenizer)
    throw error{errc::invalid_argument, "this model has no tokenizer"};
  return impl_->tokenizer->encode(text, /*add_special_tokens=*/true);
}

}  // namespace actorllm
