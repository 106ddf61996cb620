// The device slots of one shard's LoRA adapters.
#include "model/lora_slots.hpp"

#include "model/model_error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace actorllm::model {

static_assert(n_lora_targets == std::tuple_size_v<decltype(layer_weights::lora)>,
              "layer_weights::lora holds one stack per lora_target");

namespace {

/// The shape [out, in] of the Linear each target adapts in `w`, on this shard ({0, 0} when the layer has none: the MLP
/// of a MoE layer). q/k/v and gate/up are parts of stacked Linears: their own rows.
std::array<int64_t, 2> target_shape(const layer_weights& w, lora_target t) {
  auto part = [](const stacked_linear& s, int i) -> std::array<int64_t, 2> {
    return s.empty() ? std::array<int64_t, 2>{0, 0} : std::array<int64_t, 2>{s.rows[static_cast<size_t>(i)], s.n_in};
  };
  auto whole = [](const tensor& x) -> std::array<int64_t, 2> {
    return x.empty() ? std::array<int64_t, 2>{0, 0} : std::array<int64_t, 2>{x.dim(0), x.dim(1)};
  };
  switch (t) {
    case lora_target::q:
      return part(w.qkv, 0);
    case lora_target::k:
      return part(w.qkv, 1);
    case lora_target::v:
      return part(w.qkv, 2);
    case lora_target::o:
      return whole(w.wo);
    case lora_target::gate:
      return part(w.gate_up, 0);
    case lora_target::up:
      return part(w.gate_up, 1);
    case lora_target::down:
      return whole(w.w_down);
  }
  return {0, 0};
}

}  // namespace

lora_slots::lora_slots(backend& be, const model_config& cfg, const shard_spec& shard, const lora_limits& limits,
                       std::vector<layer_weights>& layers)
    : be_(be), cfg_(cfg), shard_(shard), limits_(limits), layers_(layers) {
  if (limits_.max_loras < 1 || limits_.max_lora_rank < 1)
    throw model_error(fmt::format("LoRA needs max_loras >= 1 and max_lora_rank >= 1, got {} and {}", limits_.max_loras,
                                  limits_.max_lora_rank));
  limits_.max_cpu_loras = std::max(limits_.max_cpu_loras, limits_.max_loras);
  const int64_t slots = limits_.max_loras, rank = limits_.max_lora_rank;
  for (layer_weights& w : layers_) {
    for (size_t t = 0; t < n_lora_targets; ++t) {
      const auto [out, in] = target_shape(w, static_cast<lora_target>(t));
      if (out == 0)
        continue;
      lora_stack& s = w.lora[t];
      s.a = be_.alloc(dtype::f32, {slots, rank, in});
      s.b = be_.alloc(dtype::f32, {slots, out, rank});
      const std::vector<float> zeros(static_cast<size_t>(std::max(s.a.numel(), s.b.numel())), 0.0f);
      be_.upload(s.a, zeros.data(), s.a.nbytes());
      be_.upload(s.b, zeros.data(), s.b.nbytes());
      device_bytes_ += s.a.nbytes() + s.b.nbytes();
    }
  }
  slot_ids_.assign(static_cast<size_t>(slots), 0);
  slot_used_.assign(static_cast<size_t>(slots), 0);
}

std::shared_ptr<const lora_adapter> lora_slots::adapter(const lora_source& source) {
  for (auto it = host_.begin(); it != host_.end(); ++it) {
    if (it->first == source.id) {
      host_.splice(host_.begin(), host_, it);
      return host_.front().second;
    }
  }
  auto loaded = std::make_shared<const lora_adapter>(
      load_lora_adapter(source.path, cfg_, shard_, static_cast<int64_t>(limits_.max_lora_rank)));
  ++disk_loads_;
  host_.emplace_front(source.id, std::move(loaded));
  while (host_.size() > static_cast<size_t>(limits_.max_cpu_loras))
    host_.pop_back();
  return host_.front().second;
}

