// The host side of the GPU sampler: ids to descriptors and edits (vLLM's logits processors and penalties as
// cpu::sample applies them), the draws from the per-sequence generators, and the kernel's outputs to sample_results.
#include "kernels/cuda/sampling_plan.hpp"

#include "util/check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace actorllm::cuda::sampling {
namespace {

constexpr size_t align16(size_t n) { return (n + 15) & ~size_t{15}; }

// Each row's edits before packing.
struct row_edits {
  std::vector<uint64_t> mask;  // empty: every token allowed
  std::vector<int32_t> banned;
  std::vector<std::pair<int32_t, float>> bias;       // stably sorted by token
  std::vector<std::pair<int32_t, int32_t>> penalty;  // distinct tokens, output counts
};

row_edits edits_of(const ops::sample_row& r, int64_t n_vocab) {
  const ops::sampling_params& p = *r.params;
  auto valid = [&](int32_t t) { return t >= 0 && t < n_vocab; };
  row_edits e;
  const size_t n_words = static_cast<size_t>((n_vocab + 63) / 64);
  // The structured-output mask and allowed_token_ids both leave only their tokens: one mask, their intersection.
  if (r.allowed_mask != nullptr)
    e.mask.assign(r.allowed_mask, r.allowed_mask + n_words);
  if (!p.allowed_token_ids.empty()) {
    std::vector<uint64_t> listed(n_words, 0);
    for (int32_t t : p.allowed_token_ids)
      if (valid(t))
        listed[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
    if (e.mask.empty())
      e.mask = std::move(listed);
    else
      for (size_t w = 0; w < n_words; ++w)
        e.mask[w] &= listed[w];
  }
  if (!e.mask.empty() && n_vocab % 64 != 0)
    e.mask.back() &= (uint64_t{1} << (n_vocab % 64)) - 1;  // bits past the vocabulary are never read; keep them 0

  const std::span<const int32_t> out = r.output_ids;
  for (const std::vector<int32_t>& word : p.bad_words) {
    if (word.empty() || !valid(word.back()))
      continue;
    const size_t prefix = word.size() - 1;
    if (prefix <= out.size() && std::equal(word.begin(), word.end() - 1, out.end() - static_cast<ptrdiff_t>(prefix)))
      e.banned.push_back(word.back());
  }
  if (out.size() < static_cast<size_t>(std::max(p.min_tokens, 0)))
    for (int32_t t : p.min_tokens_stop_ids)
      if (valid(t))
        e.banned.push_back(t);
  std::sort(e.banned.begin(), e.banned.end());
  e.banned.erase(std::unique(e.banned.begin(), e.banned.end()), e.banned.end());

  for (auto [t, bias] : p.logit_bias)
    if (valid(t))
      e.bias.emplace_back(t, bias);
  std::stable_sort(e.bias.begin(), e.bias.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  const bool repetition = p.repetition_penalty != 1.0f;
  const bool additive = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (repetition || additive) {
    // Output tokens get every penalty (counted); prompt tokens only the repetition penalty.
    std::vector<int32_t> ids;
    for (int32_t t : out)
      if (valid(t))
        ids.push_back(t);
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i])
        ++j;
      e.penalty.emplace_back(ids[i], static_cast<int32_t>(j - i));
      i = j;
    }
    if (repetition) {
      for (int32_t t : r.prompt_ids)
        if (valid(t))
          e.penalty.emplace_back(t, 0);
      // Keep one entry per token, the output's (with its count) before a prompt's.
      std::stable_sort(e.penalty.begin(), e.penalty.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      e.penalty.erase(std::unique(e.penalty.begin(), e.penalty.end(),
                                  [](const auto& a, const auto& b) { return a.first == b.first; }),
                      e.penalty.end());
    }
  }
  return e;
}

template <class T>
T* at(std::vector<std::byte>& buf, size_t offset) {
  return reinterpret_cast<T*>(buf.data() + offset);
}

}  // namespace

