// The embedding API: an engine in the host program's process, driven like vLLM's `LLM` class, with blocking batch
// generation, token streams that C++20 coroutines co_await, plain callbacks, and abort. No CAF in sight: the actor
// graph lives behind a pimpl.
#pragma once

#include "actorllm/engine_config.hpp"
#include "actorllm/engine_stats.hpp"
#include "actorllm/error.hpp"
#include "actorllm/lora_request.hpp"
#include "actorllm/request_output.hpp"
#include "actorllm/sampling_params.hpp"
#include "actorllm/task.hpp"

#include <coroutine>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace actorllm {

namespace detail {
struct llm_impl;
struct stream_state;
}  // namespace detail

/// A prompt: text (tokenized with the model's tokenizer, BOS added as its config says) or token ids as given.
class prompt {
 public:
  /// A text prompt.
  prompt(std::string text) : text_(std::move(text)) {}
  /// A text prompt.
  prompt(const char* text) : text_(text) {}
  /// A prompt of token ids.
  prompt(std::vector<int32_t> token_ids) : token_ids_(std::move(token_ids)), is_tokens_(true) {}
  /// A text prompt the caller tokenized already: the model sees `token_ids`; the text is what outputs report.
  static prompt tokenized(std::string text, std::vector<int32_t> token_ids) {
    prompt p{std::move(token_ids)};
    p.text_ = std::move(text);
    return p;
  }

  /// Whether this prompt is token ids.
  bool is_tokens() const { return is_tokens_; }
  /// The text (empty for a token prompt, unless made by tokenized()).
  const std::string& text() const { return text_; }
  /// The token ids (empty for a text prompt).
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  /// This prompt with a cache salt (vLLM's `cache_salt`): its KV blocks are reused only by prompts with the same
  /// salt, so tenants that do not share a salt cannot time each other's prompts through the prefix cache. An empty
  /// salt is refused when the request is submitted.
  prompt& with_cache_salt(std::string salt) & {
    cache_salt_ = std::move(salt);
    return *this;
  }
  /// See with_cache_salt.
  prompt&& with_cache_salt(std::string salt) && {
    cache_salt_ = std::move(salt);
    return std::move(*this);
  }
  /// The cache salt; unset: none.
  const std::optional<std::string>& cache_salt() const { return cache_salt_; }
  /// This prompt run with a LoRA adapter (vLLM's lora_request; the engine needs enable_lora). The adapter is checked
  /// against the model when the request is submitted, and a bad one refused with the reason.
  prompt& with_lora(lora_request lora) & {
    lora_ = std::move(lora);
    return *this;
  }
  /// See with_lora.
  prompt&& with_lora(lora_request lora) && {
    lora_ = std::move(lora);
    return std::move(*this);
  }
  /// The LoRA adapter; unset: the base model.
  const std::optional<lora_request>& lora() const { return lora_; }

  /// Same text or ids, the same salt and adapter.
  friend bool operator==(const prompt&, const prompt&) = default;

 private:
  std::string text_;
  std::vector<int32_t> token_ids_;
  bool is_tokens_ = false;
  std::optional<std::string> cache_salt_;
  std::optional<lora_request> lora_;
};

/// What the engine knows about its model and cache, fixed once it is built.
struct model_info {
  int64_t n_vocab = 0;
  int32_t max_model_len = 0;           ///< the context limit the engine enforces
  std::vector<int32_t> eos_token_ids;  ///< end-of-sequence ids (generation_config.json, else config.json)
  /// Where the shards run: uni, mp or cluster; "uni + cluster" or "mp + cluster" when the replicas beyond
  /// data_parallel_size_local run on the cluster's nodes.
  std::string executor;
  bool has_tokenizer = false;  ///< text prompts work (else token ids only)
  int32_t n_blocks = 0;        ///< KV-cache blocks (the minimum over the shards)
  int32_t block_size = 0;
  int32_t max_num_seqs = 0;           ///< most sequences running at once (engine_config::max_num_seqs)
  int32_t data_parallel_size = 1;     ///< replicas behind this LLM (each with max_num_seqs and its own KV cache)
  std::vector<int64_t> stage_layers;  ///< layers per pipeline stage
};

