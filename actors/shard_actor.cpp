// The shard actor: a thin shell around llama_model, kv_cache and sequence_samplers.
#include "actors/shard_actor.hpp"

#include "actorllm/proto/error.hpp"
#include "actors/sequence_samplers.hpp"
#include "kernels/collective.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "util/log.hpp"
#include "util/thread_pool.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <chrono>

#include <optional>

namespace actorllm::actors {

namespace {

struct shard_state {
  shard_args args;
  std::unique_ptr<thread_pool> pool;
  std::unique_ptr<tp_collective> comm;
  std::unique_ptr<activation_link> prev_link;
  std::unique_ptr<activation_link> next_link;
  std::unique_ptr<model::llama_model> model;
  std::unique_ptr<model::kv_cache> cache;
  sequence_samplers samplers;
  proto::result_sink results;
  bool failed = false;  // once a step failed, later steps are dropped: the replica is unusable

  std::string where() const {
    return fmt::format("stage {} rank {} (layers {}-{})", args.stage, args.spec.tp_rank, args.spec.layer_begin,
                       args.spec.layer_end - 1);
  }
};

using shard_pointer = proto::shard_actor::stateful_pointer<shard_state>;

model::forward_batch to_forward_batch(const proto::step_plan& plan) {
  model::forward_batch batch;
  batch.tokens = plan.tokens;
  batch.positions = plan.positions;
  batch.sample_rows = plan.sample_rows;
  batch.sequences.reserve(plan.sequences.size());
  for (const auto& s : plan.sequences)
    batch.sequences.push_back({s.query_begin, s.n_query, s.block_table});
  return batch;
}

void report_failure(shard_pointer self, uint64_t step_id, std::string message) {
  auto& st = self->state;
  st.failed = true;
  log::error("shard", "{}: step {} failed: {}", st.where(), step_id, message);
  // Every rank of a stage sees the same plan and fails the same way; one report per stage is enough.
  if (st.args.spec.tp_rank == 0 && st.results) {
    proto::step_result r;
    r.step_id = step_id;
    r.error = fmt::format("{}: {}", st.where(), message);
    self->send(st.results, std::move(r));
  }
}

void run_step(shard_pointer self, proto::stage_input& in) {
  auto& st = self->state;
  if (st.failed)
    return;
  const proto::step_plan& plan = *in.plan;
  const auto t_start = std::chrono::steady_clock::now();
  if (!st.model || !st.cache)
    return report_failure(self, plan.step_id, "a step arrived before the weights and the KV cache were ready");
  if (st.args.samples)
    st.samplers.apply(plan);
  for (const auto& copy : plan.block_copies) {
    if (copy.src < 0 || copy.src >= st.cache->n_blocks() || copy.dst < 0 || copy.dst >= st.cache->n_blocks())
      return report_failure(
          self, plan.step_id,
          fmt::format("block copy {} -> {} outside a cache of {} blocks", copy.src, copy.dst, st.cache->n_blocks()));
    st.cache->copy_block(copy.src, copy.dst);
  }
  model::forward_batch batch = to_forward_batch(plan);
  if (auto err = batch.validate(st.cache->block_size(), st.cache->n_blocks()); !err.empty())
    return report_failure(self, plan.step_id, err);
  const auto& cfg = st.model->config();
  if (st.prev_link) {
    try {
      st.prev_link->recv(plan.step_id, in.hidden, static_cast<size_t>(batch.n_tokens() * cfg.n_embd));
    } catch (const std::exception& e) {
      return report_failure(self, plan.step_id, e.what());
    }
  }
  if (!st.model->is_first_stage() && in.hidden.size() != static_cast<size_t>(batch.n_tokens() * cfg.n_embd))
    return report_failure(
        self, plan.step_id,
        fmt::format("{} hidden-state floats for {} tokens of {}", in.hidden.size(), batch.n_tokens(), cfg.n_embd));
  std::vector<float> out;
  try {
    out = st.model->forward(batch, *st.cache, in.hidden);
  } catch (const std::exception& e) {  // a collective that timed out or lost a peer
    return report_failure(self, plan.step_id, e.what());
  }
  if (!st.model->is_last_stage()) {
    if (!st.next_link) {
      self->send(st.args.next, proto::stage_input{std::move(in.plan), std::move(out)});
      return;
    }
    const uint64_t step_id = plan.step_id;
    self->send(st.args.next, proto::stage_input{std::move(in.plan), {}});
    try {
      st.next_link->send(step_id, out);
    } catch (const std::exception& e) {
      return report_failure(self, step_id, e.what());
    }
    return;
  }
  if (!st.args.samples)
    return;  // the other ranks of the last stage took part in the logits' all-gather; rank 0 samples
  const auto t_forward = std::chrono::steady_clock::now();
  proto::step_result result = st.samplers.sample(plan, out, cfg.n_vocab);
  result.forward_seconds = std::chrono::duration<double>(t_forward - t_start).count();
  result.sample_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_forward).count();
  if (!result.error.empty())
    return report_failure(self, plan.step_id, result.error);
  self->send(st.results, std::move(result));
}

proto::shard_actor::behavior_type shard_behavior(shard_pointer self, shard_args args) {
  self->state.args = std::move(args);
  return {
      [self](proto::stage_input& in) { run_step(self, in); },
      [self](proto::sampler_release& release) {
        auto& st = self->state;
        if (st.args.samples)
          st.samplers.release(release.request_ids);
        else if (st.args.spec.tp_rank == 0 && st.args.next)
          self->send(st.args.next, std::move(release));
      },
      [self](proto::load_atom) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        try {
          st.pool = std::make_unique<thread_pool>(std::max(1, st.args.n_threads));
          if (st.args.make_collective)
            st.comm = st.args.make_collective();
          else if (st.args.spec.tp_size > 1)
            st.comm = std::make_unique<comm::shared_memory_collective>(st.args.group, st.args.spec.tp_rank);
          else
            st.comm = std::make_unique<single_rank_collective>();
          if (st.args.make_prev_link)
            st.prev_link = st.args.make_prev_link();
          if (st.args.make_next_link)
            st.next_link = st.args.make_next_link();
          auto loaded = model::load_shard(st.args.model_dir, st.args.spec, st.args.load);
          st.model = std::make_unique<model::llama_model>(loaded.config, std::move(loaded.weights), st.args.spec,
                                                          *st.comm, *st.pool);
        } catch (const std::exception& e) {
          return proto::make_error(errc::load_failed, fmt::format("{}: {}", st.where(), e.what()));
        }
        return caf::ok_atom::value;
      },
      [self](proto::profile_atom, int32_t block_size, uint64_t budget) -> caf::result<proto::shard_profile> {
        auto& st = self->state;
        if (!st.model)
          return proto::make_error(errc::internal, st.where() + ": profiled before its weights were loaded");
        if (block_size < 1)
          return proto::make_error(errc::invalid_config,
                                   fmt::format("block_size must be at least 1, got {}", block_size));
        proto::shard_profile p;
        p.stage = st.args.stage;
        p.tp_rank = st.args.spec.tp_rank;
        p.layer_begin = st.model->shard().layer_begin;
        p.layer_end = st.model->shard().layer_end;
        p.weight_bytes = st.model->weight_bytes();
        p.bytes_per_block = st.model->cache_shape(block_size).bytes_per_block();
        p.n_blocks_fit = p.bytes_per_block == 0 ? 0 : static_cast<int64_t>(budget / p.bytes_per_block);
        return p;
      },
      [self](proto::init_cache_atom, proto::kv_cache_config cfg) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.model)
          return proto::make_error(errc::internal, st.where() + ": cache requested before its weights were loaded");
        try {
          st.cache = std::make_unique<model::kv_cache>(st.model->cache_shape(cfg.block_size), cfg.n_blocks);
        } catch (const std::bad_alloc&) {
          return proto::make_error(errc::invalid_config,
                                   fmt::format("{}: cannot allocate {} KV-cache blocks of {} bytes", st.where(),
                                               cfg.n_blocks, st.model->cache_shape(cfg.block_size).bytes_per_block()));
        }
        return caf::ok_atom::value;
      },
      [self](proto::connect_atom, proto::result_sink sink) -> caf::ok_atom {
        self->state.results = std::move(sink);
        return caf::ok_atom::value;
      },
  };
}

}  // namespace

proto::shard_actor spawn_shard(caf::actor_system& sys, shard_args args) {
  return sys.spawn<caf::detached>(shard_behavior, std::move(args));
}

}  // namespace actorllm::actors