sample_plan::sample_plan(std::span<const ops::sample_row> rows, int64_t n_vocab)
    : n_rows_(static_cast<int64_t>(rows.size())), n_vocab_(n_vocab) {
  ACTORLLM_CHECK(n_vocab > 0 && n_vocab < (int64_t{1} << 31), "sample: vocabulary size out of range");
  std::vector<row_edits> edits;
  edits.reserve(rows.size());
  std::vector<row_desc> descs(rows.size());
  size_t n_mask_words = 0, n_banned = 0, n_bias = 0, n_penalty = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ops::sample_row& r = rows[i];
    ACTORLLM_CHECK(r.params != nullptr && r.rng != nullptr, "sample: a row without params or generator");
    edits.push_back(edits_of(r, n_vocab));
    const row_edits& e = edits.back();
    const ops::sampling_params& p = *r.params;
    row_desc& d = descs[i];
    d.temperature = p.temperature;
    d.top_p = p.top_p;
    d.min_p = p.min_p;
    d.repetition_penalty = p.repetition_penalty;
    d.presence_penalty = p.presence_penalty;
    d.frequency_penalty = p.frequency_penalty;
    d.top_k = p.top_k;
    d.n_top = p.logprobs > 0 ? static_cast<int32_t>(std::min<int64_t>(p.logprobs, n_vocab)) : 0;
    d.top_offset = static_cast<int64_t>(top_slots_);
    top_slots_ += static_cast<size_t>(d.n_top);
    if (!e.mask.empty()) {
      d.mask_offset = static_cast<int64_t>(n_mask_words);
      n_mask_words += e.mask.size();
    }
    d.banned_begin = static_cast<int32_t>(n_banned);
    d.banned_end = static_cast<int32_t>(n_banned += e.banned.size());
    d.bias_begin = static_cast<int32_t>(n_bias);
    d.bias_end = static_cast<int32_t>(n_bias += e.bias.size());
    d.penalty_begin = static_cast<int32_t>(n_penalty);
    d.penalty_end = static_cast<int32_t>(n_penalty += e.penalty.size());
    if (!e.mask.empty() || !e.banned.empty() || !e.bias.empty() || !e.penalty.empty()) {
      d.work_offset = static_cast<int64_t>(work_floats_);
      work_floats_ += static_cast<size_t>(n_vocab);
    }
  }

  // The draws, in row order; the generators' states first, to rewind them in settle_draws.
  rngs_.resize(rows.size());
  draws_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ops::sampler_rng* rng = rows[i].rng;
    rngs_[i] = rng;
    draws_[i] = rows[i].params->draws_random() ? 1 : 0;
    if (std::find(distinct_.begin(), distinct_.end(), rng) == distinct_.end()) {
      distinct_.push_back(rng);
      initial_.push_back(*rng);
    }
    if (draws_[i])
      descs[i].u = rng->uniform();
  }

  size_t size = align16(rows.size() * sizeof(row_desc));
  masks_at_ = size;
  size = align16(size + n_mask_words * sizeof(uint64_t));
  banned_at_ = size;
  size = align16(size + n_banned * sizeof(int32_t));
  bias_token_at_ = size;
  size = align16(size + n_bias * sizeof(int32_t));
  bias_value_at_ = size;
  size = align16(size + n_bias * sizeof(float));
  penalty_token_at_ = size;
  size = align16(size + n_penalty * sizeof(int32_t));
  penalty_count_at_ = size;
  size = align16(size + n_penalty * sizeof(int32_t));
  input_.assign(size, std::byte{0});
  std::memcpy(input_.data(), descs.data(), descs.size() * sizeof(row_desc));
  for (size_t i = 0; i < rows.size(); ++i) {
    const row_edits& e = edits[i];
    const row_desc& d = descs[i];
    if (!e.mask.empty())
      std::memcpy(at<uint64_t>(input_, masks_at_) + d.mask_offset, e.mask.data(), e.mask.size() * sizeof(uint64_t));
    std::copy(e.banned.begin(), e.banned.end(), at<int32_t>(input_, banned_at_) + d.banned_begin);
    for (size_t j = 0; j < e.bias.size(); ++j) {
      at<int32_t>(input_, bias_token_at_)[d.bias_begin + static_cast<int32_t>(j)] = e.bias[j].first;
      at<float>(input_, bias_value_at_)[d.bias_begin + static_cast<int32_t>(j)] = e.bias[j].second;
    }
    for (size_t j = 0; j < e.penalty.size(); ++j) {
      at<int32_t>(input_, penalty_token_at_)[d.penalty_begin + static_cast<int32_t>(j)] = e.penalty[j].first;
      at<int32_t>(input_, penalty_count_at_)[d.penalty_begin + static_cast<int32_t>(j)] = e.penalty[j].second;
    }
  }

  top_token_at_ = align16(rows.size() * sizeof(row_out));
  top_value_at_ = align16(top_token_at_ + top_slots_ * sizeof(int32_t));
  output_bytes_ = align16(top_value_at_ + top_slots_ * sizeof(float));
}

row_desc& sample_plan::desc(int64_t row) { return at<row_desc>(input_, 0)[row]; }

