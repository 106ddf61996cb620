// The shard actor: a thin shell around model_runner.
#include "actors/runtime/shard_actor.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/error.hpp"
#include "comm/collective.hpp"
#include "kernels/backend.hpp"
#include "kernels/dtype.hpp"
#include "kernels/kv_cache_dtype.hpp"
#include "model/kv_cache_scales.hpp"
#include "model/model_source.hpp"
#include "runner/model_runner.hpp"
#include "runner/step_inbox.hpp"
#include "util/log.hpp"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <fmt/format.h>

#include <unistd.h>

namespace actorllm::actors {

namespace {

struct shard_state {
  shard_args args;
  std::unique_ptr<activation_link> prev_link;
  std::unique_ptr<activation_link> next_link;
  std::unique_ptr<runner::model_runner> runner;
  proto::result_sink results;
  runner::step_inbox inbox;  // plans from the scheduler and the previous stage's handoffs, paired by step
  bool failed = false;       // once a step failed, later steps are dropped: the replica is unusable

  std::string where() const {
    return fmt::format("stage {} rank {} (layers {}-{})", args.assignment.stage, args.spec.tp_rank,
                       args.spec.layer_begin, args.spec.layer_end - 1);
  }
};

using shard_pointer = proto::shard_actor::stateful_pointer<shard_state>;

// This machine's name: shards on different nodes with equal GPU indices have different GPUs.
std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0)
    return "localhost";
  return name;
}

void report_failure(shard_pointer self, uint64_t step_id, std::string message) {
  auto& st = self->state;
  st.failed = true;
  log::error("shard", "{}: step {} failed: {}", st.where(), step_id, message);
  // Lockstep expert parallelism: this replica's other TP ranks and every rank of the other replicas may wait in a
  // collective this shard will not reach. Aborting the groups fails their steps at once (and their replicas with
  // them, which restarts the set) instead of leaving them blocked. A no-op when they were aborted already.
  if (st.args.expert_group) {
    const std::string why = fmt::format("replica {} {} failed: {}", st.args.spec.dp_rank, st.where(), message);
    st.args.expert_group->abort(why);
    if (st.args.group && st.args.group->abortable())
      st.args.group->abort(why);
  }
  // Every rank of a stage sees the same plan and fails the same way (under lockstep EP, a rank that fails alone
  // has aborted the groups above, so rank 0 fails too); one report per stage is enough.
  if (st.args.spec.tp_rank == 0 && st.results) {
    proto::step_result r;
    r.step_id = step_id;
    r.error = fmt::format("{}: {}", st.where(), message);
    self->send(st.results, std::move(r));
  }
}

// Whether this shard's steps wait for a stage_handoff from the previous stage: its hidden states when they come as a
// message (in-process), and on tp rank 0 of an MoE model the expert totals (which ride a message in every executor).
bool expects_handoff(const shard_state& st) {
  if (st.args.assignment.stage == 0)
    return false;
  return !st.prev_link || (st.args.spec.tp_rank == 0 && st.runner && st.runner->model().config().n_expert > 0);
}

