// The engine (llama_model on the CPU backend, paged KV cache) against the independent float64 reference
// (reference_llama.hpp) where configs differ from plain Llama: sliding windows (Mistral on every layer, Qwen2 only
// above max_window_layers) run in prefill chunks that cross the window and through decodes, and transformers 5's
// rope_parameters layout, which must give the same model as the old rope_theta / rope_scaling keys.
#include "comm/collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_config.hpp"
#include "model/model_source.hpp"
#include "reference_llama.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace actorllm;
using namespace actorllm::model;

namespace {

// Small blocks, so that a window boundary falls inside a block and a chunk spans several blocks.
constexpr int64_t block_size = 4;
constexpr int64_t n_blocks = 16;
// Out of order and with gaps: a sequence's positions are not laid out contiguously in the cache.
const std::vector<int32_t> block_table{13, 2, 9, 0, 6, 11, 4, 15};

// One engine: a model on the CPU backend with its own KV cache.
struct engine {
  engine(const model_config& cfg, model_weights weights)
      : be{2}, llm{cfg, std::move(weights), {}, comm, be}, cache{be, llm.cache_shape(block_size), n_blocks} {}

  cpu::cpu_backend be;
  single_rank_collective comm;
  llama_model llm;
  kv_cache cache;
};

// The engine's logits for every position of `tokens` ([tokens.size(), n_vocab]), run as one sequence from position 0
// in prefill chunks of the given lengths and then one decode step per remaining token; every row of every step is
// sampled.
std::vector<double> engine_logits(engine& e, const std::vector<int32_t>& tokens, const std::vector<size_t>& chunks) {
  std::vector<double> out;
  size_t pos = 0;
  size_t chunk_index = 0;
  while (pos < tokens.size()) {
    const size_t len = std::min(chunk_index < chunks.size() ? chunks[chunk_index] : 1, tokens.size() - pos);
    ++chunk_index;
    forward_batch fb;
    fb.add_sequence(std::span<const int32_t>{tokens}.subspan(pos, len), static_cast<int32_t>(pos), block_table, false);
    fb.sample_rows.resize(len);
    std::iota(fb.sample_rows.begin(), fb.sample_rows.end(), 0);
    const std::vector<float> logits = e.llm.forward(fb, e.cache);
    REQUIRE(logits.size() == len * static_cast<size_t>(e.llm.config().n_vocab));
    out.insert(out.end(), logits.begin(), logits.end());
    pos += len;
  }
  return out;
}

std::vector<double> engine_logits(const model_config& cfg, const model_weights& w, const std::vector<int32_t>& tokens,
                                  const std::vector<size_t>& chunks) {
  engine e{cfg, test_util::copy_weights(w)};
  return engine_logits(e, tokens, chunks);
}

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// Greedy continuation of `prompt` by `n` tokens: the prompt in one prefill, then one decode per token.
std::vector<int32_t> engine_greedy(engine& e, const std::vector<int32_t>& prompt, int64_t n) {
  const int64_t vocab = e.llm.config().n_vocab;
  forward_batch fb;
  fb.add_sequence(prompt, 0, block_table, true);
  std::vector<float> logits = e.llm.forward(fb, e.cache);
  std::vector<int32_t> out;
  while (true) {
    REQUIRE(logits.size() == static_cast<size_t>(vocab));
    out.push_back(argmax(logits.data(), vocab));
    if (static_cast<int64_t>(out.size()) == n)
      return out;
    forward_batch step;
    const int32_t tok[1] = {out.back()};
    step.add_sequence(tok, static_cast<int32_t>(prompt.size() + out.size() - 1), block_table, true);
    logits = e.llm.forward(step, e.cache);
  }
}

std::vector<int32_t> some_tokens(size_t n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 gen{seed};
  std::uniform_int_distribution<int32_t> dist{0, static_cast<int32_t>(n_vocab - 1)};
  std::vector<int32_t> out(n);
  for (auto& t : out)
    t = dist(gen);
  return out;
}

double max_abs(const std::vector<double>& v, size_t begin = 0, size_t end = SIZE_MAX) {
  double m = 0.0;
  for (size_t i = begin; i < std::min(end, v.size()); ++i)
    m = std::max(m, std::fabs(v[i]));
  return m;
}

// max |a - b| over the elements of rows [row_begin, row_end) of two [n, n_vocab] matrices.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b, int64_t n_vocab, int64_t row_begin = 0,
                    int64_t row_end = INT64_MAX) {
  REQUIRE(a.size() == b.size());
  const auto n_rows = static_cast<int64_t>(a.size()) / n_vocab;
  double m = 0.0;
  for (int64_t i = row_begin * n_vocab; i < std::min(row_end, n_rows) * n_vocab; ++i)
    m = std::max(m, std::fabs(a[static_cast<size_t>(i)] - b[static_cast<size_t>(i)]));
  return m;
}

