// A CPU backend that "captures graphs" the way cuda_backend does, for testing the decode-graph machinery without a
// GPU: capture_graph runs nothing and keeps the recording closure, replay runs it again. Like a CUDA capture, it
// refuses (std::logic_error) any allocation, host copy, wait or sampling while recording or replaying, so a forward
// that would not be capturable on the GPU fails here too. What it cannot show: that CUDA records the same work (the
// host decisions inside the closure are re-made at each replay, where a CUDA graph keeps those of its capture; the
// decode graphs make them from the same constant inputs, so they agree). Header-only.
#pragma once

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace actorllm::test {

/// cpu_backend behind the backend interface, with graphs that replay their recording closure.
class recording_graph_backend final : public backend {
 public:
  explicit recording_graph_backend(int n_threads = 1) : inner_(n_threads) {}

  int captures = 0;           ///< graphs captured
  int replays = 0;            ///< graphs replayed
  int uploads = 0;            ///< upload calls (a decode replay makes exactly one)
  int graph_scratch_on = 0;   ///< use_graph_scratch(true) calls
  int graph_scratch_off = 0;  ///< use_graph_scratch(false) calls
  /// What matmul_input_type answers, when set (a device backend's rule, for the model's choice of activation types;
  /// the CPU kernels underneath still take f32 only, so a forward must not run with a rule that names bf16).
  std::function<dtype(const tensor&)> matmul_input_rule;

  device where() const override { return inner_.where(); }
  std::string describe() const override { return "recording graphs over " + inner_.describe(); }
  device_memory memory_info() override { return inner_.memory_info(); }
  void reset_peak_memory() override { inner_.reset_peak_memory(); }

  tensor alloc(dtype type, tensor_shape shape) override {
    guard("alloc");
    return inner_.alloc(type, shape);
  }
  tensor alloc_kv_cache(dtype type, tensor_shape shape) override {
    guard("alloc_kv_cache");
    return inner_.alloc_kv_cache(type, shape);
  }
  bool kv_heads_outer() const override { return inner_.kv_heads_outer(); }
  tensor import_host(tensor host) override {
    guard("import_host");
    return inner_.import_host(std::move(host));
  }
  tensor import_linear_weight(tensor host) override {
    guard("import_linear_weight");
    return inner_.import_linear_weight(std::move(host));
  }
  void upload(const tensor& dst, const void* src, size_t bytes) override {
    guard("upload");
    ++uploads;
    inner_.upload(dst, src, bytes);
  }
  void download(const tensor& src, void* dst, size_t bytes) override {
    guard("download");
    inner_.download(src, dst, bytes);
  }
  void copy(const tensor& src, const tensor& dst) override { inner_.copy(src, dst); }
  void synchronize() override {
    guard("synchronize");
    inner_.synchronize();
  }

  void embedding(const tensor& ids, const tensor& table, int64_t row_begin, const tensor& out) override {
    inner_.embedding(ids, table, row_begin, out);
  }
  dtype matmul_input_type(const tensor& w) const override {
    return matmul_input_rule ? matmul_input_rule(w) : inner_.matmul_input_type(w);
  }
  void rms_norm(const tensor& x, const tensor& weight, float eps, const tensor& out) override {
    inner_.rms_norm(x, weight, eps, out);
  }
  void add_rms_norm(const tensor& residual, const tensor& delta, const tensor& weight, float eps,
                    const tensor& out) override {
    inner_.add_rms_norm(residual, delta, weight, eps, out);
  }
  void matmul(const tensor& x, const tensor& w, const tensor& bias, const tensor& y) override {
    inner_.matmul(x, w, bias, y);
  }
  void matmul_group(const tensor& x, std::span<const linear_out> outs) override { inner_.matmul_group(x, outs); }
  void matmul_silu_gate(const tensor& x, const tensor& w_gate, const tensor& w_up, const tensor& up,
                        const tensor& out) override {
    inner_.matmul_silu_gate(x, w_gate, w_up, up, out);
  }
  void matmul_silu_stacked(const tensor& x, const tensor& gate_up, const tensor& wide, const tensor& out) override {
    inner_.matmul_silu_stacked(x, gate_up, wide, out);
  }
  rope_table make_rope_table(const rope_config& cfg) override {
    guard("make_rope_table");
    return inner_.make_rope_table(cfg);
  }
  void rope(const rope_table& table, const tensor& positions, const tensor& q, const tensor& k, const tensor& q_norm,
            const tensor& k_norm, float eps) override {
    inner_.rope(table, positions, q, k, q_norm, k_norm, eps);
  }
  void write_kv(const kv_layer& cache, const tensor& k, const tensor& v, const attention_batch& batch) override {
    inner_.write_kv(cache, k, v, batch);
  }
  void paged_attention(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                       int64_t window, const tensor& out) override {
    inner_.paged_attention(q, batch, cache, scale, window, out);
  }
  void paged_attention_partial(const tensor& q, const attention_batch& batch, const kv_layer& cache, float scale,
                               int64_t window, const tensor& out, const tensor& lse) override {
    inner_.paged_attention_partial(q, batch, cache, scale, window, out, lse);
  }
  void merge_attention_partials(const tensor& parts, const tensor& lses, int64_t n_parts, int64_t head_begin,
                                const tensor& out) override {
    inner_.merge_attention_partials(parts, lses, n_parts, head_begin, out);
  }
  void silu_mul(const tensor& gate, const tensor& up, const tensor& out) override { inner_.silu_mul(gate, up, out); }
  void silu_mul_stacked(const tensor& gate_up, const tensor& out) override { inner_.silu_mul_stacked(gate_up, out); }
  void add(const tensor& a, const tensor& b, const tensor& out) override { inner_.add(a, b, out); }
  void gather_rows(const tensor& x, const tensor& rows, const tensor& out) override {
    inner_.gather_rows(x, rows, out);
  }
  void split_columns(const tensor& src, std::span<const tensor> dsts) override { inner_.split_columns(src, dsts); }
  void copy_columns(const tensor& src, int64_t src_col, const tensor& dst, int64_t dst_col, int64_t n_cols) override {
    inner_.copy_columns(src, src_col, dst, dst_col, n_cols);
  }
  void lora_add(const tensor& x, const tensor& a, const tensor& b, const tensor& row_slots, const tensor& shrunk,
                const tensor& y) override {
    inner_.lora_add(x, a, b, row_slots, shrunk, y);
  }
  void sample(const tensor& logits, std::span<const ops::sample_row> rows, std::span<ops::sample_result> out) override {
    guard("sample");
    inner_.sample(logits, rows, out);
  }

  bool supports_graphs() const override { return true; }
  size_t graph_reserve_bytes() const override { return 1000; }  // a marker the memory tests can see
  void use_graph_scratch(bool on) override {
    guard("use_graph_scratch");
    ++(on ? graph_scratch_on : graph_scratch_off);
  }
  std::unique_ptr<op_graph> capture_graph(const std::function<void()>& record) override {
    guard("capture_graph");
    ++captures;
    auto g = std::make_unique<recorded>(*this, record);
    g->run();  // "records" by running under the capture's rules (a CUDA capture runs nothing)
    return g;
  }

 private:
  // A "graph": the recording closure, run again by each replay under the same rules as the capture.
  class recorded final : public op_graph {
   public:
    recorded(recording_graph_backend& be, std::function<void()> record) : be_(be), record_(std::move(record)) {}
    void replay() override {
      ++be_.replays;
      run();
    }
    void run() {
      be_.inside_ = true;
      try {
        record_();
      } catch (...) {
        be_.inside_ = false;
        throw;
      }
      be_.inside_ = false;
    }

   private:
    recording_graph_backend& be_;
    std::function<void()> record_;
  };

  void guard(const char* op) const {
    if (inside_)
      throw std::logic_error(std::string{"graph replay: "} + op + " cannot be recorded into a graph");
  }

  cpu::cpu_backend inner_;
  bool inside_ = false;
};

}  // namespace actorllm::test
