// Prometheus text exposition (format 0.0.4) for a handful of families; numbers in shortest round-trip form.
#include "net/openai/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace actorllm::net::openai {

namespace {

enum family_type { counter_type, gauge_type, histogram_type };

std::string format_value(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string{buf, end};
}

void append_escaped(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quote)
      out += "\\\"";
    else
      out += c;
  }
}

std::string label_block(const metric_labels& labels, std::string_view extra_name = {}, std::string_view extra = {}) {
  if (labels.empty() && extra_name.empty())
    return {};
  std::string out = "{";
  bool first = true;
  auto add = [&](std::string_view k, std::string_view v) {
    if (!first)
      out += ',';
    first = false;
    out += k;
    out += "=\"";
    append_escaped(out, v, true);
    out += '"';
  };
  for (const auto& [k, v] : labels)
    add(k, v);
  if (!extra_name.empty())
    add(extra_name, extra);
  out += '}';
  return out;
}

bool valid_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9'))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
  });
}

}  // namespace

void counter::inc(double v) {
  if (v > 0)
    value_.fetch_add(v, std::memory_order_relaxed);
}

histogram::histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end())
    throw std::invalid_argument("histogram bucket bounds must be strictly ascending");
}

void histogram::observe(double v) {
  if (std::isnan(v))
    return;  // no bucket holds NaN, and it would poison the sum
  std::size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard lock{mutex_};
  ++counts_[bucket];
  ++count_;
  sum_ += v;
}

histogram::snapshot histogram::snap() const {
  std::lock_guard lock{mutex_};
  return snapshot{bounds_, counts_, count_, sum_};
}

struct metrics_registry::family {
  std::string name;
  std::string help;
  int type = counter_type;
  struct series {
    metric_labels labels;
    std::unique_ptr<counter> c;
    std::unique_ptr<gauge> g;
    std::unique_ptr<histogram> h;
  };
  std::vector<series> members;
  std::vector<std::pair<std::string, std::string>> aliases;  // (name, help)

  series* find(const metric_labels& labels) {
    for (auto& s : members)
      if (s.labels == labels)
        return &s;
    return nullptr;
  }
};

metrics_registry::metrics_registry() = default;
metrics_registry::~metrics_registry() = default;

metrics_registry::family& metrics_registry::find_or_add(std::string_view name, std::string_view help, int type) {
  if (!valid_name(name))
    throw std::invalid_argument("invalid metric name '" + std::string{name} + "'");
  for (auto& f : families_) {
    if (f->name == name) {
      if (f->type != type)
        throw std::invalid_argument("metric '" + std::string{name} + "' is registered with another type");
      return *f;
    }
  }
  auto f = std::make_unique<family>();
  f->name = std::string{name};
  f->help = std::string{help};
  f->type = type;
  families_.push_back(std::move(f));
  return *families_.back();
}

counter& metrics_registry::get_counter(std::string_view name, std::string_view help, const metric_labels& labels) {
  std::lock_guard lock{mutex_};
  family& f = find_or_add(name, help, counter_type);
  if (auto* s = f.find(labels))
    return *s->c;
  f.members.push_back({labels, std::make_unique<counter>(), nullptr, nullptr});
  return *f.members.back().c;
}

gauge& metrics_registry::get_gauge(std::string_view name, std::string_view help, const metric_labels& labels) {
  std::lock_guard lock{mutex_};
  family& f = find_or_add(name, help, gauge_type);
  if (auto* s = f.find(labels))
    return *s->g;
  f.members.push_back({labels, nullptr, std::make_unique<gauge>(), nullptr});
  return *f.members.back().g;
}

histogram& metrics_registry::get_histogram(std::string_view name, std::string_view help,
                                           const std::vector<double>& bounds, const metric_labels& labels) {
  std::lock_guard lock{mutex_};
  family& f = find_or_add(name, help, histogram_type);
  if (auto* s = f.find(labels))
    return *s->h;
  f.members.push_back({labels, nullptr, nullptr, std::make_unique<histogram>(bounds)});
  return *f.members.back().h;
}