batch_view sample_plan::view(const float* logits, const std::byte* input, std::byte* output, float* work) const {
  batch_view v;
  v.logits = logits;
  v.n_vocab = n_vocab_;
  v.rows = reinterpret_cast<const row_desc*>(input);
  v.masks = reinterpret_cast<const uint64_t*>(input + masks_at_);
  v.banned = reinterpret_cast<const int32_t*>(input + banned_at_);
  v.bias_token = reinterpret_cast<const int32_t*>(input + bias_token_at_);
  v.bias_value = reinterpret_cast<const float*>(input + bias_value_at_);
  v.penalty_token = reinterpret_cast<const int32_t*>(input + penalty_token_at_);
  v.penalty_count = reinterpret_cast<const int32_t*>(input + penalty_count_at_);
  v.work = work;
  v.out = reinterpret_cast<row_out*>(output);
  v.top_token = reinterpret_cast<int32_t*>(output + top_token_at_);
  v.top_value = reinterpret_cast<float*>(output + top_value_at_);
  return v;
}

bool sample_plan::settle_draws(std::span<const std::byte> output) {
  ACTORLLM_CHECK(output.size() >= output_bytes_, "sample: short output");
  const auto* outs = reinterpret_cast<const row_out*>(output.data());
  for (size_t g = 0; g < distinct_.size(); ++g)
    *distinct_[g] = initial_[g];
  bool changed = false;
  for (int64_t i = 0; i < n_rows_; ++i) {
    if (!draws_[static_cast<size_t>(i)] || outs[i].degenerate != 0)
      continue;
    const double u = rngs_[static_cast<size_t>(i)]->uniform();
    if (u != desc(i).u) {
      desc(i).u = u;
      changed = true;
    }
  }
  return changed;
}

void sample_plan::results(std::span<const std::byte> output, std::span<ops::sample_result> out) const {
  ACTORLLM_CHECK(output.size() >= output_bytes_ && out.size() == static_cast<size_t>(n_rows_),
                 "sample: output and results do not match the plan");
  const auto* outs = reinterpret_cast<const row_out*>(output.data());
  const auto* top_token = reinterpret_cast<const int32_t*>(output.data() + top_token_at_);
  const auto* top_value = reinterpret_cast<const float*>(output.data() + top_value_at_);
  const auto* descs = reinterpret_cast<const row_desc*>(input_.data());
  const float uniform = -std::log(static_cast<float>(n_vocab_));
  for (int64_t i = 0; i < n_rows_; ++i) {
    const row_out& o = outs[i];
    // The CPU's formula exactly: (raw - max) - log_sum, or -log(n_vocab) for an all -inf row.
    auto logprob = [&](float v) { return o.raw_max == -INFINITY ? uniform : (v - o.raw_max) - o.raw_log_sum; };
    ops::sample_result& r = out[static_cast<size_t>(i)];
    r.token = o.token;
    r.logprob = logprob(o.token_value);
    r.top.clear();
    const row_desc& d = descs[i];
    ACTORLLM_CHECK(o.n_top == d.n_top && o.token >= 0 && o.token < n_vocab_, "sample: malformed kernel output");
    std::vector<std::pair<float, int32_t>> top;
    top.reserve(static_cast<size_t>(d.n_top));
    for (int32_t j = 0; j < d.n_top; ++j)
      top.emplace_back(top_value[d.top_offset + j], top_token[d.top_offset + j]);
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    r.top.reserve(top.size());
    for (auto [v, t] : top)
      r.top.push_back({t, logprob(v)});
  }
}

void sample_on_host(const float* logits, int64_t n_vocab, std::span<const ops::sample_row> rows,
                    std::span<ops::sample_result> out) {
  sample_plan plan(rows, n_vocab);
  std::vector<std::byte> input(plan.input().begin(), plan.input().end());
  std::vector<uint64_t> output((plan.output_bytes() + 7) / 8, 0);  // 8-byte aligned, as row_out needs
  auto* output_bytes = reinterpret_cast<std::byte*>(output.data());
  std::vector<float> work(plan.work_floats());
  for (int run = 0; run < 2; ++run) {
    const batch_view view = plan.view(logits, input.data(), output_bytes, work.data());
    for (int64_t row = 0; row < plan.n_rows(); ++row) {
      serial_block block;
      sample_one_row(block, view, row);
    }
    const std::span<const std::byte> written(output_bytes, plan.output_bytes());
    if (!plan.settle_draws(written))
      break;
    ACTORLLM_CHECK(run == 0, "sample: draws did not settle");
    input.assign(plan.input().begin(), plan.input().end());
  }
  plan.results(std::span<const std::byte>(output_bytes, plan.output_bytes()), out);
}

}  // namespace actorllm::cuda::sampling
