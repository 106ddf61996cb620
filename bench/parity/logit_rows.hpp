// The logits a model gives for one prompt and a few decode steps, and how two such runs differ: what bench_gpu's 8B
// parity (CUDA against the CPU) and bench_parity_floor (the CPU against itself, summing in another order) compare.
#pragma once

#include "kernels/tensor.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "util/json_writer.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm::bench {

/// Token ids of a deterministic prompt of `len` tokens below `vocab` (sequence `seq` gets its own ids).
std::vector<int32_t> prompt_of(int64_t seq, int64_t len, int64_t vocab);

/// The first index of the largest value.
int32_t argmax(const float* row, int64_t n);

/// The model of `config_dir` with `--load-format dummy` weights of `weights` type: the same values on every call.
model::loaded_shard load_dummy(const std::string& config_dir, dtype weights);

/// One row of logits per position: the prompt `tokens[0, prompt_len)` as one prefill (its last row), then each later
/// token of `tokens` as a decode step.
using logit_rows = std::vector<std::vector<float>>;
logit_rows rows_of(model::llama_model& llm, const std::vector<int32_t>& tokens, int64_t prompt_len);

/// Like rows_of, but the decode tokens are the model's own greedy choices: `tokens` holds the prompt on entry and
/// the prompt and `decode` chosen tokens on return.
logit_rows greedy_rows(model::llama_model& llm, std::vector<int32_t>& tokens, int64_t decode);

/// How `got` differs from `ref`, row by row: ||got - ref|| / ||ref||, the largest |got - ref|, and whether the
/// argmax agrees.
struct rows_difference {
  int64_t rows = 0;
  int64_t top1_agree = 0;
  double max_abs_error = 0.0;
  double max_rel_l2_error = 0.0;
  std::vector<double> rel_l2;  // per row
};
rows_difference compare_rows(const logit_rows& got, const logit_rows& ref);

/// Writes `d` as JSON keys PREFIXrows, PREFIXtop1_agree, PREFIXmax_rel_l2_error, PREFIXmax_abs_error and
/// PREFIXrel_l2_per_row into the open object of `w`.
void write_difference(json_writer& w, const rows_difference& d, std::string_view prefix);

}  // namespace actorllm::bench
