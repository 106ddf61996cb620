// A small thread-safe Prometheus registry (counters, gauges, histograms with labels) rendering the text exposition
// format 0.0.4, and the engine's metrics with vLLM's names under the `actorllm:` prefix.
#pragma once

#include <actorllm/engine_stats.hpp>
#include <actorllm/request_output.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actorllm::net::openai {

/// Label name/value pairs of one series, in the order they are rendered.
using metric_labels = std::vector<std::pair<std::string, std::string>>;

/// A monotonically increasing value.
class counter {
 public:
  /// Adds `v` (must be >= 0; negative values are ignored, a counter never goes down).
  void inc(double v = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// A value that goes up and down.
class gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// Observations counted into cumulative buckets (upper bounds, ascending) plus +Inf, with their count and sum.
class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  void observe(double v);

  /// A consistent copy: per-bucket counts (not cumulative; the last is +Inf), count and sum.
  struct snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    uint64_t count = 0;
    double sum = 0.0;
  };
  snapshot snap() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

/// Owns metric families and renders them. Registering is done once at start-up; updating the returned series is
/// lock-free for counters and gauges and takes a per-histogram lock.
class metrics_registry {
 public:
  metrics_registry();
  ~metrics_registry();
  metrics_registry(const metrics_registry&) = delete;
  metrics_registry& operator=(const metrics_registry&) = delete;

  /// The series of counter family `name` with `labels` (created on first use). Throws std::invalid_argument
  /// when `name` was registered as another type or is not a valid metric name.
  counter& get_counter(std::string_view name, std::string_view help, const metric_labels& labels = {});
  gauge& get_gauge(std::string_view name, std::string_view help, const metric_labels& labels = {});
  histogram& get_histogram(std::string_view name, std::string_view help, const std::vector<double>& bounds,
                           const metric_labels& labels = {});

  /// Family `name` (registered before) is also exposed as `alias`, with the same series and values: vLLM's names
  /// beside ours, so dashboards written for vLLM read them unchanged. Throws std::invalid_argument when `name` is
  /// not registered or `alias` is not a valid metric name or is taken.
  void alias(std::string_view name, std::string_view alias, std::string_view help = {});

  /// The text exposition format: per family `# HELP`, `# TYPE`, then its series in registration order; then the
  /// same for each of its aliases.
  std::string render() const;

 private:
  struct family;
  family& find_or_add(std::string_view name, std::string_view help, int type);
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<family>> families_;
};

/// (our family, vLLM's name) for every metric vLLM exposes that we have: vllm:gpu_cache_usage_perc (its older name)
/// beside vllm:kv_cache_usage_perc, vllm:time_per_output_token_seconds beside vllm:inter_token_latency_seconds.
const std::vector<std::pair<std::string, std::string>>& vllm_metric_aliases();

/// vLLM's histogram buckets (v1 metrics).
std::vector<double> ttft_buckets();
std::vector<double> inter_token_latency_buckets();
std::vector<double> e2e_latency_buckets();

/// The engine's metrics with vLLM's names (`actorllm:` instead of `vllm:`), each labelled model_name; those vLLM
/// has are exposed under its `vllm:` names too (vllm_metric_aliases).
class engine_metrics {
 public:
  explicit engine_metrics(std::string model_name);

  /// Gauges from a stats snapshot: running and waiting sequences, KV-cache usage, and the preemption and prefix
  /// cache counters brought up to the engine's totals (a restarted engine's totals start again from 0).
  void update(const engine_stats& stats);
  /// The time from arrival to the first output token of a request.
  void observe_time_to_first_token(double seconds);
  /// The time between two consecutive output tokens of a request.
  void observe_inter_token_latency(double seconds);
  /// A finished request: its tokens, end-to-end latency and why it finished.
  void observe_finished(finish_reason reason, int64_t prompt_tokens, int64_t generation_tokens, double e2e_seconds);

  /// The /metrics body.
  std::string render() const { return registry_.render(); }
  metrics_registry& registry() { return registry_; }

 private:
  metrics_registry registry_;
  struct replica_series {
    gauge* healthy = nullptr;
    gauge* running = nullptr;
    gauge* waiting = nullptr;
    gauge* kv_cache_usage = nullptr;
    gauge* outstanding = nullptr;
    counter* routed = nullptr;
    counter* restarts = nullptr;
    uint64_t routed_seen = 0;
    uint64_t restarts_seen = 0;
    uint64_t preemptions_seen = 0;
    uint64_t prefix_cache_queries_seen = 0;
    uint64_t prefix_cache_hits_seen = 0;
  };
  /// The series of data-parallel replica `rank` (created on first use; guarded by preemptions_mutex_).
  replica_series& replica(int32_t rank);

  metric_labels labels_;
  std::map<int32_t, replica_series> replicas_;
  counter* failovers_;
  uint64_t failovers_seen_ = 0;
  gauge* running_;
  gauge* waiting_;
  gauge* kv_cache_usage_;
  counter* preemptions_;
  counter* prompt_tokens_;
  counter* generation_tokens_;
  histogram* ttft_;
  histogram* itl_;
  histogram* e2e_;
  counter* success_[3];  // by finish_reason
  counter* prefix_cache_queries_;
  counter* prefix_cache_hits_;
  std::mutex preemptions_mutex_;  // guards the *_seen_ totals
  uint64_t preemptions_seen_ = 0;
  uint64_t prefix_cache_queries_seen_ = 0;
  uint64_t prefix_cache_hits_seen_ = 0;
  std::vector<counter*> expert_tokens_;  // actorllm:expert_tokens_total{expert="e"}, made on first sight
  std::vector<uint64_t> expert_tokens_seen_;
  counter* ep_exchange_bytes_ = nullptr;  // actorllm:ep_exchange_bytes_total, made on first sight
  uint64_t ep_exchange_bytes_seen_ = 0;
  /// Expert-parallel load balancing's series (actorllm:eplb_*), made at its first rearrangement.
  struct eplb_series {
    counter* rearrangements = nullptr;
    uint64_t rearrangements_seen = 0;
    gauge* stall = nullptr;
    gauge* tokens[2][2] = {};  // [before, after][mean, max]
    gauge* imbalance[2] = {};  // [before, after]: max / mean
  };
  std::unique_ptr<eplb_series> eplb_;
  void update_eplb(const eplb_report& r);
};

}  // namespace actorllm::net::openai