void run_step(shard_pointer self, runner::ready_step& in) {
  auto& st = self->state;
  const proto::step_plan& plan = *in.plan;
  const uint64_t step_id = plan.step_id;
  if (plan.idle) {  // lockstep expert parallelism: serve this shard's experts to the other replicas' step
    std::string error;
    try {
      error = st.runner->run_idle();
    } catch (const std::exception& e) {  // the EP group was aborted: a peer replica failed
      error = e.what();
    }
    if (!error.empty())
      report_failure(self, step_id, "idle step: " + error);
    return;
  }
  runner::step_output out;
  try {
    tensor hidden = std::move(in.handoff.hidden);
    if (st.prev_link) {
      const auto n_tokens = static_cast<int64_t>(plan.tokens.size());
      hidden = st.prev_link->takes_device_tensors() ? st.runner->device_hidden_input(n_tokens)
                                                    : st.runner->hidden_input(n_tokens);
      st.prev_link->recv(step_id, hidden);
    }
    out = st.runner->run(plan, hidden);
    // A device link's transfers ran on the stream run() synchronised: one a watchdog aborted fails the step here.
    if (st.prev_link)
      st.prev_link->raise_if_broken();
    if (st.next_link)
      st.next_link->raise_if_broken();
  } catch (const std::exception& e) {  // a collective or link that timed out or lost a peer
    return report_failure(self, step_id, e.what());
  }
  if (!out.error.empty())
    return report_failure(self, step_id, out.error);
  // MoE: this stage's expert load joins the earlier stages' on its way to the sampler shard (tp rank 0's chain).
  std::vector<uint64_t> expert_tokens = std::move(in.handoff.expert_tokens);
  const std::vector<uint64_t> own = st.runner->model().expert_load();
  expert_tokens.resize(std::max(expert_tokens.size(), own.size()), 0);
  for (size_t e = 0; e < own.size(); ++e)
    expert_tokens[e] += own[e];
  if (!st.runner->model().is_last_stage()) {
    if (!st.next_link) {
      self->send(st.args.assignment.next,
                 proto::stage_handoff{step_id, std::move(out.hidden), std::move(expert_tokens)});
      return;
    }
    // The hidden states go over the data plane; only tp rank 0 of an MoE model has something for a message.
    if (st.args.spec.tp_rank == 0 && st.runner->model().config().n_expert > 0)
      self->send(st.args.assignment.next, proto::stage_handoff{step_id, {}, std::move(expert_tokens)});
    try {
      st.next_link->send(step_id, st.next_link->takes_device_tensors() ? out.hidden : st.runner->to_host(out.hidden));
    } catch (const std::exception& e) {
      return report_failure(self, step_id, e.what());
    }
    return;
  }
  if (!st.args.assignment.samples)
    return;
  if (!out.result.error.empty())
    return report_failure(self, step_id, out.result.error);
  out.result.expert_tokens = std::move(expert_tokens);
  if (const model::expert_balancer* b = st.runner->model().balancer())
    out.result.eplb = b->stats();
  const exchange_stats moved = st.runner->model().expert_exchange();
  out.result.ep_exchange_bytes = moved.bytes_sent + moved.bytes_received;
  self->send(st.results, std::move(out.result));
}

// Runs every step whose inputs are all in, in plan order.
void run_ready(shard_pointer self) {
  auto& st = self->state;
  while (!st.failed) {
    if (!st.runner) {
      if (st.inbox.n_plans() == 0)
        return;
      auto head = st.inbox.next();
      return report_failure(self, head ? head->plan->step_id : 0,
                            "a step arrived before the weights and the KV cache were ready");
    }
    auto step = st.inbox.next();
    if (!step)
      return;
    run_step(self, *step);
  }
}

