// Expert-parallel load balancing at run time: see expert_balancer.hpp.
#include "model/expert_balancer.hpp"

#include "model/model_error.hpp"
#include "util/check.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace actorllm::model {

namespace {

/// A uint64 as two float-sized words and back: the collectives only copy these words (all_gather is a pure copy), so
/// the counts cross exactly and every rank sums the same integers.
void put_u64(float* words, uint64_t v) { std::memcpy(words, &v, sizeof v); }
uint64_t get_u64(const float* words) {
  uint64_t v = 0;
  std::memcpy(&v, words, sizeof v);
  return v;
}

/// The tensors of one expert slot's weights, in the order they travel: gate|up (stacked, or gate then up), then down.
std::vector<tensor> expert_tensors(const expert_weights& e) {
  std::vector<tensor> out = e.gate_up.weight_tensors();
  out.push_back(e.w_down);
  return out;
}

/// The bytes of one expert slot's weights.
size_t expert_bytes(const expert_weights& e) {
  size_t bytes = 0;
  for (const tensor& t : expert_tensors(e))
    bytes += t.nbytes();
  return bytes;
}

}  // namespace

expert_balancer::expert_balancer(const model_config& cfg, const shard_spec& shard, tp_collective& ep_comm,
                                 std::vector<layer_ref> layers)
    : cfg_(cfg), settings_(shard.eplb), ep_comm_(ep_comm), n_ranks_(ep_comm.size()) {
  ACTORLLM_CHECK(shard.expert_parallel && shard.eplb.enabled, "expert_balancer without expert parallelism or EPLB");
  n_physical_ = shard.n_physical_experts(cfg.n_expert);
  if (n_physical_ % n_ranks_ != 0)
    throw model_error(fmt::format("expert-parallel load balancing: {} physical experts do not split over {} ranks",
                                  n_physical_, n_ranks_));
  slots_per_rank_ = n_physical_ / n_ranks_;
  local_of_layer_.assign(static_cast<size_t>(cfg.n_layer), -1);
  for (const layer_ref& ref : layers) {
    ACTORLLM_CHECK(static_cast<int64_t>(ref.weights->experts.size()) == slots_per_rank_ &&
                       ref.weights->expert_begin == ep_comm.rank() * slots_per_rank_,
                   "expert_balancer: a layer's weights are not this rank's expert slots");
    local_of_layer_[static_cast<size_t>(ref.layer)] = static_cast<int32_t>(layers_.size());
    layer_state& l = layers_.emplace_back();
    l.layer = ref.layer;
    l.weights = ref.weights;
    set_placement(l, initial_placement(cfg.n_expert, n_physical_));
  }
  const size_t n_counts = layers_.size() * static_cast<size_t>(cfg.n_expert);
  ring_.assign(static_cast<size_t>(std::max<int64_t>(settings_.window_size, 1)), std::vector<uint32_t>(n_counts, 0));
  window_sum_.assign(n_counts, 0);
  current_.assign(n_counts, 0);
  slot_tokens_.assign(layers_.size() * static_cast<size_t>(n_physical_), 0);
}

size_t expert_balancer::local_index(int64_t layer) const {
  const int32_t i = layer >= 0 && layer < static_cast<int64_t>(local_of_layer_.size())
                        ? local_of_layer_[static_cast<size_t>(layer)]
                        : -1;
  ACTORLLM_CHECK(i >= 0, "expert_balancer: not one of the shard's MoE layers");
  return static_cast<size_t>(i);
}

void expert_balancer::set_placement(layer_state& l, layer_placement p) {
  l.replicas.assign(static_cast<size_t>(cfg_.n_expert), {});
  for (size_t slot = 0; slot < p.phys_to_log.size(); ++slot)
    l.replicas[static_cast<size_t>(p.phys_to_log[slot])].push_back(static_cast<int32_t>(slot));
  l.placement = std::move(p);
}

const layer_placement& expert_balancer::placement(int64_t layer) const { return layers_[local_index(layer)].placement; }

