// The host side of one batched GPU sample: everything that depends only on token ids (allow-bitmasks, banned ids,
// biases, penalty counts) and the uniform draws, packed into one buffer for one upload; then the kernel's small
// per-row outputs turned back into ops::sample_result, with the rows' generators left exactly where cpu::sample would
// leave them. Pure C++ (no CUDA runtime), so tests run it with the algorithm on the CPU (sample_on_host).
#pragma once

#include "kernels/cuda/sampling_math.hpp"
#include "kernels/sampling.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace actorllm::cuda::sampling {

/// One batch's descriptors and edits (see sampling_math.hpp's batch_view), and the draws taken for it.
class sample_plan {
 public:
  /// Prepares `rows` for logits of n_vocab columns. Draws u from each drawing row's generator in row order, as
  /// cpu::sample would (params.draws_random()); settle_draws corrects the generators once the kernel has said which
  /// rows could not draw. The rows' params, ids and masks are read here only; the generators are kept until settled.
  sample_plan(std::span<const ops::sample_row> rows, int64_t n_vocab);

  /// The packed input: row descriptors, masks and edits. Upload it as is; view() places the pointers.
  std::span<const std::byte> input() const { return input_; }
  /// Bytes of the packed output the kernel writes (row outputs, then the top slots).
  size_t output_bytes() const { return output_bytes_; }
  /// Floats of scratch for the rows that are processed (0 when none is).
  size_t work_floats() const { return work_floats_; }
  int64_t n_rows() const { return n_rows_; }
  int64_t n_vocab() const { return n_vocab_; }

  /// The batch as the algorithm sees it, with the input at `input` (a copy of input()), the output at `output`
  /// (output_bytes(), 16-byte aligned) and the scratch at `work`: host or device addresses alike.
  batch_view view(const float* logits, const std::byte* input, std::byte* output, float* work) const;

  /// After a run, given its output: rewinds every generator and replays the draws in row order, skipping the rows that
  /// could not draw (cpu::sample draws nothing there). Returns true when a row's u changed, which happens only when a
  /// row that could not draw shares its generator with a later row: input() then holds the corrected draws and the
  /// batch must run again (the rows that could not draw stay the same, since that does not depend on u).
  bool settle_draws(std::span<const std::byte> output);

  /// The results from a settled run's output: token, its raw logprob, the top logprobs sorted as cpu::sample does.
  void results(std::span<const std::byte> output, std::span<ops::sample_result> out) const;

 private:
  row_desc& desc(int64_t row);

  int64_t n_rows_ = 0;
  int64_t n_vocab_ = 0;
  std::vector<std::byte> input_;
  size_t output_bytes_ = 0;
  size_t work_floats_ = 0;
  size_t top_slots_ = 0;
  // Offsets in input_ of the arrays after the descriptors.
  size_t masks_at_ = 0, banned_at_ = 0, bias_token_at_ = 0, bias_value_at_ = 0, penalty_token_at_ = 0,
         penalty_count_at_ = 0, top_token_at_ = 0, top_value_at_ = 0;
  std::vector<ops::sampler_rng*> rngs_;      // per row
  std::vector<uint8_t> draws_;               // per row: params.draws_random()
  std::vector<ops::sampler_rng*> distinct_;  // the generators, once each
  std::vector<ops::sampler_rng> initial_;    // their states before this batch
};

/// The whole GPU sampling path run on the CPU: sample_plan, then sample_one_row on a one-thread block per row, then
/// settle_draws and results. Same contract as running cpu::sample on each row in order (the reference the tests hold it
/// to); `logits` is [rows.size(), n_vocab] and is not modified.
void sample_on_host(const float* logits, int64_t n_vocab, std::span<const ops::sample_row> rows,
                    std::span<ops::sample_result> out);

}  // namespace actorllm::cuda::sampling
