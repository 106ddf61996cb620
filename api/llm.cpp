// actorllm::LLM: the embedding API over a `uni` replica. Requests go to the engine actor as submit_request
// messages; their news comes back to one detached client actor per LLM (the delivery thread), which hands it to
// the request's channel: a stream, a set of callbacks, or a generate() batch.
#include "actorllm/llm.hpp"

#include "actorllm/proto/error.hpp"
#include "actorllm/proto/type_ids.hpp"
#include "actors/uni_executor.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
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
  actors::replica replica;
  proto::output_sink client;
  std::shared_ptr<channel_registry> registry = std::make_shared<channel_registry>();
  std::atomic<uint64_t> next_id{1};
  model_info info;

  ~llm_impl() {
    if (!sys)
      return;
    actors::stop_replica(*sys, replica);
    if (client)
      caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    // Drop our handles before the system goes: it joins every actor's thread on destruction.
    replica = actors::replica{};
    client = nullptr;
    sys.reset();
    // Whatever did not get its output (there should be nothing after the drain) learns why.
    for (auto& ch : registry->take_all())
      ch->on_error(error{errc::shut_down, "the engine shut down before the request finished"});
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
    req.stream = stream;
    req.sink = client;
    registry->add(id, std::move(ch));
    caf::anon_send(replica.engine, std::move(req));
    return id;
  }

  void abort_async(uint64_t id) const { caf::anon_send(replica.engine, proto::abort_atom::value, id); }
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
  im.sys = std::make_unique<caf::actor_system>(im.caf_config);
  try {
    im.replica = actors::build_uni_replica(*im.sys, im.config);
  } catch (...) {
    im.sys.reset();
    throw;
  }
  im.client = detail::spawn_client(*im.sys, im.registry);
  auto& info = im.info;
  info.n_vocab = im.replica.model.n_vocab;
  info.max_model_len = im.replica.max_model_len;
  info.eos_token_ids = im.replica.model.eos_token_ids;
  if (info.eos_token_ids.empty() && im.replica.tokenizer && im.replica.tokenizer->eos_id())
    info.eos_token_ids.push_back(*im.replica.tokenizer->eos_id());
  info.has_tokenizer = im.replica.tokenizer.has_value();
  info.n_blocks = im.replica.cache.n_blocks;
  info.block_size = im.replica.cache.block_size;
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
  self->request(impl_->replica.engine, caf::infinite, proto::abort_atom::value, request_id)
      .receive([&](bool b) { live = b; }, [&](caf::error& err) { throw proto::to_exception(err); });
  return live;
}

engine_stats LLM::stats() const {
  caf::scoped_actor self{*impl_->sys};
  engine_stats out;
  self->request(impl_->replica.engine, caf::infinite, caf::get_atom::value, proto::stats_atom::value)
      .receive([&](engine_stats& s) { out = std::move(s); }, [&](caf::error& err) { throw proto::to_exception(err); });
  return out;
}

const model_info& LLM::info() const { return impl_->info; }

std::vector<int32_t> LLM::tokenize(const std::string& text) const {
  if (!impl_->replica.tokenizer)
    throw error{errc::invalid_argument, "this model has no tokenizer"};
  return impl_->replica.tokenizer->encode(text, /*add_special_tokens=*/true);
}

}  // namespace actorllm