void lora_slots::fill_slot(int32_t slot, const lora_adapter& adapter) {
  if (adapter.layers.size() != layers_.size())
    throw model_error(fmt::format("a LoRA adapter loaded for {} layers, but this shard holds {}", adapter.layers.size(),
                                  layers_.size()));
  const int64_t rank = limits_.max_lora_rank;
  std::vector<float> a, b;
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (size_t t = 0; t < n_lora_targets; ++t) {
      const lora_stack& s = layers_[l].lora[t];
      if (s.empty())
        continue;
      const int64_t in = s.a.dim(2), out = s.b.dim(1);
      const lora_matrices& m = adapter.layers[l][t];
      a.assign(static_cast<size_t>(rank * in), 0.0f);  // untargeted: zeros (the slot may hold an earlier adapter)
      b.assign(static_cast<size_t>(out * rank), 0.0f);
      if (!m.empty()) {
        const int64_t r = adapter.rank;
        if (m.in != in || m.out != out || r > rank || static_cast<int64_t>(m.a.size()) != r * in ||
            static_cast<int64_t>(m.b.size()) != out * r)
          throw model_error(
              fmt::format("LoRA {} of layer {}: rank {} [{} -> {}] does not fit the slots (rank {}, [{} "
                          "-> {}])",
                          lora_target_module(static_cast<lora_target>(t)), shard_.layer_begin + static_cast<int64_t>(l),
                          r, m.in, m.out, rank, in, out));
        std::copy(m.a.begin(), m.a.end(), a.begin());  // rows [0, r) of [rank, in]
        for (int64_t o = 0; o < out; ++o)
          std::copy_n(m.b.begin() + o * r, r, b.begin() + o * rank);
      }
      be_.upload(s.a.slice_rows(slot, 1), a.data(), a.size() * sizeof(float));
      be_.upload(s.b.slice_rows(slot, 1), b.data(), b.size() * sizeof(float));
    }
  }
}

std::vector<int32_t> lora_slots::assign(const forward_batch& batch, std::span<const lora_source> sources) {
  ++tick_;
  std::vector<int32_t> wanted;
  for (const batch_sequence& seq : batch.sequences)
    if (seq.lora_id != 0 && std::find(wanted.begin(), wanted.end(), seq.lora_id) == wanted.end())
      wanted.push_back(seq.lora_id);
  if (wanted.size() > slot_ids_.size())
    throw model_error(
        fmt::format("a step applies {} LoRA adapters, but max_loras is {}", wanted.size(), slot_ids_.size()));
  std::vector<bool> in_use(slot_ids_.size(), false);
  for (size_t s = 0; s < slot_ids_.size(); ++s)
    if (std::find(wanted.begin(), wanted.end(), slot_ids_[s]) != wanted.end()) {
      in_use[s] = true;
      slot_used_[s] = tick_;
    }
  for (int32_t id : wanted) {
    if (std::find(slot_ids_.begin(), slot_ids_.end(), id) != slot_ids_.end())
      continue;
    auto source = std::find_if(sources.begin(), sources.end(), [&](const lora_source& s) { return s.id == id; });
    if (source == sources.end())
      throw model_error(fmt::format("a step applies LoRA adapter {}, whose path the plan does not name", id));
    size_t victim = slot_ids_.size();
    for (size_t s = 0; s < slot_ids_.size(); ++s)
      if (!in_use[s] && (victim == slot_ids_.size() || slot_used_[s] < slot_used_[victim]))
        victim = s;
    const std::shared_ptr<const lora_adapter> loaded = adapter(*source);
    slot_ids_[victim] = 0;  // half-filled if fill_slot throws: never matched again
    fill_slot(static_cast<int32_t>(victim), *loaded);
    slot_ids_[victim] = id;
    slot_used_[victim] = tick_;
    in_use[victim] = true;
  }
  std::vector<int32_t> slots(batch.sequences.size(), -1);
  for (size_t i = 0; i < batch.sequences.size(); ++i)
    if (const int32_t id = batch.sequences[i].lora_id; id != 0)
      slots[i] = static_cast<int32_t>(std::find(slot_ids_.begin(), slot_ids_.end(), id) - slot_ids_.begin());
  return slots;
}

}  // namespace actorllm::model