void metrics_registry::alias(std::string_view name, std::string_view alias, std::string_view help) {
  std::lock_guard lock{mutex_};
  if (!valid_name(alias))
    throw std::invalid_argument("invalid metric name '" + std::string{alias} + "'");
  family* target = nullptr;
  for (auto& f : families_) {
    if (f->name == alias ||
        std::any_of(f->aliases.begin(), f->aliases.end(), [&](const auto& a) { return a.first == alias; }))
      throw std::invalid_argument("metric name '" + std::string{alias} + "' is taken");
    if (f->name == name)
      target = f.get();
  }
  if (target == nullptr)
    throw std::invalid_argument("no metric '" + std::string{name} + "' to alias as '" + std::string{alias} + "'");
  target->aliases.emplace_back(std::string{alias}, help.empty() ? target->help : std::string{help});
}

std::string metrics_registry::render() const {
  std::lock_guard lock{mutex_};
  std::string out;
  auto write = [&out](const family& f, const std::string& name, const std::string& help) {
    out += "# HELP " + name + " ";
    append_escaped(out, help, false);
    out += "\n# TYPE " + name + " ";
    out += f.type == counter_type ? "counter" : f.type == gauge_type ? "gauge" : "histogram";
    out += '\n';
    for (const auto& s : f.members) {
      if (f.type == histogram_type) {
        auto snap = s.h->snap();
        uint64_t cumulative = 0;
        for (std::size_t i = 0; i <= snap.bounds.size(); ++i) {
          cumulative += snap.counts[i];
          std::string le = i < snap.bounds.size() ? format_value(snap.bounds[i]) : "+Inf";
          out += name + "_bucket" + label_block(s.labels, "le", le) + " " + std::to_string(cumulative) + "\n";
        }
        out += name + "_sum" + label_block(s.labels) + " " + format_value(snap.sum) + "\n";
        out += name + "_count" + label_block(s.labels) + " " + std::to_string(snap.count) + "\n";
      } else {
        double v = f.type == counter_type ? s.c->value() : s.g->value();
        out += name + label_block(s.labels) + " " + format_value(v) + "\n";
      }
    }
  };
  for (const auto& f : families_)
    write(*f, f->name, f->help);
  for (const auto& f : families_)
    for (const auto& [name, help] : f->aliases)
      write(*f, name, help);
  return out;
}