// llm.c's tolerance: relative to the reference's scale plus an absolute floor. f32 kernels against float64 on these
// tiny random models stay around 1e-6; a wrong window or rotation moves logits by 1e-1 or more.
double tolerance(const std::vector<double>& ref) { return 1e-4 * max_abs(ref) + 1e-4; }

void check_matches_reference(const std::vector<double>& got, const std::vector<double>& ref, int64_t n_vocab) {
  const double tol = tolerance(ref);
  const auto n_rows = static_cast<int64_t>(ref.size()) / n_vocab;
  REQUIRE(got.size() == ref.size());
  for (int64_t t = 0; t < n_rows; ++t) {
    CAPTURE(t);
    const double diff = max_abs_diff(got, ref, n_vocab, t, t + 1);
    CHECK(diff <= tol);
  }
  MESSAGE("max |engine - reference| = " << max_abs_diff(got, ref, n_vocab) << " (tolerance " << tol << ")");
}

model_config mistral_config() {
  return parse_model_config(R"({"architectures": ["MistralForCausalLM"], "model_type": "mistral",
      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 97, "max_position_embeddings": 64,
      "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "sliding_window": 5})",
                            "mistral/config.json");
}

model_config qwen2_config() {
  return parse_model_config(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
      "rope_theta": 1000000.0, "tie_word_embeddings": true, "use_sliding_window": true, "sliding_window": 4,
      "max_window_layers": 1})",
                            "qwen2/config.json");
}

// A tiny Llama whose rope settings are `rope_json`, spliced into the object.
model_config llama_config(const std::string& rope_json) {
  return parse_model_config(fmt::format(R"({{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 97, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
      "tie_word_embeddings": false, {}}})",
                                        rope_json),
                            "llama/config.json");
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A temporary directory removed when the test leaves its scope.
struct scoped_dir {
  explicit scoped_dir(const std::string& prefix) : path{test::make_temp_dir(prefix)} {}
  ~scoped_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  scoped_dir(const scoped_dir&) = delete;
  scoped_dir& operator=(const scoped_dir&) = delete;
  std::filesystem::path path;
};

// `config_json` rewritten in transformers 5's layout: top-level rope_theta (and a null rope_scaling) moved into
// "rope_parameters": {"rope_type": "default", "rope_theta": `theta`}.
std::string rope_parameters_twin(const std::string& config_json, double theta) {
  simdjson::dom::parser parser;
  simdjson::dom::object obj = parser.parse(config_json).get_object();
  std::string out = "{";
  for (auto [key, value] : obj) {
    if (key == "rope_theta")
      continue;
    if (key == "rope_scaling") {
      REQUIRE(value.is_null());  // a scaled model would need its scaling keys moved too
      continue;
    }
    out += fmt::format("\"{}\": {}, ", key, simdjson::minify(value));
  }
  out += fmt::format(R"("rope_parameters": {{"rope_type": "default", "rope_theta": {}}}}})", theta);
  return out;
}

// A checkpoint directory: `config_json` as its config.json, every other file of `model` symlinked.
void write_twin_checkpoint(const std::filesystem::path& dir, const std::filesystem::path& model,
                           const std::string& config_json) {
  for (const auto& entry : std::filesystem::directory_iterator(model))
    if (entry.path().filename() != "config.json")
      std::filesystem::create_symlink(entry.path(), dir / entry.path().filename());
  std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
  out << config_json;
  REQUIRE(out.good());
}

}  // namespace