int32_t expert_balancer::slot_for(int64_t layer, int32_t expert, int64_t token) const {
  const auto& replicas = layers_[local_index(layer)].replicas[static_cast<size_t>(expert)];
  // Token index plus step: a decode step of one token still alternates its replicas from step to step.
  return replicas[static_cast<size_t>((static_cast<uint64_t>(token) + steps_) % replicas.size())];
}

void expert_balancer::count(int64_t layer, int32_t expert, int32_t slot) {
  const size_t l = local_index(layer);
  ++current_[l * static_cast<size_t>(cfg_.n_expert) + static_cast<size_t>(expert)];
  ++slot_tokens_[l * static_cast<size_t>(n_physical_) + static_cast<size_t>(slot)];
}

bool expert_balancer::end_step(backend& be) {
  std::vector<uint32_t>& oldest = ring_[ring_next_];
  for (size_t i = 0; i < current_.size(); ++i) {
    window_sum_[i] += current_[i];
    window_sum_[i] -= oldest[i];
  }
  oldest.swap(current_);
  std::fill(current_.begin(), current_.end(), 0);
  ring_next_ = (ring_next_ + 1) % ring_.size();
  ++steps_;
  if (layers_.empty() || steps_ % static_cast<uint64_t>(settings_.step_interval) != 0)
    return false;
  rearrange(be);
  return true;
}

void expert_balancer::rearrange(backend& be) {
  const auto start = std::chrono::steady_clock::now();
  const auto n_layers = static_cast<int64_t>(layers_.size());
  const int64_t n_logical = cfg_.n_expert;
  // 1. The group's load: every rank's window and per-slot counts, gathered as words and summed in rank order.
  const int64_t n_values = n_layers * (n_logical + n_physical_);
  send_.resize(static_cast<size_t>(2 * n_values));
  for (size_t i = 0; i < window_sum_.size(); ++i)
    put_u64(send_.data() + 2 * i, window_sum_[i]);
  for (size_t i = 0; i < slot_tokens_.size(); ++i)
    put_u64(send_.data() + 2 * (window_sum_.size() + i), slot_tokens_[i]);
  recv_.resize(static_cast<size_t>(2 * n_values * n_ranks_));
  ep_comm_.all_gather(send_.data(), 2 * n_values, recv_.data());
  std::vector<uint64_t> total(static_cast<size_t>(n_values), 0);
  for (int64_t r = 0; r < n_ranks_; ++r)
    for (int64_t i = 0; i < n_values; ++i)
      total[static_cast<size_t>(i)] += get_u64(recv_.data() + 2 * (r * n_values + i));

  // 2. The new placements (the same on every rank), each rank's kept experts left in their slots.
  std::vector<std::vector<double>> load(static_cast<size_t>(n_layers), std::vector<double>(n_logical));
  for (int64_t l = 0; l < n_layers; ++l)
    for (int64_t e = 0; e < n_logical; ++e)
      load[static_cast<size_t>(l)][static_cast<size_t>(e)] =
          static_cast<double>(total[static_cast<size_t>(l * n_logical + e)]);
  const std::vector<layer_placement> computed = rebalance_experts(load, n_physical_, 1, 1, n_ranks_);
  eplb_stats next = stats_;
  next.mean_before = next.max_before = next.mean_after = next.max_after = 0.0;
  std::vector<double> served(static_cast<size_t>(n_ranks_));
  for (int64_t l = 0; l < n_layers; ++l) {
    layer_state& state = layers_[static_cast<size_t>(l)];
    std::fill(served.begin(), served.end(), 0.0);
    const uint64_t* slots = total.data() + n_layers * n_logical + l * n_physical_;
    for (int64_t s = 0; s < n_physical_; ++s)
      served[static_cast<size_t>(s / slots_per_rank_)] += static_cast<double>(slots[s]);
    next.max_before += *std::max_element(served.begin(), served.end());
    for (double x : served)
      next.mean_before += x / static_cast<double>(n_ranks_);
    layer_placement placed = keep_in_place(state.placement, computed[static_cast<size_t>(l)], n_ranks_);
    const std::vector<double> after = tokens_per_rank(load[static_cast<size_t>(l)], placed, n_ranks_);
    next.max_after += *std::max_element(after.begin(), after.end());
    for (double x : after)
      next.mean_after += x / static_cast<double>(n_ranks_);

    // 3. The weights follow, then the layer routes by its new placement.
    const std::vector<expert_move> moves = plan_moves(state.placement, placed, n_ranks_);
    if (!moves.empty())
      exchange(be, state, moves);
    set_placement(state, std::move(placed));
  }
  be.synchronize();
  std::fill(slot_tokens_.begin(), slot_tokens_.end(), 0);
  ++next.rearrangements;
  next.last_stall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_ = next;
  if (settings_.log_balancedness && ep_comm_.rank() == 0)
    log::info("eplb",
              "Rearranged the experts of {} MoE layers over {} ranks in {:.3f} s: tokens per rank max/mean {:.3f} "
              "before, {:.3f} after (balancedness mean/max {:.3f} -> {:.3f})",
              n_layers, n_ranks_, next.last_stall_seconds,
              next.mean_before > 0 ? next.max_before / next.mean_before : 1.0,
              next.mean_after > 0 ? next.max_after / next.mean_after : 1.0,
              next.max_before > 0 ? next.mean_before / next.max_before : 1.0,
              next.max_after > 0 ? next.mean_after / next.max_after : 1.0);
}