const std::vector<std::pair<std::string, std::string>>& vllm_metric_aliases() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"actorllm:num_requests_running", "vllm:num_requests_running"},
      {"actorllm:num_requests_waiting", "vllm:num_requests_waiting"},
      {"actorllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"},
      {"actorllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
      {"actorllm:num_preemptions_total", "vllm:num_preemptions_total"},
      {"actorllm:prompt_tokens_total", "vllm:prompt_tokens_total"},
      {"actorllm:generation_tokens_total", "vllm:generation_tokens_total"},
      {"actorllm:prefix_cache_queries_total", "vllm:prefix_cache_queries_total"},
      {"actorllm:prefix_cache_hits_total", "vllm:prefix_cache_hits_total"},
      {"actorllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
      {"actorllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds"},
      {"actorllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
      {"actorllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
      {"actorllm:request_success_total", "vllm:request_success_total"},
  };
  return table;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> inter_token_latency_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> e2e_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

engine_metrics::engine_metrics(std::string model_name) : labels_{{"model_name", std::move(model_name)}} {
  auto& r = registry_;
  running_ = &r.get_gauge("actorllm:num_requests_running", "Number of requests in model execution batches.", labels_);
  waiting_ = &r.get_gauge("actorllm:num_requests_waiting", "Number of requests waiting to be processed.", labels_);
  kv_cache_usage_ = &r.get_gauge("actorllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels_);
  preemptions_ =
      &r.get_counter("actorllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", labels_);
  failovers_ = &r.get_counter("actorllm:request_failovers_total",
                              "Data-parallel replicas: requests moved to another replica after theirs failed (their "
                              "clients saw no error).",
                              labels_);
  prompt_tokens_ = &r.get_counter("actorllm:prompt_tokens_total", "Number of prefill tokens processed.", labels_);
  prefix_cache_queries_ = &r.get_counter("actorllm:prefix_cache_queries_total",
                                         "Prefix cache queries, in terms of number of queried tokens.", labels_);
  prefix_cache_hits_ = &r.get_counter("actorllm:prefix_cache_hits_total",
                                      "Prefix cache hits, in terms of number of cached tokens.", labels_);
  generation_tokens_ =
      &r.get_counter("actorllm:generation_tokens_total", "Number of generation tokens processed.", labels_);
  ttft_ = &r.get_histogram("actorllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                           ttft_buckets(), labels_);
  itl_ = &r.get_histogram("actorllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                          inter_token_latency_buckets(), labels_);
  e2e_ = &r.get_histogram("actorllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                          e2e_latency_buckets(), labels_);
  for (finish_reason reason : {finish_reason::stop, finish_reason::length, finish_reason::abort}) {
    metric_labels l = labels_;
    l.emplace_back("finished_reason", std::string{to_string(reason)});
    success_[static_cast<int>(reason)] =
        &r.get_counter("actorllm:request_success_total", "Count of successfully processed requests.", l);
  }
  for (const auto& [ours, vllm] : vllm_metric_aliases())
    r.alias(ours, vllm);
}

void engine_metrics::update(const engine_stats& stats) {
  running_->set(static_cast<double>(stats.n_running));
  waiting_->set(static_cast<double>(stats.n_waiting));
  kv_cache_usage_->set(stats.kv_cache_usage);
  std::lock_guard lock{preemptions_mutex_};
  if (stats.replicas.size() > 1)
    for (const replica_stats& r : stats.replicas) {  // the gauges also while no replica serves
      replica_series& s = replica(r.rank);
      s.healthy->set(r.healthy ? 1.0 : 0.0);
      s.running->set(static_cast<double>(r.n_running));
      s.waiting->set(static_cast<double>(r.n_waiting));
      s.kv_cache_usage->set(r.kv_cache_usage);
      s.outstanding->set(static_cast<double>(r.outstanding_tokens));
    }
  if (!stats.healthy)
    return;  // a failed or restarting engine reports zeros, which are no totals
  auto advance = [](counter* c, uint64_t& seen, uint64_t total) {
    if (total < seen)
      seen = 0;  // a new engine (workers restarted) counts from 0 again; the counter stays monotonic
    if (total > seen) {
      c->inc(static_cast<double>(total - seen));
      seen = total;
    }
  };
  if (stats.replicas.size() > 1) {
    // Data-parallel replicas: the totals advanced replica by replica (one replica's restart resets only its own).
    for (const replica_stats& r : stats.replicas) {
      replica_series& s = replica(r.rank);
      advance(s.routed, s.routed_seen, r.routed_requests);
      advance(s.restarts, s.restarts_seen, static_cast<uint64_t>(r.restarts));
      if (!r.healthy)
        continue;
      advance(preemptions_, s.preemptions_seen, r.n_preemptions);
      advance(prefix_cache_queries_, s.prefix_cache_queries_seen, r.prefix_cache_queries);
      advance(prefix_cache_hits_, s.prefix_cache_hits_seen, r.prefix_cache_hits);
    }
    advance(failovers_, failovers_seen_, stats.n_failovers);
  } else {
    advance(preemptions_, preemptions_seen_, stats.n_preemptions);
    advance(prefix_cache_queries_, prefix_cache_queries_seen_, stats.prefix_cache_queries);
    advance(prefix_cache_hits_, prefix_cache_hits_seen_, stats.prefix_cache_hits);
  }
  // MoE: the load of each expert (what expert-parallel load balancing would act on).
  for (size_t e = expert_tokens_.size(); e < stats.expert_tokens.size(); ++e) {
    metric_labels l = labels_;
    l.emplace_back("expert", std::to_string(e));
    expert_tokens_.push_back(&registry_.get_counter(
        "actorllm:expert_tokens_total",
        "MoE models: tokens routed to each expert (once per expert of a token's top-k), summed over the MoE layers.",
        l));
    expert_tokens_seen_.push_back(0);
  }
  for (size_t e = 0; e < stats.expert_tokens.size(); ++e)
    advance(expert_tokens_[e], expert_tokens_seen_[e], stats.expert_tokens[e]);
  // Expert parallelism: the bytes its all-to-all moved (made on first sight, so dense models do not show it).
  if (stats.ep_exchange_bytes > 0 && ep_exchange_bytes_ == nullptr)
    ep_exchange_bytes_ = &registry_.get_counter(
        "actorllm:ep_exchange_bytes_total",
        "Expert parallelism: bytes the MoE layers' all-to-all (tokens to their experts and back, EPLB's weight moves) "
        "sent and received for the sampling rank of each replica, summed over the replicas.",
        labels_);
  if (ep_exchange_bytes_ != nullptr)
    advance(ep_exchange_bytes_, ep_exchange_bytes_seen_, stats.ep_exchange_bytes);
  if (stats.eplb.rearrangements > 0 || eplb_)
    update_eplb(stats.eplb);
}

void engine_metrics::update_eplb(const eplb_report& r) {
  if (!eplb_) {
    eplb_ = std::make_unique<eplb_series>();
    eplb_->rearrangements = &registry_.get_counter(
        "actorllm:eplb_rearrangements_total",
        "Expert-parallel load balancing: rearrangements of the experts over the expert-parallel ranks.", labels_);
    eplb_->stall = &registry_.get_gauge(
        "actorllm:eplb_last_stall_seconds",
        "Expert-parallel load balancing: how long the last rearrangement held the steps up.", labels_);
    const char* when[2] = {"before", "after"};
    const char* stat[2] = {"mean", "max"};
    for (int w = 0; w < 2; ++w) {
      for (int s = 0; s < 2; ++s) {
        metric_labels l = labels_;
        l.emplace_back("when", when[w]);
        l.emplace_back("stat", stat[s]);
        eplb_->tokens[w][s] = &registry_.get_gauge(
            "actorllm:eplb_tokens_per_rank",
            "Expert-parallel load balancing at its last rearrangement: tokens per expert-parallel rank, each MoE "
            "layer's mean or max over the ranks summed over the layers; before: served since the previous one, "
            "after: the same load under the new placement.",
            l);
      }
      metric_labels l = labels_;
      l.emplace_back("when", when[w]);
      eplb_->imbalance[w] = &registry_.get_gauge(
          "actorllm:eplb_imbalance",
          "Expert-parallel load balancing at its last rearrangement: max over mean tokens per expert-parallel rank "
          "(1 is perfect balance).",
          l);
    }
  }
  if (r.rearrangements < eplb_->rearrangements_seen)
    eplb_->rearrangements_seen = 0;  // a new engine counts from 0 again; the counter stays monotonic
  if (r.rearrangements > eplb_->rearrangements_seen) {
    eplb_->rearrangements->inc(static_cast<double>(r.rearrangements - eplb_->rearrangements_seen));
    eplb_->rearrangements_seen = r.rearrangements;
  }
  eplb_->stall->set(r.last_stall_seconds);
  const double values[2][2] = {{r.tokens_per_rank_mean_before, r.tokens_per_rank_max_before},
                               {r.tokens_per_rank_mean_after, r.tokens_per_rank_max_after}};
  for (int w = 0; w < 2; ++w) {
    eplb_->tokens[w][0]->set(values[w][0]);
    eplb_->tokens[w][1]->set(values[w][1]);
    eplb_->imbalance[w]->set(values[w][0] > 0 ? values[w][1] / values[w][0] : 1.0);
  }
}

engine_metrics::replica_series& engine_metrics::replica(int32_t rank) {
  auto it = replicas_.find(rank);
  if (it != replicas_.end())
    return it->second;
  metric_labels l = labels_;
  l.emplace_back("replica", std::to_string(rank));
  replica_series s;
  s.healthy = &registry_.get_gauge("actorllm:replica_healthy",
                                   "Data-parallel replicas: 1 while the replica serves, 0 while it is restarted.", l);
  s.running =
      &registry_.get_gauge("actorllm:num_requests_running", "Number of requests in model execution batches.", l);
  s.waiting = &registry_.get_gauge("actorllm:num_requests_waiting", "Number of requests waiting to be processed.", l);
  s.kv_cache_usage =
      &registry_.get_gauge("actorllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l);
  s.outstanding = &registry_.get_gauge(
      "actorllm:replica_outstanding_tokens",
      "Data-parallel replicas: prompt and output tokens the replica's requests still stand for (what the router "
      "balances).",
      l);
  s.routed = &registry_.get_counter("actorllm:replica_routed_requests_total",
                                    "Data-parallel replicas: requests routed to the replica (failovers included).", l);
  s.restarts = &registry_.get_counter("actorllm:replica_restarts_total",
                                      "Data-parallel replicas: restarts of the replica after a failure.", l);
  return replicas_.emplace(rank, s).first->second;
}

void engine_metrics::observe_time_to_first_token(double seconds) { ttft_->observe(seconds); }

void engine_metrics::observe_inter_token_latency(double seconds) { itl_->observe(seconds); }

void engine_metrics::observe_finished(finish_reason reason, int64_t prompt_tokens, int64_t generation_tokens,
                                      double e2e_seconds) {
  prompt_tokens_->inc(static_cast<double>(prompt_tokens));
  generation_tokens_->inc(static_cast<double>(generation_tokens));
  e2e_->observe(e2e_seconds);
  success_[static_cast<int>(reason)]->inc();
}

}  // namespace actorllm::net::openai