/// Receives a request's progress on actorllm's delivery thread; callbacks must not block (a blocking callback
/// stalls every request's delivery).
struct stream_callbacks {
  std::function<void(const stream_delta&)> on_delta;  ///< each step's new tokens and text, per sequence
  std::function<void(request_output)> on_output;      ///< the final output (also after an abort)
  std::function<void(const error&)> on_error;         ///< the request was rejected or the engine failed
};

/// The token stream of one request. Move-only; destroying it before the request finished aborts the request.
///
///     actorllm::task<std::string> story(actorllm::LLM& llm) {
///       auto stream = llm.stream("Once upon a time", params);
///       std::string text;
///       while (auto delta = co_await stream.next())
///         text += delta->text;
///       co_return text;   // stream.output() holds the final request_output
///     }
class generation_stream {
 public:
  /// What `co_await stream.next()` does: yields the next delta, or nullopt once the request has finished (then
  /// output() is ready). Throws actorllm::error when the request was rejected or the engine failed. Inside
  /// sync_wait the coroutine resumes on sync_wait's thread; elsewhere on actorllm's delivery thread.
  class next_awaiter {
   public:
    bool await_ready() const;
    bool await_suspend(std::coroutine_handle<> awaiting);
    std::optional<stream_delta> await_resume();

   private:
    friend class generation_stream;
    explicit next_awaiter(std::shared_ptr<detail::stream_state> state) : state_(std::move(state)) {}
    std::shared_ptr<detail::stream_state> state_;
  };

  generation_stream(generation_stream&&) noexcept;
  generation_stream& operator=(generation_stream&&) noexcept;
  generation_stream(const generation_stream&) = delete;
  generation_stream& operator=(const generation_stream&) = delete;
  ~generation_stream();

  /// The request's id (for LLM::abort).
  uint64_t request_id() const;
  /// Awaits the next delta; see next_awaiter.
  next_awaiter next() { return next_awaiter{state_}; }
  /// Blocks the calling thread for the next delta; nullopt once finished. Throws like next().
  std::optional<stream_delta> wait_next();
  /// Whether the final output has arrived (all deltas may not have been taken yet).
  bool finished() const;
  /// The final output; throws actorllm::error when the request failed, or when it has not finished yet.
  const request_output& output() const;
  /// Aborts the request; the stream then ends with finish_reason abort.
  void abort();

 private:
  friend class LLM;
  explicit generation_stream(std::shared_ptr<detail::stream_state> state);
  std::shared_ptr<detail::stream_state> state_;
};

/// An engine replica: every pipeline stage and TP shard runs on its own threads in this process (executor `uni`), or
/// in worker processes it starts and watches (executor `mp`), restarting them when one dies.
/// Its methods may be called from any thread. Destroy it before main() returns (not as a static): its actor system
/// cannot be torn down during static destruction. Never destroy it from one of its own callbacks.
///
///     actorllm::LLM llm{{.model = "models/stories260K", .tensor_parallel_size = 2}};
///     auto outputs = llm.generate({"Once upon a time", "The cat"}, {.temperature = 0, .max_tokens = 32});
class LLM {
 public:
  /// Validates `config`, loads the model (each shard its slice, in parallel), sizes the KV cache and starts the
  /// engine. Throws actorllm::error naming the problem: invalid_config (heads not divisible by the TP size, more
  /// stages than layers, a bad partition, a cache too small for max_model_len) before any weight is loaded, and
  /// load_failed for unreadable or inconsistent model files.
  explicit LLM(engine_config config);
  /// Aborts what still runs, waits for the pipeline to drain and stops every actor.
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  /// Runs every prompt to completion, batched together, and returns their outputs in prompt order. `priorities`
  /// (one per prompt, or empty for all 0) order admission under scheduling_policy "priority", lower first. Throws
  /// actorllm::error for a rejected request (the others are aborted) or an engine failure.
  std::vector<request_output> generate(const std::vector<prompt>& prompts, const sampling_params& params = {},
                                       const std::vector<int32_t>& priorities = {});
  /// generate() for one prompt.
  request_output generate(const prompt& p, const sampling_params& params = {}, int32_t priority = 0);