void expert_balancer::exchange(backend& be, const layer_state& l, const std::vector<expert_move>& moves) {
  const moe_weights& w = *l.weights;
  const int64_t me = ep_comm_.rank();
  const size_t bytes = expert_bytes(w.experts.front());
  const auto width = static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float));
  auto rank_of = [&](int32_t slot) { return static_cast<int64_t>(slot) / slots_per_rank_; };
  auto local = [&](int32_t slot) -> const expert_weights& {
    return w.experts[static_cast<size_t>(slot - me * slots_per_rank_)];
  };

  // What this rank sends: the old contents of its source slots, by destination slot (so by destination rank). Every
  // source is read before any slot is written, so a slot that is both a source and a destination sends its old
  // expert.
  std::vector<int64_t> send_rows(static_cast<size_t>(n_ranks_), 0);
  int64_t n_send = 0;
  for (const expert_move& m : moves)
    if (rank_of(m.src) == me)
      ++n_send;
  send_.assign(static_cast<size_t>(n_send * width), 0.0f);
  int64_t row = 0;
  for (const expert_move& m : moves) {
    if (rank_of(m.src) != me)
      continue;
    ++send_rows[static_cast<size_t>(rank_of(m.dst))];
    auto* out = reinterpret_cast<std::byte*>(send_.data() + row * width);
    const expert_weights& src = local(m.src);
    for (const tensor& t : expert_tensors(src)) {
      be.download(t, out, t.nbytes());
      out += t.nbytes();
    }
    ++row;
  }
  const std::vector<int64_t> from = ep_comm_.all_to_all_rows(send_.data(), send_rows, width, recv_);

  // What it receives: rows by source rank, each source's in destination-slot order, as the moves list them.
  std::vector<const expert_move*> incoming;
  for (const expert_move& m : moves)
    if (rank_of(m.dst) == me)
      incoming.push_back(&m);
  std::stable_sort(incoming.begin(), incoming.end(),
                   [&](const expert_move* a, const expert_move* b) { return rank_of(a->src) < rank_of(b->src); });
  std::vector<int64_t> expected(static_cast<size_t>(n_ranks_), 0);
  for (const expert_move* m : incoming)
    ++expected[static_cast<size_t>(rank_of(m->src))];
  ACTORLLM_CHECK(
      from == expected && static_cast<int64_t>(recv_.size()) == static_cast<int64_t>(incoming.size()) * width,
      "expert-parallel load balancing: the expert weights received are not the ones expected");
  for (size_t i = 0; i < incoming.size(); ++i) {
    const auto* in = reinterpret_cast<const std::byte*>(recv_.data() + static_cast<int64_t>(i) * width);
    const expert_weights& dst = local(incoming[i]->dst);
    for (const tensor& t : expert_tensors(dst)) {
      be.upload(t, in, t.nbytes());
      in += t.nbytes();
    }
  }
}

}  // namespace actorllm::model
