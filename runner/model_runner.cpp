// A shard's step pipeline.
#include "runner/model_runner.hpp"

#include "comm/host_staged_collective.hpp"
#include "model/kv_cache.hpp"
#include "util/log.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace actorllm::runner {

model_runner::model_runner(std::unique_ptr<backend> be, std::unique_ptr<tp_collective> comm,
                           const model::model_config& cfg, model::model_weights weights, const model::shard_spec& shard,
                           bool samples, std::string tokenizer, std::unique_ptr<tp_collective> expert_comm)
    : be_(std::move(be)),
      comm_(std::move(comm)),
      expert_comm_(std::move(expert_comm)),
      inputs_(*be_),
      samplers_(std::move(tokenizer)),
      samples_(samples) {
  // The host transports (threads, shared memory, Gloo) move host memory: a device backend's tensors are staged through
  // it. A device communicator (NCCL) takes them as they are.
  if (be_->where().kind != device_kind::cpu && comm_->size() > 1 && !comm_->takes_device_tensors())
    comm_ = std::make_unique<host_staged_collective>(std::move(comm_), *be_);
  model_ = std::make_unique<model::llama_model>(cfg, std::move(weights), shard, *comm_, *be_, expert_comm_.get());
  inputs_.set_row_split(model_->rows_of_copies());
}

std::string model_runner::graphs_disabled_reason() const {
  model::graph_setting s;
  s.enforce_eager = !graph_options_.enabled;
  s.device_graphs = be_->supports_graphs();
  s.tp_size = comm_->size();
  s.single_stage = model_->is_first_stage() && model_->is_last_stage();
  s.moe = model_->config().n_expert > 0;
  s.max_num_seqs = graph_options_.max_num_seqs;
  return model::graphs_disabled_reason(s);
}

namespace {

int64_t graph_max_blocks(const graph_options& o, const model::model_config& cfg, int64_t block_size) {
  const int64_t len = o.max_model_len > 0 ? o.max_model_len : cfg.max_position_embeddings;
  return std::max<int64_t>(1, (len + block_size - 1) / block_size);
}

}  // namespace

size_t model_runner::graph_memory_estimate(int64_t block_size) const {
  if (!graphs_disabled_reason().empty())
    return 0;
  const model::model_config& cfg = model_->config();
  model::decode_graph_dims d;  // one rank (graphs need tp 1): the model's own head counts
  d.n_embd = cfg.n_embd;
  d.n_head = cfg.n_head;
  d.n_head_kv = cfg.n_head_kv;
  d.head_dim = cfg.head_dim;
  d.q_dim = cfg.n_head * cfg.head_dim;
  d.kv_dim = cfg.n_head_kv * cfg.head_dim;
  d.n_ff = cfg.n_ff;
  d.n_vocab = cfg.n_vocab;
  d.block_size = block_size;
  d.max_blocks_per_seq = graph_max_blocks(graph_options_, cfg, block_size);
  return model::decode_graph_memory_for(model::decode_graph_sizes(graph_options_.max_num_seqs), d).total() +
         be_->graph_reserve_bytes();
}

void model_runner::allocate_cache(int64_t block_size, int64_t n_blocks) {
  graphs_.reset();  // they name the old cache
  cache_ = std::make_unique<model::kv_cache>(*be_, model_->cache_shape(block_size), n_blocks);
  for (size_t l = 0; l < kv_scales_.size() && static_cast<int64_t>(l) < cache_->shape().n_layer; ++l)
    cache_->set_scales(static_cast<int64_t>(l), kv_scales_[l].k, kv_scales_[l].v);
  if (const std::string why = graphs_disabled_reason(); !why.empty()) {
    if (graph_options_.enabled && be_->supports_graphs())
      log::info("shard", "decode steps run eagerly: {}", why);
    return;
  }
  const std::vector<int32_t> sizes = model::decode_graph_sizes(graph_options_.max_num_seqs);
  const int64_t max_blocks = graph_max_blocks(graph_options_, model_->config(), block_size);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    graphs_ = std::make_unique<model::decode_graphs>(*be_, *model_, *cache_, sizes, max_blocks);
  } catch (const std::exception& e) {
    graphs_.reset();
    log::warning("shard", "capturing decode graphs failed, decode steps run eagerly: {}", e.what());
    return;
  }
  log::info("shard", "captured {} decode graphs (batch sizes {}..{}) in {:.2f} s; they hold {:.1f} MiB", sizes.size(),
            sizes.front(), sizes.back(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            static_cast<double>(graphs_->device_bytes()) / (1 << 20));
}

