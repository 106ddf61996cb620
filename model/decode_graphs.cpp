// Capturing and replaying a shard's decode graphs.
#include "model/decode_graphs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace actorllm::model {
namespace {

// A view of `bytes` at `offset` bytes into `buf`, as `type` of `shape`.
tensor view(const tensor& buf, size_t offset, dtype type, tensor_shape shape) {
  tensor t;
  t.type = type;
  t.shape = shape;
  t.buf = buf.buf;
  t.offset = buf.offset + offset;
  return t;
}

// Puts the backend back to its eager scratch however the constructor leaves.
struct graph_scratch_scope {
  explicit graph_scratch_scope(backend& b) : be(b) { be.use_graph_scratch(true); }
  ~graph_scratch_scope() { be.use_graph_scratch(false); }
  graph_scratch_scope(const graph_scratch_scope&) = delete;
  graph_scratch_scope& operator=(const graph_scratch_scope&) = delete;
  backend& be;
};

}  // namespace

decode_graphs::decode_graphs(backend& be, llama_model& model, kv_cache& cache, std::vector<int32_t> sizes,
                             int64_t max_blocks_per_seq)
    : be_(be), model_(model), cache_(cache), sizes_(std::move(sizes)), max_blocks_(max_blocks_per_seq) {
  // Thrown, not asserted: the runner then goes on eagerly.
  if (sizes_.empty() || sizes_.front() < 1 || !std::is_sorted(sizes_.begin(), sizes_.end()))
    throw std::invalid_argument("decode_graphs: the sizes must be positive and ascending");
  if (max_blocks_ < 1)
    throw std::invalid_argument("decode_graphs: max_blocks_per_seq must be at least 1");
  if (!be_.supports_graphs())
    throw std::invalid_argument(fmt::format("decode_graphs: {} has no graphs", be_.describe()));
  if (!model_.graph_capable())
    throw std::invalid_argument("decode_graphs: the model is not graph-capable (stages, TP or MoE)");
  be_.synchronize();
  const size_t before = be_.memory_info().in_use;

  const int32_t largest = sizes_.back();
  const decode_graph_layout widest = decode_graph_layout::make(largest, max_blocks_);
  inputs_ = be_.alloc(dtype::i64, {static_cast<int64_t>(widest.bytes / sizeof(int64_t))});
  logits_ = be_.alloc(dtype::f32, {largest, model_.config().n_vocab});
  graphs_.reserve(sizes_.size());
  for (int32_t b : sizes_) {
    graph_size g;
    g.layout = decode_graph_layout::make(b, max_blocks_);
    g.in = inputs_for(g.layout);
    g.logits = logits_.slice_rows(0, b);
    graphs_.push_back(std::move(g));
  }
  model_.reserve_graph_activations(largest);

  {
    graph_scratch_scope scope{be_};
    // Warm-up: every size once, eagerly, on all-padding rows (no KV written), so that each op's graph scratch
    // reaches the size its capture will ask for (the attention plan, and so its workspace, differs by size).
    const forward_batch padding;
    for (graph_size& g : graphs_) {
      upload(g, padding);
      model_.forward_into(g.in, cache_, g.logits);
    }
    be_.synchronize();
    for (graph_size& g : graphs_) {
      // The buffer holds this size's layout while it is recorded (a backend that runs the ops as it records them
      // reads it; a CUDA capture runs nothing).
      upload(g, padding);
      const graph_size* size = &g;  // the recording may be kept (a backend that replays it): no loop reference
      g.graph = be_.capture_graph([this, size] { model_.forward_into(size->in, cache_, size->logits); });
    }
  }
  be_.synchronize();
  const size_t after = be_.memory_info().in_use;
  device_bytes_ = after > before ? after - before : 0;
}

decode_graphs::~decode_graphs() = default;

step_inputs decode_graphs::inputs_for(const decode_graph_layout& l) const {
  step_inputs in;
  in.n_tokens = l.batch;
  in.n_sample = l.batch;
  in.tokens = view(inputs_, l.tokens, dtype::i32, {l.batch});
  in.sample_rows = view(inputs_, l.sample_rows, dtype::i32, {l.batch});
  attention_batch& a = in.attn;
  a.n_tokens = l.batch;
  a.n_seqs = l.batch;
  a.positions = view(inputs_, l.positions, dtype::i32, {l.batch});
  a.slots = view(inputs_, l.slots, dtype::i64, {l.batch});
  a.seqs = view(inputs_, l.seqs, dtype::i32, {l.batch, 4});
  a.block_tables = view(inputs_, l.block_tables, dtype::i32, {l.batch * l.max_blocks_per_seq});
  // What the attention plan reads on the host: every row full width, so the recorded plan holds for any context.
  a.host_seqs = decode_graph_seqs(l);
  a.host_block_tables.assign(static_cast<size_t>(l.batch * l.max_blocks_per_seq), 0);
  in.local_rows = l.batch;  // one rank: every row is its own
  in.local_count = l.batch;
  in.local_tokens = in.tokens;
  in.local_positions = a.positions;
  return in;
}

void decode_graphs::upload(graph_size& g, const forward_batch& batch) {
  pack_decode_inputs(batch, cache_.block_size(), g.layout, host_);
  be_.upload(inputs_, host_.data(), g.layout.bytes);  // the step's one host-to-device copy
  // A backend in host memory walks the host copy of the block tables (attention_batch's contract); a device backend
  // reads only its size, fixed at capture.
  if (inputs_.where().kind == device_kind::cpu)
    std::memcpy(g.in.attn.host_block_tables.data(), host_.data() + g.layout.block_tables,
                g.in.attn.host_block_tables.size() * sizeof(int32_t));
}

graph_ineligible decode_graphs::eligibility(const forward_batch& batch) const {
  return graph_eligibility(batch, sizes_, max_blocks_);
}

tensor decode_graphs::replay(const forward_batch& batch) {
  if (const graph_ineligible why = eligibility(batch); why != graph_ineligible::none)
    throw std::invalid_argument(fmt::format("decode_graphs::replay: {}", describe(why)));
  const int32_t size = padded_graph_size(sizes_, batch.n_tokens());
  const auto it = std::find(sizes_.begin(), sizes_.end(), size);
  graph_size& g = graphs_[static_cast<size_t>(it - sizes_.begin())];
  upload(g, batch);
  g.graph->replay();
  return g.logits.slice_rows(0, batch.n_tokens());
}

}  // namespace actorllm::model
