// Admission control for generation requests (--max-queued-requests): at most `limit` sequences may be accepted and
// not yet finished; the server answers the rest 429 at once instead of queueing without bound. A request weighs its
// sequences (n × prompts), so that one prompt list cannot slip thousands of sequences past the bound as one
// request. Slots are released by the request's last engine callback (or by the slot's destructor, whichever comes
// first), so a request that finishes, fails or is aborted never leaks its slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

namespace actorllm::net {

class admission_gate {
  struct state {
    std::atomic<int64_t> active{0};
    int64_t limit = -1;
  };

 public:
  /// One admitted request's place. Move-only; release() (or destruction) gives it back exactly once.
  class slot {
   public:
    slot() = default;
    slot(slot&& other) noexcept : state_(std::move(other.state_)), weight_(other.weight_) {}
    slot& operator=(slot&& other) noexcept {
      if (this != &other) {
        release();
        state_ = std::move(other.state_);
        weight_ = other.weight_;
      }
      return *this;
    }
    slot(const slot&) = delete;
    slot& operator=(const slot&) = delete;
    ~slot() { release(); }

    /// Gives the place back (no-op when already released or empty).
    void release() {
      if (auto s = std::move(state_))
        s->active.fetch_sub(weight_, std::memory_order_acq_rel);
    }
    /// Whether this still holds a place.
    bool held() const { return state_ != nullptr; }
    /// The sequences it holds.
    int64_t weight() const { return weight_; }

   private:
    friend class admission_gate;
    slot(std::shared_ptr<state> s, int64_t weight) : state_(std::move(s)), weight_(weight) {}
    std::shared_ptr<state> state_;
    int64_t weight_ = 0;
  };

  /// `limit` < 0: no limit (every try_enter succeeds, still counted).
  explicit admission_gate(int64_t limit) : state_(std::make_shared<state>()) { state_->limit = limit; }

  /// A slot for `weight` (>= 1) sequences, or nullopt when they do not fit beside those admitted already. A weight
  /// over the whole limit never fits (callers refuse it outright: waiting would not help).
  std::optional<slot> try_enter(int64_t weight = 1) {
    int64_t n = state_->active.load(std::memory_order_relaxed);
    do {
      if (state_->limit >= 0 && n + weight > state_->limit)
        return std::nullopt;
    } while (!state_->active.compare_exchange_weak(n, n + weight, std::memory_order_acq_rel));
    return slot{state_, weight};
  }

  /// Sequences holding a slot now.
  int64_t active() const { return state_->active.load(std::memory_order_acquire); }
  /// The limit (< 0: none).
  int64_t limit() const { return state_->limit; }

 private:
  std::shared_ptr<state> state_;  // shared with the slots, which may outlive the gate (engine callbacks)
};

}  // namespace actorllm::net