// Fails when the engine ignores the window (the window-removed run shows how far that lands), cuts it off by one
// (position p - 5 kept or p - 4 dropped), applies it per chunk instead of per position, or misplaces keys across the
// non-contiguous blocks; verified by passing the engine window 0, window 4 and window 6 instead of 5.
TEST_CASE("Mistral-style config: the engine matches a float64 reference when the window is smaller than the sequence") {
  const model_config cfg = mistral_config();
  REQUIRE(cfg.layer_window == std::vector<int64_t>{5, 5, 5});
  const model_weights w = test_util::random_weights(cfg, 11, dtype::f32);
  const std::vector<int32_t> tokens = some_tokens(23, cfg.n_vocab, 1);
  const std::vector<double> ref = test_util::reference_logits(cfg, w, tokens);

  SUBCASE("prefill chunks of 7, 3 and 9 (crossing the window and block boundaries), then 4 decodes") {
    check_matches_reference(engine_logits(cfg, w, tokens, {7, 3, 9}), ref, cfg.n_vocab);
  }
  SUBCASE("one prefill of all 23 tokens") {
    check_matches_reference(engine_logits(cfg, w, tokens, {23}), ref, cfg.n_vocab);
  }
  SUBCASE("decodes only") { check_matches_reference(engine_logits(cfg, w, tokens, {}), ref, cfg.n_vocab); }
  SUBCASE("without the window the engine is far off from position 5 on, so the comparison does see the window") {
    model_config full = cfg;
    full.layer_window.clear();
    const std::vector<double> got = engine_logits(full, w, tokens, {7, 3, 9});
    const double tol = tolerance(ref);
    CHECK(max_abs_diff(got, ref, cfg.n_vocab, 0, 5) <= tol);  // positions 0..4 see every key either way
    const double diff = max_abs_diff(got, ref, cfg.n_vocab, 5);
    MESSAGE("max |full attention - windowed reference| from position 5 on = " << diff);
    CHECK(diff > 100 * tol);
  }
}

// Fails when the engine windows every layer, no layer, or the wrong ones (e.g. i < max_window_layers): the subcase
// below shows all-windowed and unwindowed runs land far outside tolerance, and handing the engine the windows in
// reverse layer order ({4, 4, 0}) failed the comparison at 38 checks.
TEST_CASE("Qwen2 config with max_window_layers: only the upper layers use the window") {
  const model_config cfg = qwen2_config();
  REQUIRE(cfg.layer_window == std::vector<int64_t>{0, 4, 4});
  REQUIRE(cfg.attention_bias);
  const model_weights w = test_util::random_weights(cfg, 12, dtype::f32);
  REQUIRE(w.find("model.layers.0.self_attn.q_proj.bias") != nullptr);
  const std::vector<int32_t> tokens = some_tokens(23, cfg.n_vocab, 2);
  const std::vector<double> ref = test_util::reference_logits(cfg, w, tokens);

  SUBCASE("prefill chunks of 7, 3 and 9, then 4 decodes") {
    check_matches_reference(engine_logits(cfg, w, tokens, {7, 3, 9}), ref, cfg.n_vocab);
  }
  SUBCASE("prefill chunks of 5 and 2, then decodes") {
    check_matches_reference(engine_logits(cfg, w, tokens, {5, 2}), ref, cfg.n_vocab);
  }
  SUBCASE("windowing every layer, or none, is far off: the per-layer choice is what the comparison checks") {
    const double tol = tolerance(ref);
    for (const auto& windows : {std::vector<int64_t>{4, 4, 4}, std::vector<int64_t>{0, 0, 0}}) {
      CAPTURE(windows[0]);
      model_config wrong = cfg;
      wrong.layer_window = windows;
      const std::vector<double> got = engine_logits(wrong, w, tokens, {7, 3, 9});
      CHECK(max_abs_diff(got, ref, cfg.n_vocab, 0, 4) <= tol);
      const double diff = max_abs_diff(got, ref, cfg.n_vocab, 4);
      MESSAGE("windows {" << windows[0] << ", " << windows[1] << ", " << windows[2]
                          << "}: max |engine - reference| from position 4 on = " << diff);
      CHECK(diff > 100 * tol);
    }
  }
}

