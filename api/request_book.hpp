// The facade's record of every live request across the data-parallel replicas: which replica runs it under which
// engine-level id (an "attempt"), and everything it has produced so far. With it a request whose replica dies
// continues on another one: an n = 1 request resumes from its tokens so far (the new replica prefills prompt plus
// output), an n > 1 request runs again from its seed and the tokens its caller already saw are swallowed. Its
// caller sees one uninterrupted request. A plain class (no actors): the replica set feeds it the engines' news and
// acts on what it says.
#pragma once

#include "actorllm/error.hpp"
#include "actorllm/proto/output_batch.hpp"
#include "actorllm/proto/submit_request.hpp"
#include "actorllm/request_output.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace actorllm::detail {

/// Where one request's news goes. Called on the delivery thread only.
struct channel {
  virtual ~channel() = default;
  virtual void on_delta(stream_delta&& delta) = 0;
  virtual void on_output(request_output&& output) = 0;
  virtual void on_error(error&& err) = 0;
};

/// Work a request still stands for, in tokens: its prompt until the first token is out, plus the output it may
/// still produce (max_tokens, or `default_output` when unset), over all n sequences. The router balances on it.
int64_t outstanding_tokens(const proto::submit_request& sub, const std::vector<size_t>& produced,
                           int64_t default_output);

class request_book {
 public:
  /// Output tokens counted for a request without max_tokens (its length is unknown until it ends).
  static constexpr int64_t default_output_tokens = 256;

  /// Starts tracking request `id`, first sent as `sub` (its request_id is the attempt id, prompt as token ids) to
  /// `replica`. `user_stream`: whether the caller wants deltas (the engine always sends them: they are the record).
  void add(uint64_t id, proto::submit_request sub, std::shared_ptr<channel> ch, bool user_stream, int32_t replica);

  /// Stops tracking a request and returns its channel (a submission that never reached an engine).
  std::shared_ptr<channel> remove(uint64_t id);

  /// What to hand to which channel, and the requests whose replica failed them (to move elsewhere).
  struct deliveries {
    std::vector<std::pair<std::shared_ptr<channel>, stream_delta>> deltas;
    std::vector<std::pair<std::shared_ptr<channel>, request_output>> outputs;
    std::vector<std::pair<std::shared_ptr<channel>, error>> errors;
    /// Requests their replica failed (an engine failure): their attempt is retired already; resubmit them
    /// elsewhere. With the replica that failed them and its reason.
    struct lost {
      uint64_t id = 0;
      int32_t replica = -1;
      std::string reason;
    };
    std::vector<lost> to_fail_over;
  };

  /// Folds in one engine's batch. News for attempts no longer current (a replica that was given up on) is dropped;
  /// request ids are translated back to the caller's.
  void take(proto::output_batch&& batch, deliveries& out);

  /// A replica died: every request running there loses its attempt (news from it is dropped from now on). Returns
  /// their ids, to be resubmitted (resubmission) or failed (fail).
  std::vector<uint64_t> lose_replica(int32_t replica);
  /// Retires the current attempt of one request (its replica failed it); false when it is not tracked.
  bool lose_attempt(uint64_t id);

  /// The submission that continues request `id` on `replica` as engine request `attempt`: for n = 1 its tokens so
  /// far ride along to be resumed; for n > 1 it starts over and the tokens the caller saw are swallowed. nullopt
  /// when the request is no longer tracked. An aborted request is not resubmitted: see finish_aborted.
  std::optional<proto::submit_request> resubmission(uint64_t id, int32_t replica, uint64_t attempt);

  /// Ends a request whose abort was asked for while it had no replica: its output so far, finished with `abort`.
  std::optional<std::pair<std::shared_ptr<channel>, request_output>> finish_aborted(uint64_t id);

  /// Ends a request with an error; returns its channel (null when not tracked).
  std::shared_ptr<channel> fail(uint64_t id);

  /// Marks an abort: a request moved to another replica from now on ends instead. Returns the attempt to abort and
  /// where it runs (nullopt: not tracked, or between replicas).
  std::optional<std::pair<int32_t, uint64_t>> abort(uint64_t id);
  /// Whether an abort was asked for.
  bool aborting(uint64_t id) const;
  /// How often a request was moved to another replica.
  int32_t moves(uint64_t id) const;

  /// Outstanding work per replica (tokens, see outstanding_tokens), for the router; `n_replicas` entries.
  std::vector<int64_t> work(int32_t n_replicas) const;
  /// Live requests per replica.
  std::vector<int64_t> requests(int32_t n_replicas) const;

  /// Every tracked request's id.
  std::vector<uint64_t> ids() const;
  /// Takes every channel (shutdown).
  std::vector<std::shared_ptr<channel>> take_all();
  size_t size() const { return requests_.size(); }
  /// Requests moved to another replica since start.
  uint64_t n_failovers() const { return n_failovers_; }

 private:
  struct tracked {
    uint64_t id = 0;
    proto::submit_request sub;  ///< the first submission (request_id: its attempt)
    std::shared_ptr<channel> ch;
    bool user_stream = false;
    bool aborting = false;
    int32_t replica = -1;  ///< -1: between replicas
    int32_t moves = 0;     ///< resubmissions so far
    uint64_t attempt = 0;
    std::vector<completion_output> seqs;  ///< what each sequence produced so far, as its caller saw it
    std::vector<size_t> swallow;          ///< n > 1 run again: tokens of each sequence still to swallow
    int32_t num_cached_tokens = 0;
  };

  request_output synthesized(tracked& r) const;
  std::vector<size_t> produced(const tracked& r) const;

  std::unordered_map<uint64_t, tracked> requests_;
  std::unordered_map<uint64_t, uint64_t> by_attempt_;  // attempt -> request id
  uint64_t n_failovers_ = 0;
};

}  // namespace actorllm::detail
