// actorllm::LLM: the embedding API. A thin facade over the replica set (api/replica_set.hpp), which routes each
// request to one of the data-parallel replicas and moves it when its replica dies; the news comes back through
// the delivery thread (api/delivery.hpp) to the request's channel: a stream, a set of callbacks, or a generate()
// batch.
#include "actorllm/llm.hpp"

#include "actorllm/proto/type_ids.hpp"
#include "actors/cluster/control_network.hpp"
#include "actors/executors/cluster_executor.hpp"
#include "actors/executors/executor.hpp"
#include "actors/runtime/caf_scheduler.hpp"
#include "api/delivery.hpp"
#include "api/replica_set.hpp"
#include "util/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <cstdlib>
#include <memory>

namespace actorllm {

namespace detail {

struct llm_impl {
  engine_config config;
  caf::actor_system_config caf_config;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<replica_set> replicas;
  model_info info;

  ~llm_impl() {
    // The replicas go first (their drain reaches the callers through the delivery thread), then the system, which
    // joins every actor's thread.
    replicas.reset();
    sys.reset();
  }

  void abort_async(uint64_t id) const {
    if (replicas)
      replicas->abort_async(id);
  }
};

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
  actors::configure_caf_scheduler(im.caf_config, 2);
  if (im.config.cluster_address.empty())
    if (const char* env = std::getenv("ACTORLLM_CLUSTER_ADDRESS"))
      im.config.cluster_address = env;
  im.config.distributed_executor_backend = actors::resolve_executor(im.config);
  const bool cluster = actors::uses_cluster(im.config);
  const bool networked = im.config.distributed_executor_backend != "uni" || cluster;
  if (!networked && !(im.config.cluster_tls_certificate.empty() && im.config.cluster_tls_key.empty() &&
                      im.config.cluster_tls_ca_file.empty()))
    log::warning("executor",
                 "the control-plane TLS settings are not used: executor uni runs every shard in this "
                 "process, with no connection to secure");
  if (networked) {
    const auto tls = actors::control_tls::from_environment(
        {im.config.cluster_tls_certificate, im.config.cluster_tls_key, im.config.cluster_tls_ca_file});
    tls.check();
    if (tls.enabled())
      log::info("executor",
                "control plane over TLS (certificate {}, CA {}); tensors between workers travel over "
                "Gloo's TCP transport, unencrypted",
                tls.certificate, tls.ca_file);
    // The cluster's workers and head know the cluster token; an mp engine's workers are its children and get a
    // key of their own through their environment (the cluster token when some replicas run on a cluster).
    const std::string control_key = cluster ? actors::cluster_token(im.config) : actors::new_control_key();
    actors::enable_network(im.caf_config, tls, control_key);
  }
  im.sys = std::make_unique<caf::actor_system>(im.caf_config);
  try {
    im.replicas = std::make_unique<detail::replica_set>(*im.sys, im.config);
  } catch (...) {
    im.sys.reset();
    throw;
  }
  const actors::replica& first = im.replicas->first();
  auto& info = im.info;
  info.n_vocab = first.model.n_vocab;
  info.max_model_len = first.max_model_len;
  info.eos_token_ids = first.model.eos_token_ids;
  if (info.eos_token_ids.empty() && first.tokenizer && first.tokenizer->eos_id())
    info.eos_token_ids.push_back(*first.tokenizer->eos_id());
  info.has_tokenizer = first.tokenizer.has_value();
  info.executor = im.config.distributed_executor_backend;
  if (cluster && info.executor != "cluster")
    info.executor += " + cluster";  // --data-parallel-size-local: the other replicas run on the cluster's nodes
  info.n_blocks = first.cache.n_blocks;
  info.block_size = first.cache.block_size;
  info.max_num_seqs = im.config.max_num_seqs;
  info.data_parallel_size = im.config.data_parallel_rank >= 0 ? 1 : std::max(im.config.data_parallel_size, 1);
  for (const auto& s : first.stages)
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
    ids.push_back(impl_->replicas->submit(prompts[i], params, priority, /*stream=*/false, std::move(ch)));
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
  state->request_id = impl_->replicas->submit(p, params, priority, /*stream=*/true, state);
  return generation_stream{std::move(state)};
}

uint64_t LLM::submit(const prompt& p, const sampling_params& params, stream_callbacks callbacks, int32_t priority) {
  auto ch = std::make_shared<detail::callback_channel>();
  ch->callbacks = std::move(callbacks);
  return impl_->replicas->submit(p, params, priority, /*stream=*/true, std::move(ch));
}

bool LLM::abort(uint64_t request_id) { return impl_->replicas->abort(request_id); }

void LLM::abort_async(uint64_t request_id) { impl_->abort_async(request_id); }

engine_stats LLM::stats() const { return impl_->replicas->stats(); }

void LLM::stats_async(std::function<void(engine_stats)> done) const { impl_->replicas->stats_async(std::move(done)); }

int32_t LLM::reset_prefix_cache() { return impl_->replicas->reset_prefix_cache(); }

void LLM::reset_prefix_cache_async(std::function<void(int32_t, std::optional<error>)> done) {
  impl_->replicas->reset_prefix_cache_async(std::move(done));
}

std::optional<error> LLM::add_lora(const lora_request& lora) {
  if (std::string why = impl_->replicas->lora_checks().problem(lora); !why.empty())
    return error{errc::invalid_argument, std::move(why)};
  return std::nullopt;
}

const model_info& LLM::info() const { return impl_->info; }

void LLM::on_unrecoverable_failure(std::function<void(const std::string&)> handler) {
  impl_->replicas->on_unrecoverable_failure(std::move(handler));
}

std::vector<int32_t> LLM::tokenize(const std::string& text) const {
  const auto& tok = impl_->replicas->first().tokenizer;
  if (!tok)
    throw error{errc::invalid_argument, "this model has no tokenizer"};
  return tok->encode(text, /*add_special_tokens=*/true);
}

}  // namespace actorllm