proto::shard_actor::behavior_type shard_behavior(shard_pointer self, shard_args args) {
  self->state.args = std::move(args);
  return {
      [self](proto::shared_plan& p) {
        self->state.inbox.push(std::move(p.plan));
        run_ready(self);
      },
      [self](proto::stage_handoff& h) {
        self->state.inbox.push(std::move(h));
        run_ready(self);
      },
      [self](proto::load_atom) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        try {
          // GPUs are shared out round robin by global rank (vLLM gives each worker its own device the same way);
          // a data-parallel replica's ranks start after those of the replicas before it on this node.
          const int rank = st.args.assignment.device_offset + st.args.assignment.stage * st.args.spec.group_size() +
                           st.args.spec.group_rank();
          const device where =
              device_for_rank(st.args.device, rank, st.args.device == device_kind::cpu ? 0 : visible_gpu_count());
          auto be = make_backend(where, std::max(1, st.args.assignment.n_threads));
          if (where.kind != device_kind::cpu)
            log::info("shard", "{}: runs on {}", st.where(), be->describe());
          std::unique_ptr<tp_collective> comm;
          if (st.args.make_collective)
            comm = st.args.make_collective(*be);
          else if (st.args.spec.group_size() > 1)
            comm = std::make_unique<comm::shared_memory_collective>(st.args.group, st.args.spec.group_rank());
          else
            comm = std::make_unique<single_rank_collective>();
          if (st.args.make_prev_link)
            st.prev_link = st.args.make_prev_link(*be);
          if (st.args.make_next_link)
            st.next_link = st.args.make_next_link(*be);
          std::unique_ptr<tp_collective> expert_comm;
          if (st.args.make_expert_collective)
            expert_comm = st.args.make_expert_collective(*be);
          else if (st.args.expert_group)
            expert_comm =
                std::make_unique<comm::shared_memory_collective>(st.args.expert_group, st.args.spec.ep_rank());
          auto loaded = model::load_shard(st.args.assignment.model_dir, st.args.spec, st.args.load);
          st.runner = std::make_unique<runner::model_runner>(
              std::move(be), std::move(comm), loaded.config, std::move(loaded.weights), st.args.spec,
              st.args.assignment.samples, st.args.assignment.tokenizer, std::move(expert_comm));
          st.runner->set_graph_options(shard_graph_options(st.args.assignment));
          // auto: the model's dtype as loaded (--dtype, else the checkpoint's torch_dtype), as vLLM resolves it.
          const dtype kv_type = resolve_kv_cache_dtype(
              st.args.kv_dtype, st.args.load.weight_dtype.value_or(st.runner->model().config().torch_dtype));
          if (std::string why = kv_cache_dtype_unsupported(kv_type, st.args.device); !why.empty())
            return proto::make_error(errc::invalid_config, fmt::format("{}: {}", st.where(), why));
          st.runner->set_kv_cache_dtype(kv_type);
          if (kv_type == dtype::fp8_e4m3 && st.args.load.format != model::load_format::dummy)
            st.runner->set_kv_cache_scales(model::read_kv_cache_scales(st.args.assignment.model_dir,
                                                                       st.runner->model().shard().layer_begin,
                                                                       st.runner->model().shard().layer_end));
          if (st.args.lora.max_loras > 0)
            st.runner->enable_lora(st.args.lora);
          st.inbox.expect_handoff(expects_handoff(st));
        } catch (const std::exception& e) {
          return proto::make_error(errc::load_failed, fmt::format("{}: {}", st.where(), e.what()));
        }
        return caf::ok_atom::value;
      },
      [self](proto::profile_atom, int32_t block_size, uint64_t budget,
             int32_t profile_tokens) -> caf::result<proto::shard_profile> {
        auto& st = self->state;
        if (!st.runner)
          return proto::make_error(errc::internal, st.where() + ": profiled before its weights were loaded");
        if (block_size < 1)
          return proto::make_error(errc::invalid_config,
                                   fmt::format("block_size must be at least 1, got {}", block_size));
        const model::llama_model& m = st.runner->model();
        proto::shard_profile p;
        p.stage = st.args.assignment.stage;
        p.tp_rank = st.args.spec.tp_rank;
        p.layer_begin = m.shard().layer_begin;
        p.layer_end = m.shard().layer_end;
        p.weight_bytes = m.weight_bytes();
        p.bytes_per_block = m.cache_shape(block_size).bytes_per_block();
        p.kv_cache_dtype = std::string{kv_cache_dtype_name(m.kv_cache_dtype())};
        p.n_blocks_fit = p.bytes_per_block == 0 ? 0 : static_cast<int64_t>(budget / p.bytes_per_block);
        backend& be = st.runner->device_backend();
        if (be.memory_info().total > 0) {  // a GPU: profile a forward, report the memory it leaves
          size_t non_kv_peak = 0;
          try {
            non_kv_peak = st.runner->profile_forward(std::max(profile_tokens, 1), block_size);
          } catch (const std::bad_alloc&) {
            return proto::make_error(errc::invalid_config,
                                     fmt::format("{}: a profile forward of {} tokens does not fit on {}", st.where(),
                                                 profile_tokens, be.describe()));
          } catch (const std::exception& e) {
            return proto::make_error(errc::load_failed, fmt::format("{}: profile forward: {}", st.where(), e.what()));
          }
          const device_memory mem = be.memory_info();
          p.device = fmt::format("{}/{}", host_name(), be.where().to_string());
          p.device_total = mem.total;
          p.device_used = mem.total - mem.free;
          p.in_use = mem.in_use;
          p.peak_in_use = non_kv_peak;
        }
        return p;
      },
      [self](proto::init_cache_atom, proto::kv_cache_config cfg) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        if (!st.runner)
          return proto::make_error(errc::internal, st.where() + ": cache requested before its weights were loaded");
        try {
          st.runner->allocate_cache(cfg.block_size, cfg.n_blocks);
        } catch (const std::bad_alloc&) {
          return proto::make_error(
              errc::invalid_config,
              fmt::format("{}: cannot allocate {} KV-cache blocks of {} bytes", st.where(), cfg.n_blocks,
                          st.runner->model().cache_shape(cfg.block_size).bytes_per_block()));
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

shard_args shard_args_of(proto::shard_assignment a) {
  shard_args args;
  args.spec = model::shard_spec{a.tp_rank, a.tp_size, a.layer_begin, a.layer_end};
  args.spec.expert_parallel = a.expert_parallel;
  args.spec.eplb = model::expert_balancing{a.eplb, a.eplb_redundant, a.eplb_window, a.eplb_interval, a.eplb_log};
  args.spec.dcp_size = a.dcp_size;
  args.spec.dcp_interleave = a.dcp_interleave;
  args.spec.pcp_size = a.pcp_size;
  args.spec.pcp_rank = a.pcp_rank;
  if (a.lockstep) {
    args.spec.dp_rank = a.dp_rank;
    args.spec.dp_size = a.dp_size;
  }
  const auto format = model::parse_load_format(a.load_format);
  if (!format)
    throw actorllm::error{errc::invalid_config,
                          fmt::format("load_format: '{}' is not one of auto, safetensors, dummy", a.load_format)};
  args.load.format = *format;
  if (a.dtype != "auto") {
    args.load.weight_dtype = parse_dtype(a.dtype);
    if (!args.load.weight_dtype)
      throw actorllm::error{errc::invalid_config,
                            fmt::format("dtype: '{}' is not one of auto, float32, float16, bfloat16", a.dtype)};
  }
  if (!a.quantization.empty())
    args.load.quantization = a.quantization;
  args.load.seed = a.seed;
  const device_choice chosen = resolve_device(a.device);
  if (!chosen.error.empty())
    throw actorllm::error{errc::invalid_config, chosen.error};
  if (std::string why = device_unusable_reason(chosen.kind); !why.empty())
    throw actorllm::error{errc::invalid_config, why};
  args.device = chosen.kind;
  args.lora = {a.max_loras, a.max_lora_rank, a.max_cpu_loras};
  std::string kv_error;
  const auto kv_dtype = parse_kv_cache_dtype(a.kv_cache_dtype, kv_error);
  if (!kv_dtype)
    throw actorllm::error{errc::invalid_config, kv_error};
  if (!kv_dtype->follows_model)  // auto is checked once the model's dtype is known (load_atom)
    if (std::string why = kv_cache_dtype_unsupported(kv_dtype->type, args.device); !why.empty())
      throw actorllm::error{errc::invalid_config, why};
  args.kv_dtype = *kv_dtype;
  args.assignment = std::move(a);
  return args;
}

runner::graph_options shard_graph_options(const proto::shard_assignment& a) {
  runner::graph_options o;
  o.enabled = !a.enforce_eager;
  o.max_num_seqs = a.max_num_seqs;
  o.max_model_len = a.max_model_len;
  return o;
}

proto::shard_actor spawn_shard(caf::actor_system& sys, shard_args args) {
  return sys.spawn<caf::detached>(shard_behavior, std::move(args));
}

}  // namespace actorllm::actors
