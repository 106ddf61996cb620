// Logit rows of a prompt and decode steps, and their difference.
#include "bench/parity/logit_rows.hpp"

#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

namespace actorllm::bench {

std::vector<int32_t> prompt_of(int64_t seq, int64_t len, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i)
    p[static_cast<size_t>(i)] = static_cast<int32_t>((seq * 7919 + i * 104729 + 1) % vocab);
  return p;
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

model::loaded_shard load_dummy(const std::string& config_dir, dtype weights) {
  model::load_options load;
  load.format = model::load_format::dummy;
  load.weight_dtype = weights;
  return model::load_shard(config_dir, model::shard_spec{}, load);
}

namespace {

// Runs the prompt, then hands each decode position's token to `next` (which may choose it from the last row).
template <class Next>
logit_rows run(model::llama_model& llm, std::vector<int32_t>& tokens, int64_t prompt_len, int64_t n_decode,
               Next&& next) {
  const int64_t block_size = 16;
  const int64_t blocks = (prompt_len + n_decode + block_size) / block_size;
  model::kv_cache cache{llm.device_backend(), llm.cache_shape(block_size), blocks};
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  const int64_t vocab = llm.config().n_vocab;
  logit_rows rows;
  model::forward_batch fb;
  fb.add_sequence(std::span<const int32_t>(tokens.data(), static_cast<size_t>(prompt_len)), 0, table, true);
  std::vector<float> l = llm.forward(fb, cache);
  rows.emplace_back(l.begin(), l.begin() + vocab);
  for (int64_t i = prompt_len; i < prompt_len + n_decode; ++i) {
    const int32_t token = next(i, rows.back());
    model::forward_batch d;
    d.add_sequence(std::span<const int32_t>(&token, 1), static_cast<int32_t>(i), table, true);
    l = llm.forward(d, cache);
    rows.emplace_back(l.begin(), l.begin() + vocab);
  }
  return rows;
}

}  // namespace

logit_rows rows_of(model::llama_model& llm, const std::vector<int32_t>& tokens, int64_t prompt_len) {
  std::vector<int32_t> t = tokens;
  const auto n_decode = static_cast<int64_t>(tokens.size()) - prompt_len;
  return run(llm, t, prompt_len, n_decode,
             [&](int64_t i, const std::vector<float>&) { return tokens[static_cast<size_t>(i)]; });
}

logit_rows greedy_rows(model::llama_model& llm, std::vector<int32_t>& tokens, int64_t decode) {
  const auto prompt_len = static_cast<int64_t>(tokens.size());
  return run(llm, tokens, prompt_len, decode, [&](int64_t, const std::vector<float>& last) {
    const int32_t t = argmax(last.data(), static_cast<int64_t>(last.size()));
    tokens.push_back(t);
    return t;
  });
}

rows_difference compare_rows(const logit_rows& got, const logit_rows& ref) {
  rows_difference p;
  for (size_t r = 0; r < got.size() && r < ref.size(); ++r) {
    const auto& g = got[r];
    const auto& c = ref[r];
    double diff2 = 0.0, ref2 = 0.0;
    for (size_t i = 0; i < c.size() && i < g.size(); ++i) {
      const double d = static_cast<double>(g[i]) - c[i];
      diff2 += d * d;
      ref2 += static_cast<double>(c[i]) * c[i];
      p.max_abs_error = std::max(p.max_abs_error, std::fabs(d));
    }
    const double rel = std::sqrt(diff2 / std::max(ref2, 1e-30));
    p.rel_l2.push_back(rel);
    p.max_rel_l2_error = std::max(p.max_rel_l2_error, rel);
    p.top1_agree +=
        argmax(g.data(), static_cast<int64_t>(g.size())) == argmax(c.data(), static_cast<int64_t>(c.size())) ? 1 : 0;
    ++p.rows;
  }
  return p;
}

void write_difference(json_writer& w, const rows_difference& d, std::string_view prefix) {
  const auto key = [&](std::string_view name) { return std::string{prefix} + std::string{name}; };
  w.key(key("rows")).value(d.rows);
  w.key(key("top1_agree")).value(d.top1_agree);
  w.key(key("max_rel_l2_error")).value(d.max_rel_l2_error);
  w.key(key("max_abs_error")).value(d.max_abs_error);
  w.key(key("rel_l2_per_row")).begin_array();
  for (double e : d.rel_l2)
    w.value(e);
  w.end_array();
}

}  // namespace actorllm::bench
