// The messages between an engine and its worker processes (executors `mp` and `cluster`): a worker says hello to
// the engine's worker registry, the engine hands it a shard to host, and the registry doubles as the key/value
// store through which the data plane (Gloo) of the shards meets (DESIGN.md §2: rendezvous over the control plane).
#pragma once

#include "actorllm/proto/atoms.hpp"
#include "actorllm/proto/interfaces.hpp"
#include "actorllm/proto/sinks.hpp"
#include "comm/check/check_round.hpp"

#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::proto {

/// worker: host a shard. registry: a worker announces itself.
using spawn_shard_atom = caf::atom_constant<caf::atom("spawn_sh")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
/// registry: the rendezvous store.
using store_set_atom = caf::atom_constant<caf::atom("store_set")>;
using store_get_atom = caf::atom_constant<caf::atom("store_get")>;
/// registry: the store closes (its group failed): every get waiting and every later one is answered with an error.
using store_close_atom = caf::atom_constant<caf::atom("store_cls")>;
/// liveness probe answered by every worker.
using ping_atom = caf::atom_constant<caf::atom("ping")>;

/// A rendezvous store: what the shards' data plane meets through (the worker registry is one; a lockstep set's
/// expert-parallel group has one of its own, in the engine, shared by the replicas' workers).
using rendezvous_store_actor = caf::typed_actor<
    /// Stores a value (bytes) under a key.
    caf::replies_to<store_set_atom, std::string, std::string>::with<caf::ok_atom>,
    /// Replies with the value once the key exists (waits for a set).
    caf::replies_to<store_get_atom, std::string>::with<std::string>>;

/// One shard, described by value so it crosses processes: what every executor spawns a shard from
/// (actors::make_shard_assignment). A worker process builds the shard's collectives itself (Gloo over
/// `data_plane_host`, rendezvous through the registry's store); the uni executor hands it shared-memory groups.
struct shard_assignment {
  std::string model_dir;
  /// engine_config::tokenizer (else the model's directory), absolute: the sampler shard builds structured outputs'
  /// token masks over its vocabulary.
  std::string tokenizer;
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  int64_t layer_begin = 0;
  int64_t layer_end = 0;
  int32_t stage = 0;
  int32_t pp_size = 1;
  bool expert_parallel = false;  ///< engine_config::enable_expert_parallel
  /// engine_config::enable_eplb and its eplb settings (model::expert_balancing): redundant expert slots and how
  /// often they are rearranged.
  bool eplb = false;
  int32_t eplb_redundant = 0;
  int32_t eplb_window = 1000;
  int32_t eplb_interval = 3000;
  bool eplb_log = false;
  int32_t dcp_size = 1;        ///< engine_config::decode_context_parallel_size
  int32_t dcp_interleave = 1;  ///< engine_config::dcp_kv_cache_interleave_size
  int32_t pcp_size = 1;        ///< engine_config::prefill_context_parallel_size
  int32_t pcp_rank = 0;        ///< which copy of the stage's TP group (its collective spans tp × pcp ranks)
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string quantization;    ///< engine_config::quantization
  std::string device = "cpu";  ///< engine_config::device; the worker refuses one its build cannot run
  uint64_t seed = 0;
  int32_t n_threads = 1;
  /// The node-wide rank of the replica's first shard (shard_args::device_offset): replicas of one engine on one
  /// node take distinct GPUs. 0 where the worker sees only its own device (cluster: CUDA_VISIBLE_DEVICES).
  int32_t device_offset = 0;
  int32_t dp_rank = 0;  ///< the data-parallel replica the shard belongs to (logs)
  int32_t dp_size = 1;  ///< the engine's data-parallel replicas
  /// Lockstep expert parallelism: the shard joins the EP group over every replica's TP ranks at rank
  /// dp_rank × tp + tp rank (model::shard_spec::ep_rank).
  bool lockstep = false;
  /// Lockstep expert parallelism in worker processes: the store the EP group's ranks meet through (every replica's
  /// workers, so not their replica's registry) and the keys of this generation of the set in it. Null in process
  /// (the uni executor hands the shard a shared-memory group).
  rendezvous_store_actor expert_store;
  std::string expert_prefix;
  bool samples = false;
  bool enforce_eager = false;           ///< engine_config::enforce_eager: no decode graphs
  std::string kv_cache_dtype = "auto";  ///< engine_config::kv_cache_dtype (vLLM's spelling)
  int32_t max_num_seqs = 0;             ///< engine_config::max_num_seqs: the largest decode graph
  int32_t max_model_len = 0;            ///< the replica's context limit: the decode graphs' block-table width
  int32_t max_loras = 0;                ///< engine_config::max_loras when enable_lora, else 0 (LoRA off)
  int32_t max_lora_rank = 0;            ///< engine_config::max_lora_rank
  int32_t max_cpu_loras = 0;            ///< engine_config::max_cpu_loras
  shard_link next;                      ///< the same tp rank of the next stage; null on the last stage
  std::string data_plane_host;          ///< the address this worker's Gloo device binds (ACTORLLM_HOST_IP)
  std::string rendezvous_prefix;        ///< keys of this replica generation in the store (a restart uses a new one)
  int64_t collective_timeout_ms = 30000;

