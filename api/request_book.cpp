// The facade's record of live requests: see request_book.hpp.
#include "api/request_book.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorllm::detail {

int64_t outstanding_tokens(const proto::submit_request& sub, const std::vector<size_t>& produced,
                           int64_t default_output) {
  const int64_t n = std::max<int32_t>(sub.params.n, 1);
  const int64_t per_seq = sub.params.max_tokens ? *sub.params.max_tokens : default_output;
  int64_t work = 0;
  size_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t done = i < static_cast<int64_t>(produced.size()) ? produced[static_cast<size_t>(i)] : 0;
    total += done;
    work += std::max<int64_t>(per_seq - static_cast<int64_t>(done), 0);
  }
  if (total == 0)
    work += static_cast<int64_t>(sub.prompt_ids.size());
  return work;
}

void request_book::add(uint64_t id, proto::submit_request sub, std::shared_ptr<channel> ch, bool user_stream,
                       int32_t replica) {
  tracked r;
  r.id = id;
  r.attempt = sub.request_id;
  r.sub = std::move(sub);
  r.ch = std::move(ch);
  r.user_stream = user_stream;
  r.replica = replica;
  const auto n = static_cast<size_t>(std::max<int32_t>(r.sub.params.n, 1));
  r.seqs.resize(n);
  for (size_t i = 0; i < n; ++i)
    r.seqs[i].index = static_cast<uint32_t>(i);
  r.swallow.assign(n, 0);
  by_attempt_[r.attempt] = id;
  requests_.insert_or_assign(id, std::move(r));
}

std::shared_ptr<channel> request_book::remove(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end())
    return nullptr;
  by_attempt_.erase(it->second.attempt);
  auto ch = std::move(it->second.ch);
  requests_.erase(it);
  return ch;
}

std::vector<size_t> request_book::produced(const tracked& r) const {
  std::vector<size_t> out;
  out.reserve(r.seqs.size());
  for (const auto& s : r.seqs)
    out.push_back(s.token_ids.size());
  return out;
}

void request_book::take(proto::output_batch&& batch, deliveries& out) {
  for (auto& d : batch.deltas) {
    auto a = by_attempt_.find(d.request_id);
    if (a == by_attempt_.end())
      continue;
    tracked& r = requests_.at(a->second);
    if (d.index >= r.seqs.size())
      continue;
    completion_output& seq = r.seqs[d.index];
    size_t& swallow = r.swallow[d.index];
    if (swallow > 0) {
      // Run again after a failover: the caller saw these tokens already. The same seed and the same ids make the
      // same tokens; a sequence that went another way cannot be continued and fails.
      const size_t at = seq.token_ids.size() - swallow;
      bool same = d.token_ids.size() <= swallow;
      for (size_t i = 0; same && i < d.token_ids.size(); ++i)
        same = seq.token_ids[at + i] == d.token_ids[i];
      if (!same) {
        by_attempt_.erase(r.attempt);
        out.errors.emplace_back(
            std::move(r.ch),
            error{errc::engine_failure,
                  fmt::format("request {}: its replica failed, and sequence {} ran again on another replica but "
                              "came out different, so it cannot be continued",
                              r.id, d.index)});
        requests_.erase(a->second);
        continue;
      }
      swallow -= d.token_ids.size();
      continue;
    }
    seq.token_ids.insert(seq.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    seq.text += d.text;
    seq.logprobs.insert(seq.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    for (const auto& lp : d.logprobs)
      seq.cumulative_logprob += lp.logprob;
    if (d.finish_reason)
      seq.finish_reason = d.finish_reason;
    if (r.user_stream) {
      d.request_id = r.id;
      out.deltas.emplace_back(r.ch, std::move(d));
    }
  }
  for (auto& o : batch.outputs) {
    auto a = by_attempt_.find(o.request_id);
    if (a == by_attempt_.end())
      continue;
    const uint64_t id = a->second;
    by_attempt_.erase(a);
    auto it = requests_.find(id);
    o.request_id = id;
    out.outputs.emplace_back(std::move(it->second.ch), std::move(o));
    requests_.erase(it);
  }
  for (auto& f : batch.failures) {
    auto a = by_attempt_.find(f.request_id);
    if (a == by_attempt_.end())
      continue;
    const uint64_t id = a->second;
    tracked& r = requests_.at(id);
    if (f.code == errc::engine_failure || f.code == errc::shut_down) {
      // The replica failed (or is being stopped): not the request's fault. It moves on.
      out.to_fail_over.push_back({id, r.replica, f.message});
      by_attempt_.erase(a);
      r.replica = -1;
      continue;
    }
    by_attempt_.erase(a);
    // Engine messages name the engine-level id; the caller knows its own.
    std::string message = f.message;
    if (r.attempt != r.id) {
      const std::string engine_id = fmt::format("request {}", r.attempt);
      if (auto pos = message.find(engine_id); pos != std::string::npos)
        message.replace(pos, engine_id.size(), fmt::format("request {}", r.id));
    }
    out.errors.emplace_back(std::move(r.ch), error{f.code, std::move(message)});
    requests_.erase(id);
  }
}

std::vector<uint64_t> request_book::lose_replica(int32_t replica) {
  std::vector<uint64_t> lost;
  for (auto& [id, r] : requests_)
    if (r.replica == replica) {
      by_attempt_.erase(r.attempt);
      r.replica = -1;
      lost.push_back(id);
    }
  std::sort(lost.begin(), lost.end());  // oldest first
  return lost;
}

bool request_book::lose_attempt(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end())
    return false;
  by_attempt_.erase(it->second.attempt);
  it->second.replica = -1;
  return true;
}

std::optional<proto::submit_request> request_book::resubmission(uint64_t id, int32_t replica, uint64_t attempt) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.aborting)
    return std::nullopt;
  tracked& r = it->second;
  proto::submit_request sub = r.sub;
  sub.request_id = attempt;
  if (r.seqs.size() == 1) {
    // Resumed where it stood: the tokens so far (with their logprobs) are prefilled with the prompt.
    const completion_output& seq = r.seqs.front();
    sub.resume_tokens.clear();
    sub.resume_tokens.reserve(seq.token_ids.size());
    for (size_t i = 0; i < seq.token_ids.size(); ++i) {
      sample_logprobs t;
      t.token = seq.token_ids[i];
      if (i < seq.logprobs.size())
        t = seq.logprobs[i];
      sub.resume_tokens.push_back(std::move(t));
    }
    r.swallow.assign(1, 0);
  } else {
    // Run again from the seed: what each sequence's caller saw already is swallowed.
    for (size_t i = 0; i < r.seqs.size(); ++i)
      r.swallow[i] = r.seqs[i].token_ids.size();
  }
  r.attempt = attempt;
  r.replica = replica;
  ++r.moves;
  by_attempt_[attempt] = id;
  ++n_failovers_;
  return sub;
}