size_t model_runner::profile_forward(int64_t n_tokens, int64_t block_size) {
  const int64_t n_blocks = (n_tokens + block_size - 1) / block_size;
  model::forward_batch batch;
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens), 0);
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b)
    table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  batch.add_sequence(tokens, 0, table, true);
  const size_t before = be_->memory_info().in_use;
  size_t peak = 0, cache_bytes = 0;
  {
    model::kv_cache scratch_cache{*be_, model_->cache_shape(block_size), n_blocks};
    cache_bytes = be_->memory_info().in_use - before;  // as the allocator rounded it
    tensor hidden;
    if (!model_->is_first_stage()) {
      hidden = be_->alloc(dtype::f32, {n_tokens, model_->config().n_embd});
      std::vector<float> zeros(static_cast<size_t>(hidden.numel()), 0.0f);
      be_->upload(hidden, zeros.data(), hidden.nbytes());
    }
    model::step_input_builder inputs{*be_, model_->rows_of_copies()};
    const model::step_inputs& in = inputs.prepare(batch, scratch_cache.shape());
    be_->reset_peak_memory();
    tensor out = model_->forward(in, scratch_cache, hidden);
    be_->synchronize();
    comm_->raise_if_broken();
    peak = be_->memory_info().peak_in_use;
  }
  // The decode graphs are captured after the cache is sized: their buffers are reserved now.
  return (peak > cache_bytes ? peak - cache_bytes : peak) + graph_memory_estimate(block_size);
}

tensor model_runner::hidden_input(int64_t n_tokens) {
  return make_host_tensor(dtype::f32, {n_tokens, model_->config().n_embd});
}

tensor model_runner::device_hidden_input(int64_t n_tokens) {
  return be_->alloc(dtype::f32, {n_tokens, model_->config().n_embd});
}

tensor model_runner::to_host(const tensor& t) {
  if (t.empty() || t.where().kind == device_kind::cpu)
    return t;
  tensor host = make_host_tensor(t.type, t.shape);
  be_->download(t, host.data(), t.nbytes());
  return host;
}

step_output model_runner::run(const engine::step_plan& plan, const tensor& hidden_in) {
  step_output out = run_queued(plan, hidden_in);
  be_->synchronize();  // a device backend's outputs (and its reads of hidden_in) are complete before they are handed on
  // A device communicator's collectives ran after they were queued: one its watchdog aborted (a peer gone) left
  // garbage in the outputs, and the step fails here instead of handing it on.
  comm_->raise_if_broken();
  return out;
}

std::string model_runner::run_idle() {
  if (!model_->serves_experts())
    return "an idle step reached a shard that serves no experts to other replicas";
  model_->idle_step();
  be_->synchronize();
  return {};
}

step_output model_runner::run_queued(const engine::step_plan& plan, const tensor& hidden_arg) {
  step_output out;
  tensor hidden_in = hidden_arg;
  if (!hidden_in.empty() && hidden_in.where() != be_->where()) {  // from the host (a link) or another GPU
    tensor local = be_->alloc(hidden_in.type, hidden_in.shape);
    be_->copy(hidden_in, local);
    hidden_in = std::move(local);
  }
  const auto t_start = std::chrono::steady_clock::now();
  if (!cache_) {
    out.error = "a step arrived before the weights and the KV cache were ready";
    return out;
  }
  if (samples_)
    samplers_.apply(plan);

  if (auto err = tables_.apply(plan); !err.empty()) {
    out.error = std::move(err);
    return out;
  }
  const model::forward_batch& batch = tables_.batch();
  if (auto err = batch.validate(cache_->shape().positions_per_block(), cache_->n_blocks()); !err.empty()) {
    out.error = std::move(err);
    return out;
  }
  const int64_t n_embd = model_->config().n_embd;
  if (!model_->is_first_stage() && (hidden_in.empty() || hidden_in.numel() != batch.n_tokens() * n_embd)) {
    out.error = fmt::format("{} hidden-state floats for {} tokens of {}", hidden_in.empty() ? 0 : hidden_in.numel(),
                            batch.n_tokens(), n_embd);
    return out;
  }

  std::vector<int32_t> lora_slots;  // each sequence's adapter slot; empty without LoRA
  if (model::lora_slots* lora = model_->lora()) {
    lora_sources_.clear();
    for (const engine::lora_ref& l : plan.loras)
      lora_sources_.push_back({l.id, l.path});
    try {
      lora_slots = lora->assign(batch, lora_sources_);
    } catch (const std::exception& e) {
      out.error = fmt::format("step {}: {}", plan.step_id, e.what());
      return out;
    }
  }
  const bool lora_rows = std::any_of(lora_slots.begin(), lora_slots.end(), [](int32_t s) { return s >= 0; });

  tensor produced;
  if (graphs_ && !lora_rows && graphs_->eligibility(batch) == model::graph_ineligible::none) {
    produced = graphs_->replay(batch);  // one upload of the packed inputs, one graph launch
    ++graph_replays_;
  } else {
    const model::step_inputs& in = inputs_.prepare(batch, cache_->shape(), lora_slots);
    produced = model_->forward(in, *cache_, hidden_in);
  }
  if (!model_->is_last_stage()) {
    out.hidden = std::move(produced);
    return out;
  }
  if (!samples_)
    return out;  // the other ranks of the last stage took part in the logits' all-gather; rank 0 samples
  const auto t_forward = std::chrono::steady_clock::now();
  out.result = samplers_.sample(plan, *be_, produced);
  out.result.forward_seconds = std::chrono::duration<double>(t_forward - t_start).count();
  out.result.sample_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_forward).count();
  return out;
}

}  // namespace actorllm::runner