  /// Starts a request and returns its token stream (co_await stream.next(), or stream.wait_next()).
  generation_stream stream(const prompt& p, const sampling_params& params = {}, int32_t priority = 0);

  /// Starts a request whose progress goes to `callbacks`; returns its id.
  uint64_t submit(const prompt& p, const sampling_params& params, stream_callbacks callbacks, int32_t priority = 0);

  /// Aborts a request: its sequences finish with `abort` and its KV blocks are free when this returns. False when
  /// the request is not live (finished, aborted already, or unknown).
  bool abort(uint64_t request_id);
  /// Asks for a request's abort and returns at once: its end reaches its callbacks (finish_reason abort) or its
  /// stream. For callers that must not wait on the engine (a server aborting the thousands of requests of a client
  /// that hung up); unknown or finished ids are ignored.
  void abort_async(uint64_t request_id);

  /// A snapshot of the engine's state, consistent with every call that returned before this one. Never throws: an
  /// engine that is restarting its workers or does not answer reports healthy = false with the reason.
  engine_stats stats() const;
  /// stats() without waiting: returns at once, and `done` receives the snapshot once, on one of actorllm's threads
  /// (never the caller's), when every replica has answered or had 10 s to. For callers that must not wait on the
  /// engine (a server's /health, /metrics and stats line). `done` must not block, nor call the LLM's blocking
  /// functions: it holds up the thread it runs on. A snapshot asked for before the LLM is destroyed is delivered
  /// before the destructor returns.
  void stats_async(std::function<void(engine_stats)> done) const;
  /// Forgets every cached KV block (prefix caching): no later request reuses what was computed before. Requests
  /// running now keep their blocks. Returns how many blocks were cached. Throws actorllm::error when the engine
  /// does not answer.
  int32_t reset_prefix_cache();
  /// reset_prefix_cache() without waiting: returns at once, and `done` receives, once and on one of actorllm's
  /// threads, the blocks forgotten by the replicas that answered and, when one did not answer within 10 s, the
  /// error reset_prefix_cache() would throw. `done` must not block.
  void reset_prefix_cache_async(std::function<void(int32_t forgotten, std::optional<error> failure)> done);
  /// Checks a LoRA adapter against the model now (vLLM's add_lora) and remembers it: requests then name it with
  /// prompt::with_lora. Unset when it may run; else why not (LoRA off, a bad id, an id that names another path, or
  /// a directory that is not a usable PEFT adapter for this model, named). A request with an adapter not added here
  /// is checked the same way when it is submitted.
  /// An id keeps its path for the engine's lifetime (the prefix cache and the shards' slots know adapters by id):
  /// an adapter reloaded from another path needs a new id. The shards drop adapters no request uses as others
  /// need their slots (least recently used first).
  std::optional<error> add_lora(const lora_request& lora);

  /// With worker processes (executors mp, cluster): `handler` runs (on a supervisor thread) when the workers
  /// failed and could not be restarted (restart_workers off, or max_worker_restarts used up); the LLM then serves
  /// nothing more. `actorllm serve` ends the process with a non-zero status from it.
  void on_unrecoverable_failure(std::function<void(const std::string&)> handler);

  /// The model and cache facts the engine runs with.
  const model_info& info() const;

  /// The prompt's token ids as the engine would see them (throws when there is no tokenizer).
  std::vector<int32_t> tokenize(const std::string& text) const;

 private:
  std::shared_ptr<detail::llm_impl> impl_;
};

}  // namespace actorllm
