// The SwiGLU MLP as one decode call: gate|up's units and down's half panels in one list of grains, where a half of
// down waits for the gate|up outputs that are its inputs.
#include "kernels/cpu/swiglu_down.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_bf16.hpp"
#include "kernels/cpu/read_ahead.hpp"
#include "util/check.hpp"

namespace actorllm::cpu {

namespace {

constexpr int64_t panel_rows = 32;                // outputs per panel
constexpr int64_t k_step = 32;                    // inputs per vdpbf16ps step
constexpr int64_t min_grain = 8, max_grain = 32;  // units, as the decode matmuls split theirs

std::atomic<bool> fused_on{true};

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Word offset of panel p (k_pad inputs) in a packed weight.
int64_t panel_words(int64_t p, int64_t k_pad) { return p * (k_pad / 2) * panel_rows; }

// The decode call's work. Items: [0, n_units) gate|up units (a gate and an up panel of the same 32 outputs), then
// down's panels over the first half of its inputs, then over the second half. Grains never straddle those parts, nor
// the two halves of the units: a first-half down grain waits for the first half of the units, a second-half one for
// all of them (thread_pool::parallel_for_takeover's `after`). Claimed in order, down's first grains come after every
// unit was claimed, so on a quiet machine they rarely wait at all.
class swiglu_down_work final : public takeover_work {
 public:
  swiglu_down_work(int64_t n_tokens, const swiglu_down_weights& w, float* act)
      : w_(w),
        n_tokens_(n_tokens),
        k_in_(round_up(w.n_in, k_step)),
        ld_x_(k_in_ + k_step),  // one spare line a row, as matmul_bf16_dot lays rows out
        ld_a_(w.n_ff + k_step),
        n_units_(w.n_ff / panel_rows),
        n_panels_((w.n_out + panel_rows - 1) / panel_rows),
        act_(act) {
    xb_.resize(static_cast<size_t>(n_tokens * ld_x_));
    ab_.assign(static_cast<size_t>(n_tokens * ld_a_), 0);
    halves_.resize(static_cast<size_t>(2 * n_tokens * n_panels_ * panel_rows));
  }

  uint16_t* input() { return xb_.data(); }
  int64_t input_ld() const { return ld_x_; }
  int64_t k_in() const { return k_in_; }
  int64_t n_items() const { return n_units_ + 2 * n_panels_; }
  int64_t unit_bytes() const { return 2 * k_in_ * panel_rows * static_cast<int64_t>(sizeof(uint16_t)); }

  /// Grain bounds over the items (`guided`: the pool's split of them) and each grain's `after`.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> grains(std::vector<int64_t> guided) const {
    for (int64_t cut : {n_units_ / 2, n_units_, n_units_ + n_panels_})
      guided.push_back(cut);
    std::sort(guided.begin(), guided.end());
    guided.erase(std::unique(guided.begin(), guided.end()), guided.end());
    std::vector<int64_t> after(guided.size() - 1, 0);
    auto first_at = [&](int64_t item) {
      return static_cast<int64_t>(std::lower_bound(guided.begin(), guided.end(), item) - guided.begin());
    };
    const int64_t second_units = first_at(n_units_ / 2), first_down = first_at(n_units_),
                  second_down = first_at(n_units_ + n_panels_);
    for (int64_t g = first_down; g < static_cast<int64_t>(after.size()); ++g)
      after[static_cast<size_t>(g)] = g < second_down ? second_units : first_down;
    return {std::move(guided), std::move(after)};
  }

  size_t scratch_floats(int64_t n_items) const override {
    return static_cast<size_t>(n_items * 2 * n_tokens_ * panel_rows);
  }

  void compute(int64_t begin, int64_t end, float* scratch) const noexcept override {
    std::array<bf16_stream_tile, 2 * max_grain> tiles;
    const size_t n = grain_tiles(begin, end, scratch, tiles);
    bf16_stream_panels(n_tokens_, {tiles.data(), n});
  }

  void commit(int64_t begin, int64_t end, const float* scratch) const noexcept override {
    const size_t tile_floats = static_cast<size_t>(n_tokens_ * panel_rows);
    if (begin < n_units_) {  // silu(gate) * up to act, and rounded to bf16 as down's input
      for (int64_t u = begin; u < end; ++u) {
        const float* gate = scratch + static_cast<size_t>(2 * (u - begin)) * tile_floats;
        const float* up = gate + tile_floats;
        for (int64_t t = 0; t < n_tokens_; ++t) {
          float* a = act_ + t * w_.n_ff + u * panel_rows;
          silu_mul(gate + t * panel_rows, up + t * panel_rows, panel_rows, a);
          round_rows_to_bf16(a, 1, panel_rows, ab_.data() + t * ld_a_ + u * panel_rows, panel_rows, panel_rows);
        }
      }
      return;
    }
    for (int64_t i = begin; i < end; ++i) {  // a half's sums for its panel's outputs
      const int64_t half = (i - n_units_) / n_panels_, p = (i - n_units_) % n_panels_;
      const float* sums = scratch + static_cast<size_t>(i - begin) * tile_floats;
      for (int64_t t = 0; t < n_tokens_; ++t)
        std::memcpy(half_sums(half, t) + p * panel_rows, sums + t * panel_rows, panel_rows * sizeof(float));
    }
  }

