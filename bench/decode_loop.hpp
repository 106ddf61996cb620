// The CPU benches' decode measurement: `batch` sequences, a short prefill each, one untimed warm-up step (as
// llama.cpp's llama-bench and llama-batched-bench warm up before they time), then timed decode steps of the whole
// batch through llama_model's host forward, each row fed its own greedy token.
#pragma once

#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace actorllm::bench {

/// Decode tokens/s of `batch` rows: a `prompt_len`-token prefill each, a warm-up step, then `steps` timed steps. With
/// `row_loras` (one per row, 0: base) each row applies that LoRA adapter, put in slots from `loras`. `on_timing_start`,
/// when given, runs after the warm-up, just before the timed steps (a bench resets its counters there). `after_step`,
/// when given, runs after each timed step (numbered from 1) with its seconds; then each step is timed alone and what
/// `after_step` does is not counted (bench_cpu_decode reads a probe pass beside the decode there).
inline double decode_tokens_per_second(model::llama_model& llm, int64_t batch, int64_t prompt_len, int64_t steps,
                                       int64_t block_size, std::span<const int32_t> row_loras = {},
                                       std::span<const model::lora_source> loras = {},
                                       const std::function<void()>& on_timing_start = {},
                                       const std::function<void(int64_t, double)>& after_step = {}) {
  const int64_t ctx = prompt_len + 1 + steps;  // the prompt, the warm-up step, the timed steps
  const int64_t blocks_per_seq = (ctx + block_size - 1) / block_size;
  model::kv_cache cache{llm.device_backend(), llm.cache_shape(block_size), batch * blocks_per_seq};
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t b = 0; b < blocks_per_seq; ++b)
      tables[static_cast<size_t>(s)].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
  const int64_t vocab = llm.config().n_vocab;
  std::vector<int32_t> last(static_cast<size_t>(batch));
  auto lora_of = [&](int64_t s) { return row_loras.empty() ? 0 : row_loras[static_cast<size_t>(s)]; };
  auto run = [&](const model::forward_batch& fb) {
    auto logits = llm.forward(fb, cache, {}, loras);
    for (int64_t s = 0; s < batch; ++s) {
      auto* row = logits.data() + s * vocab;
      last[static_cast<size_t>(s)] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
  };
  model::forward_batch prefill;
  for (int64_t s = 0; s < batch; ++s) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int64_t i = 0; i < prompt_len; ++i)
      prompt[static_cast<size_t>(i)] = static_cast<int32_t>((s * 7919 + i * 104729) % vocab);
    prefill.add_sequence(prompt, 0, tables[static_cast<size_t>(s)], true);
    prefill.sequences.back().lora_id = lora_of(s);
  }
  run(prefill);
  // Step `step` decodes each row's last token at position prompt_len + step; step 0 is the warm-up (the first decode
  // step after a prefill: kernels' first use at this batch size, the read-ahead's record of which call follows which).
  auto decode_step = [&](int64_t step) {
    model::forward_batch fb;
    for (int64_t s = 0; s < batch; ++s) {
      const int32_t tok[1] = {last[static_cast<size_t>(s)]};
      fb.add_sequence(tok, static_cast<int32_t>(prompt_len + step), tables[static_cast<size_t>(s)], true);
      fb.sequences.back().lora_id = lora_of(s);
    }
    run(fb);
  };
  decode_step(0);
  if (on_timing_start)
    on_timing_start();
  if (!after_step) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 1; step <= steps; ++step)
      decode_step(step);
    return static_cast<double>(batch * steps) /
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Each step timed alone; what after_step does between them is not counted.
  double total = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    decode_step(step);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total += secs;
    after_step(step, secs);
  }
  return static_cast<double>(batch * steps) / total;
}

}  // namespace actorllm::bench