  friend bool operator==(const shard_assignment&, const shard_assignment&) = default;
};

/// CAF inspection of shard_assignment.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_assignment& x) {
  return f(caf::meta::type_name("shard_assignment"), x.model_dir, x.tokenizer, x.tp_rank, x.tp_size, x.layer_begin,
           x.layer_end, x.stage, x.pp_size, x.expert_parallel, x.eplb, x.eplb_redundant, x.eplb_window, x.eplb_interval,
           x.eplb_log, x.dcp_size, x.dcp_interleave, x.pcp_size, x.pcp_rank, x.load_format, x.dtype, x.quantization,
           x.device, x.seed, x.n_threads, x.device_offset, x.dp_rank, x.dp_size, x.lockstep, x.expert_store,
           x.expert_prefix, x.samples, x.enforce_eager, x.kv_cache_dtype, x.max_num_seqs, x.max_model_len, x.max_loras,
           x.max_lora_rank, x.max_cpu_loras, x.next, x.data_plane_host, x.rendezvous_prefix, x.collective_timeout_ms);
}

/// worker: run the communication check (`actorllm check`).
using comm_check_atom = caf::atom_constant<caf::atom("comm_check")>;

/// `actorllm check`'s rounds (comm/check/check_round.hpp), with their CAF inspection here (ADL: namespace comm).
using comm_check_request = comm::comm_check_request;
using comm_pair_result = comm::comm_pair_result;
using comm_check_result = comm::comm_check_result;

}  // namespace actorllm::proto

namespace actorllm::comm {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, comm_check_request& x) {
  return f(caf::meta::type_name("comm_check_request"), x.rank, x.world, x.group_name, x.small_floats, x.large_floats,
           x.iterations, x.timeout_ms, x.transport, x.device);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, comm_pair_result& x) {
  return f(caf::meta::type_name("comm_pair_result"), x.peer, x.ok, x.latency_us, x.bandwidth_gbs, x.error);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, comm_check_result& x) {
  return f(caf::meta::type_name("comm_check_result"), x.rank, x.host, x.transport, x.all_reduce_ok,
           x.all_reduce_latency_us, x.all_reduce_bus_gbs, x.pairs, x.error, x.skipped);
}

}  // namespace actorllm::comm

namespace actorllm::proto {

/// A worker process: hosts shards on request and answers liveness probes.
using worker_actor = caf::typed_actor<
    /// Spawns the shard locally and replies with its handle (the engine then drives it like a local one).
    caf::replies_to<spawn_shard_atom, shard_assignment>::with<shard_actor>,
    /// Liveness: replies with the worker's index.
    caf::replies_to<ping_atom>::with<int32_t>,
    /// Joins the check's group with the other workers and measures (blocks a thread of its own, not CAF's).
    caf::replies_to<comm_check_atom, comm_check_request>::with<comm_check_result>>;

/// How a worker introduces itself to the registry.
struct worker_hello {
  int32_t index = 0;  ///< which worker the engine started (the --worker-index it was given)
  std::string token;  ///< the engine's secret for this generation of workers
  int32_t pid = 0;
  std::string host;  ///< the host name it runs on
  worker_actor worker;

  friend bool operator==(const worker_hello&, const worker_hello&) = default;
};

/// CAF inspection of worker_hello.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_hello& x) {
  return f(caf::meta::type_name("worker_hello"), x.index, x.token, x.pid, x.host, x.worker);
}

/// The engine's worker registry: where workers register, and the rendezvous store of their data plane.
using worker_registry_actor = caf::typed_actor<
    /// A worker announces itself; refused (an error) with a wrong token or an unknown index.
    caf::replies_to<register_atom, worker_hello>::with<caf::ok_atom>,
    /// Stores a value (bytes) under a key.
    caf::replies_to<store_set_atom, std::string, std::string>::with<caf::ok_atom>,
    /// Replies with the value once the key exists (waits for a set).
    caf::replies_to<store_get_atom, std::string>::with<std::string>,
    /// Closes the store with a reason: waiting and later gets fail with it (a lockstep set that could not be built:
    /// the shards of its other replicas stop waiting for ranks that will never come).
    caf::reacts_to<store_close_atom, std::string>>;

}  // namespace actorllm::proto