request_output request_book::synthesized(tracked& r) const {
  request_output out;
  out.request_id = r.id;
  out.prompt = r.sub.prompt_text;
  out.prompt_token_ids = r.sub.prompt_ids;
  out.finished = true;
  out.usage.prompt_tokens = static_cast<int32_t>(out.prompt_token_ids.size());
  out.usage.cached_tokens = r.num_cached_tokens;
  for (auto& s : r.seqs) {
    if (!s.finish_reason)
      s.finish_reason = finish_reason::abort;
    if (!r.sub.params.logprobs)
      s.logprobs.clear();
    out.usage.completion_tokens += static_cast<int32_t>(s.token_ids.size());
    out.outputs.push_back(s);
  }
  return out;
}

std::optional<std::pair<std::shared_ptr<channel>, request_output>> request_book::finish_aborted(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end())
    return std::nullopt;
  by_attempt_.erase(it->second.attempt);
  std::pair<std::shared_ptr<channel>, request_output> out{std::move(it->second.ch), synthesized(it->second)};
  requests_.erase(it);
  return out;
}

std::shared_ptr<channel> request_book::fail(uint64_t id) { return remove(id); }

std::optional<std::pair<int32_t, uint64_t>> request_book::abort(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end())
    return std::nullopt;
  it->second.aborting = true;
  if (it->second.replica < 0)
    return std::nullopt;
  return std::pair{it->second.replica, it->second.attempt};
}

int32_t request_book::moves(uint64_t id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.moves;
}

bool request_book::aborting(uint64_t id) const {
  auto it = requests_.find(id);
  return it != requests_.end() && it->second.aborting;
}

std::vector<int64_t> request_book::work(int32_t n_replicas) const {
  std::vector<int64_t> w(static_cast<size_t>(std::max(n_replicas, 0)), 0);
  for (const auto& [id, r] : requests_)
    if (r.replica >= 0 && r.replica < n_replicas)
      w[static_cast<size_t>(r.replica)] += outstanding_tokens(r.sub, produced(r), default_output_tokens);
  return w;
}

std::vector<int64_t> request_book::requests(int32_t n_replicas) const {
  std::vector<int64_t> n(static_cast<size_t>(std::max(n_replicas, 0)), 0);
  for (const auto& [id, r] : requests_)
    if (r.replica >= 0 && r.replica < n_replicas)
      ++n[static_cast<size_t>(r.replica)];
  return n;
}

std::vector<uint64_t> request_book::ids() const {
  std::vector<uint64_t> out;
  out.reserve(requests_.size());
  for (const auto& [id, r] : requests_)
    out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::shared_ptr<channel>> request_book::take_all() {
  std::vector<std::shared_ptr<channel>> out;
  for (auto& [id, r] : requests_)
    out.push_back(std::move(r.ch));
  requests_.clear();
  by_attempt_.clear();
  return out;
}

}  // namespace actorllm::detail