  void idle(int thread_index, const std::function<bool()>& stop) const noexcept override {
    if (next_ != nullptr)
      read_ahead(*next_, thread_index, stop);
  }

  /// What this call's threads read first (each thread's first grain), for the call before it to prefetch.
  read_ahead_plan first_reads(const std::vector<int64_t>& bounds, int n_threads) const {
    read_ahead_plan plan;
    std::array<bf16_stream_tile, 2 * max_grain> tiles;
    for (size_t g = 0; g < std::min(static_cast<size_t>(n_threads), bounds.size() - 1); ++g) {
      const size_t n = grain_tiles(bounds[g], bounds[g + 1], nullptr, tiles);
      plan.threads.push_back(bf16_stream_heads(n_tokens_, {tiles.data(), n}, bf16_stream_read_ahead_bytes));
    }
    return plan;
  }

  /// The call that came after this one last time (thread_pool's idle time prefetches its start).
  void set_next(std::shared_ptr<const read_ahead_plan> next) { next_ = std::move(next); }

  /// y = first half's sums + second half's, once every grain is committed.
  void add_halves(float* y) const {
    for (int64_t t = 0; t < n_tokens_; ++t) {
      const float* first = half_sums(0, t);
      const float* second = half_sums(1, t);
      float* out = y + t * w_.n_out;
      for (int64_t o = 0; o < w_.n_out; ++o)
        out[o] = first[o] + second[o];
    }
  }

 private:
  float* half_sums(int64_t half, int64_t t) const {
    return halves_.data() + static_cast<size_t>((half * n_tokens_ + t) * n_panels_ * panel_rows);
  }

  // The tiles of items [begin, end), in the order compute() walks them, their sums to `scratch` (a gate|up unit's
  // gate tile, then its up tile).
  size_t grain_tiles(int64_t begin, int64_t end, float* scratch,
                     std::array<bf16_stream_tile, 2 * max_grain>& tiles) const {
    const auto* gate_up = reinterpret_cast<const uint32_t*>(w_.gate_up);
    const auto* down = reinterpret_cast<const uint32_t*>(w_.down);
    const int64_t tile_floats = n_tokens_ * panel_rows, half_k = w_.n_ff / 2;
    size_t n = 0;
    auto add = [&](const uint32_t* pairs, const uint16_t* xb, int64_t ld, int64_t k) {
      tiles[n] = {pairs, xb, ld, k, scratch == nullptr ? nullptr : scratch + static_cast<int64_t>(n) * tile_floats};
      ++n;
    };
    for (int64_t i = begin; i < end; ++i) {
      if (i < n_units_) {
        add(gate_up + panel_words(i, k_in_), xb_.data(), ld_x_, k_in_);
        add(gate_up + panel_words(n_units_ + i, k_in_), xb_.data(), ld_x_, k_in_);
        continue;
      }
      const int64_t half = (i - n_units_) / n_panels_, p = (i - n_units_) % n_panels_;
      add(down + panel_words(p, w_.n_ff) + half * (half_k / 2) * panel_rows, ab_.data() + half * half_k, ld_a_, half_k);
    }
    return n;
  }