// Fails when the parser drops rope_parameters' scaling or its rope_theta (the subcase below shows that either loss
// moves the engine far from the reference of the old layout), or when it refuses the layout; with stories260K, when
// a real checkpoint's rope_parameters twin loads differently (its rope_theta is the default 10000, so a twin with
// rope_theta 100 checks that the value is read from there at all).
TEST_CASE("a transformers-5 rope_parameters config gives the same ids as its old-layout twin") {
  SUBCASE("tiny random Llama with llama3 scaling") {
    const model_config old_layout = llama_config(R"("rope_theta": 500.0, "rope_scaling": {"rope_type": "llama3",
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})");
    const model_config new_layout = llama_config(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0,
        "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})");
    const model_weights w = test_util::random_weights(old_layout, 21, dtype::f32);
    const std::vector<int32_t> prompt{5, 17, 42, 3, 88};
    constexpr int64_t n = 8;

    engine old_engine{old_layout, test_util::copy_weights(w)};
    engine new_engine{new_layout, test_util::copy_weights(w)};
    const std::vector<int32_t> old_ids = engine_greedy(old_engine, prompt, n);
    const std::vector<int32_t> new_ids = engine_greedy(new_engine, prompt, n);
    MESSAGE("greedy ids: " << fmt::format("{}", fmt::join(old_ids, " ")));
    CHECK(new_ids == old_ids);
    CHECK(old_ids == test_util::reference_greedy(old_layout, w, prompt, n));

    // Logits of the whole generated sequence, new layout in the engine against the old layout in the reference.
    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), old_ids.begin(), old_ids.end() - 1);
    const std::vector<double> ref = test_util::reference_logits(old_layout, w, seq);
    check_matches_reference(engine_logits(new_layout, w, seq, {5}), ref, new_layout.n_vocab);

    // What a parser that lost half of rope_parameters would run: no scaling, or the default theta.
    const double tol = tolerance(ref);
    for (const std::string& lossy : {std::string(R"("rope_parameters": {"rope_type": "default", "rope_theta": 500.0})"),
                                     std::string(R"("rope_parameters": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})")}) {
      CAPTURE(lossy);
      const double diff = max_abs_diff(engine_logits(llama_config(lossy), w, seq, {5}), ref, new_layout.n_vocab);
      MESSAGE("lossy rope: max |engine - reference| = " << diff);
      CHECK(diff > 100 * tol);
    }
  }

  SUBCASE("stories260K with its rope_theta moved into rope_parameters") {
    const std::filesystem::path model = test::model_dir("stories260K");
    const std::string config_json = read_text(model / "config.json");
    const model_config original_cfg = parse_model_config(config_json, "stories260K/config.json");
    REQUIRE(original_cfg.rope.type == rope_scaling::kind::none);

    scoped_dir twin{"actorllm-rope-parameters-twin"};
    scoped_dir other_theta{"actorllm-rope-parameters-theta"};
    const std::string twin_json = rope_parameters_twin(config_json, original_cfg.rope_theta);
    {
      simdjson::dom::parser parser;
      simdjson::dom::object twin_obj = parser.parse(twin_json).get_object();
      CHECK(twin_obj["rope_theta"].error() == simdjson::NO_SUCH_FIELD);  // only rope_parameters says it now
      CHECK(twin_obj["rope_parameters"]["rope_theta"].error() == simdjson::SUCCESS);
    }
    write_twin_checkpoint(twin.path, model, twin_json);
    write_twin_checkpoint(other_theta.path, model, rope_parameters_twin(config_json, 100.0));

    loaded_shard original = load_shard(model, {}, {});
    loaded_shard twin_shard = load_shard(twin.path, {}, {});
    loaded_shard other_shard = load_shard(other_theta.path, {}, {});
    CHECK(twin_shard.config.rope_theta == original.config.rope_theta);
    CHECK(other_shard.config.rope_theta == 100.0);

    constexpr int64_t n = 16;
    engine original_engine{original.config, std::move(original.weights)};
    engine twin_engine{twin_shard.config, std::move(twin_shard.weights)};
    const std::vector<int32_t> ids = engine_greedy(original_engine, {1}, n);
    MESSAGE("greedy ids from BOS: " << fmt::format("{}", fmt::join(ids, " ")));
    CHECK(engine_greedy(twin_engine, {1}, n) == ids);

    // rope_theta 100 read from rope_parameters changes the model: the twin's agreement above is not vacuous.
    std::vector<int32_t> seq{1};
    seq.insert(seq.end(), ids.begin(), ids.end() - 1);
    engine other_engine{other_shard.config, std::move(other_shard.weights)};
    const std::vector<double> base = engine_logits(original_engine, seq, {seq.size()});
    const double diff = max_abs_diff(engine_logits(other_engine, seq, {seq.size()}), base, original.config.n_vocab);
    MESSAGE("rope_theta 100 against 10000: max |logit diff| over " << seq.size() << " positions = " << diff);
    CHECK(diff > 100 * tolerance(base));
  }
}