  swiglu_down_weights w_;  // holds the owners: a late thread's grain still reads the weights
  int64_t n_tokens_, k_in_, ld_x_, ld_a_, n_units_, n_panels_;
  float* act_;                         // written by commit() only, which the call waits for
  std::vector<uint16_t> xb_;           // x rounded to bf16, rows ld_x_ apart
  mutable std::vector<uint16_t> ab_;   // act rounded to bf16 (down's input), rows ld_a_ apart
  mutable std::vector<float> halves_;  // [2][n_tokens][n_panels * 32]: down's sums per half of its inputs
  std::shared_ptr<const read_ahead_plan> next_;
};

void decode_call(const float* x, int64_t n_tokens, const swiglu_down_weights& w, float* act, float* y,
                 thread_pool& pool) {
  auto work = std::make_shared<swiglu_down_work>(n_tokens, w, act);
  round_rows_to_bf16(x, n_tokens, w.n_in, work->input(), work->k_in(), work->input_ld());
  auto [bounds, after] = work->grains(pool.takeover_grains(work->n_items(), min_grain, max_grain));
  const read_ahead_key key{w.gate_up, work->n_items(), work->unit_bytes(), static_cast<int>(n_tokens), pool.size()};
  work->set_next(next_call_table::global().advance(key, [&] { return work->first_reads(bounds, pool.size()); }));
  pool.parallel_for_takeover(std::move(bounds), std::move(after), work);  // a copy: the sums are read below
  work->add_halves(y);
}

// More tokens: gate|up as matmul_silu_gate runs it, then down panel by panel, each half of its inputs from zero and
// the two added, as the decode call does.
void batch_calls(const float* x, int64_t n_tokens, const swiglu_down_weights& w, float* up_scratch, float* act,
                 float* y, thread_pool& pool) {
  const uint16_t* up = w.gate_up + bf16_panels_bytes(w.n_ff, w.n_in) / sizeof(uint16_t);
  matmul_silu_gate(x, n_tokens, w.n_in, w.gate_up, up, dtype::bf16, true, w.n_ff, up_scratch, act, pool);
  const int64_t ld = w.n_ff + k_step, half_k = w.n_ff / 2;
  std::vector<uint16_t> ab(static_cast<size_t>(n_tokens * ld));
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    round_rows_to_bf16(act + b * w.n_ff, e - b, w.n_ff, ab.data() + b * ld, w.n_ff, ld);
  });
  // As the packed weights' GEMM: up to 48 tokens each half panel streams from memory once, prefetched ahead; more go
  // in chunks of 384 rows that a half panel serves from L2.
  const bool from_memory = n_tokens <= bf16_packed_stream_max_tokens;
  const int64_t chunk = from_memory ? n_tokens : 384;
  const auto* down = reinterpret_cast<const uint32_t*>(w.down);
  const int64_t n_panels = (w.n_out + panel_rows - 1) / panel_rows;
  pool.parallel_for(n_panels, [&](int64_t p_begin, int64_t p_end) {
    thread_local std::vector<float> sums;
    sums.resize(static_cast<size_t>(2 * chunk * panel_rows));
    for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
      const int64_t tc = std::min(chunk, n_tokens - t0);
      for (int64_t p = p_begin; p < p_end; ++p) {
        for (int64_t half = 0; half < 2; ++half)
          bf16_panel_product(ab.data() + t0 * ld + half * half_k, ld, tc,
                             down + panel_words(p, w.n_ff) + half * (half_k / 2) * panel_rows, half_k,
                             sums.data() + half * chunk * panel_rows, panel_rows, static_cast<int>(panel_rows), nullptr,
                             from_memory);
        const int64_t n_valid = std::min(panel_rows, w.n_out - p * panel_rows);
        for (int64_t t = 0; t < tc; ++t) {
          const float* first = sums.data() + t * panel_rows;
          const float* second = first + chunk * panel_rows;
          float* out = y + (t0 + t) * w.n_out + p * panel_rows;
          for (int64_t j = 0; j < n_valid; ++j)
            out[j] = first[j] + second[j];
        }
      }
    }
  });
}

}  // namespace

bool swiglu_down_supported(int64_t n_ff) { return have_bf16_dot_kernels() && n_ff > 0 && n_ff % (2 * k_step) == 0; }

void set_swiglu_down_fused(bool on) { fused_on.store(on); }
bool swiglu_down_fused() { return fused_on.load(); }

void swiglu_down(const float* x, int64_t n_tokens, const swiglu_down_weights& w, float* up_scratch, float* act,
                 float* y, thread_pool& pool) {
  ACTORLLM_CHECK(swiglu_down_supported(w.n_ff), "swiglu_down: needs the vdpbf16ps kernels and n_ff a multiple of 64");
  ACTORLLM_CHECK(w.gate_up != nullptr && w.down != nullptr && w.n_in > 0 && w.n_out > 0,
                 "swiglu_down: gate|up and down weights of positive sizes");
  if (n_tokens <= 0)
    return;
  if (!swiglu_down_fused()) {  // the two calls as before: down's sum over all of its inputs at once
    const uint16_t* up = w.gate_up + bf16_panels_bytes(w.n_ff, w.n_in) / sizeof(uint16_t);
    matmul_silu_gate(x, n_tokens, w.n_in, w.gate_up, up, dtype::bf16, true, w.n_ff, up_scratch, act, pool,
                     matmul_path::automatic, w.gate_up_owner, w.gate_up_owner);
    const matmul_target down{w.down, dtype::bf16, w.n_out, nullptr, y, true, w.down_owner};
    matmul_group(act, n_tokens, w.n_ff, std::span{&down, 1}, pool);
    return;
  }
  if (n_tokens <= bf16_stream_max_tokens && w.gate_up_owner != nullptr && w.down_owner != nullptr)
    decode_call(x, n_tokens, w, act, y, pool);
  else
    batch_calls(x, n_tokens, w, up_scratch, act, y, pool);
}

}  // namespace actorllm::cpu
