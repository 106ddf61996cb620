// stories260K in bf16 through the CPU backend's packed-weight cache: the weights packed as before, packed into a cold
// cache, and mapped from a warm one give the same logits to the bit; at tp 2 too, where o_proj and down_proj are
// column slices the cache knows by their strided place in the file.
#include "comm/collective.hpp"
#include "comm/shared_memory_collective.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/matmul_quantized.hpp"
#include "kernels/cpu/packed_weight_cache.hpp"
#include "model/kv_cache.hpp"
#include "model/llama_model.hpp"
#include "model/model_source.hpp"
#include "model_test_util.hpp"
#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace actorllm;
namespace test_util = actorllm::model::test_util;

namespace {

// A bf16 copy of stories260K (its weights rounded once), which the loader uses in place from the file: so the cache
// knows them by their file and place.
std::filesystem::path write_bf16_stories() {
  const auto dir = test_util::temp_dir("stories-bf16");
  std::filesystem::copy_file(test::model_dir("stories260K") / "config.json", dir / "config.json");
  model::load_options options;
  options.weight_dtype = dtype::bf16;
  const model::loaded_shard loaded = model::load_shard(test::model_dir("stories260K"), {}, options);
  std::vector<test_util::test_tensor> tensors;
  for (const auto& [name, h] : loaded.weights.tensors()) {
    REQUIRE(h.type == dtype::bf16);
    tensors.push_back({name, dtype::bf16, h.shape, std::string(static_cast<const char*>(h.data()), h.nbytes())});
  }
  test_util::write_file(dir / "model.safetensors", test_util::make_safetensors(tensors));
  return dir;
}

// The logits of a 6-token prefill and 4 greedy steps after it, all in one vector.
std::vector<float> prefill_and_greedy(model::llama_model& llm, cpu::cpu_backend& be) {
  model::kv_cache cache{be, llm.cache_shape(16), 16};
  std::vector<int32_t> table(16);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> tokens{1, 403, 407, 261, 378, 365};
  std::vector<float> all;
  int32_t position = 0;
  for (int step = 0; step < 5; ++step) {
    model::forward_batch fb;
    fb.add_sequence(tokens, position, table, true);
    const std::vector<float> logits = llm.forward(fb, cache);
    all.insert(all.end(), logits.begin(), logits.end());
    position += static_cast<int32_t>(tokens.size());
    tokens = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
  }
  return all;
}

// prefill_and_greedy() of `shard` (its rank of `comm`), the weights loaded with `options`.
std::vector<float> run(const std::filesystem::path& dir, cpu::cpu_backend& be, const model::shard_spec& shard,
                       tp_collective& comm, const model::load_options& options = {}) {
  model::loaded_shard loaded = model::load_shard(dir, shard, options);
  const bool fp8 = options.quantization == "fp8";
  if (shard.tp_size > 1 || fp8)  // o_proj and down_proj columns, or every Linear quantized: not made unless read
    for (const auto& [name, h] : loaded.weights.tensors()) {
      const bool column = name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
      const bool linear = name.find("_proj") != std::string::npos;
      CHECK(h.is_deferred() == (fp8 ? linear : column));
    }
  model::llama_model llm{loaded.config, std::move(loaded.weights), shard, comm, be};
  return prefill_and_greedy(llm, be);
}

std::vector<float> run(const std::filesystem::path& dir, cpu::cpu_backend& be,
                       const model::load_options& options = {}) {
  single_rank_collective comm;
  return run(dir, be, {}, comm, options);
}

// run() at tp 2, a thread per rank, each with a backend on `cache` (none: packed in memory): rank 0's logits.
std::vector<float> run_tp2(const std::filesystem::path& dir, const std::shared_ptr<cpu::packed_weight_cache>& cache) {
  auto group = std::make_shared<comm::shared_memory_group>(2);
  std::vector<std::vector<float>> logits(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      cpu::cpu_backend be(1, cache);
      comm::shared_memory_collective comm{group, r};
      model::shard_spec shard;
      shard.tp_rank = r;
      shard.tp_size = 2;
      logits[static_cast<size_t>(r)] = run(dir, be, shard, comm);
    });
  for (auto& t : ranks)
    t.join();
  CHECK(logits[0] == logits[1]);
  return logits[0];
}

// stories260K as the quantization tools write it (scripts/make_quantized_checkpoints.py, groups of 32): one
// directory per format under the returned root.
std::filesystem::path write_quantized_stories(const std::vector<std::string>& formats) {
  const auto root = test_util::temp_dir("stories-quantized");
  std::string list;
  for (const std::string& f : formats)
    list += " " + f;
  const std::string cmd = "python3 '" + std::string(ACTORLLM_SOURCE_DIR) +
                          "/scripts/make_quantized_checkpoints.py' --model '" +
                          test::model_dir("stories260K").string() + "' --out '" + root.string() +
                          "' --group-size 32 --formats" + list + " > /dev/null";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  return root;
}

// run() of a checkpoint whose Linear weights are integer-quantized: every one loads unread (the loader defers its
// codes, named by their place in the files) and then goes through the backend.
std::vector<float> run_quantized(const std::filesystem::path& dir, cpu::cpu_backend& be) {
  model::loaded_shard loaded = model::load_shard(dir, {}, {});
  CHECK(!loaded.weights.quantized().empty());
  for (const auto& [name, q] : loaded.weights.quantized()) {
    INFO(name);
    CHECK(q.unread);
    CHECK(q.origin.has_value());
    CHECK(q.codes.empty());
  }
  single_rank_collective comm;
  model::llama_model llm{loaded.config, std::move(loaded.weights), {}, comm, be};
  return prefill_and_greedy(llm, be);
}

// Runs `run_with` on a cold cache in a new directory, then again on it warm: both give `reference`, the cold run
// stores what the warm one maps, all of it. The cache, for more runs.
std::shared_ptr<cpu::packed_weight_cache> check_cold_then_warm(
    const std::function<std::vector<float>(const std::shared_ptr<cpu::packed_weight_cache>&)>& run_with,
    const std::vector<float>& reference, const std::string& dir_name) {
  auto cache = std::make_shared<cpu::packed_weight_cache>(
      cpu::packed_weight_cache_config{test_util::temp_dir(dir_name), uint64_t{1} << 30});
  CHECK(run_with(cache) == reference);
  const int64_t stored = cache->totals().stored;
  CHECK(stored > 0);
  CHECK(cache->totals().hits == 0);
  CHECK(run_with(cache) == reference);
  CHECK(cache->totals().hits == stored);  // every weight mapped (found by its place: never read, copied or quantized)
  CHECK(cache->totals().stored == stored);
  MESSAGE(stored << " packed weights stored, then mapped");
  return cache;
}

}  // namespace

TEST_CASE("packed-weight cache: bf16 stories260K gives the same logits packed, packed into the cache, and mapped") {
  if (!cpu::bf16_panels_preferred()) {
    MESSAGE("skipped: this CPU or build has no AVX512-BF16 kernels, so no weight is packed");
    return;
  }
  const auto model_dir = write_bf16_stories();
  cpu::cpu_backend plain(2, nullptr);
  check_cold_then_warm(
      [&](const auto& cache) {
        cpu::cpu_backend be(2, cache);
        return run(model_dir, be);
      },
      run(model_dir, plain), "packed-cache");
}

TEST_CASE(
    "packed-weight cache: bf16 stories260K at tp 2 (column slices known by their strided place) gives the same "
    "logits packed, packed into the cache, and mapped") {
  if (!cpu::bf16_panels_preferred()) {
    MESSAGE("skipped: this CPU or build has no AVX512-BF16 kernels, so no weight is packed");
    return;
  }
  const auto model_dir = write_bf16_stories();
  check_cold_then_warm([&](const auto& cache) { return run_tp2(model_dir, cache); }, run_tp2(model_dir, nullptr),
                       "packed-cache-tp2");
}

TEST_CASE(
    "packed-weight cache: bf16 stories260K quantized to fp8 at load gives the same logits packed, packed into the "
    "cache, and mapped, and a warm start quantizes nothing") {
  if (!cpu::bf16_panels_preferred()) {
    MESSAGE("skipped: this CPU or build has no AVX512-BF16 kernels, so no weight is packed");
    return;
  }
  const auto model_dir = write_bf16_stories();
  model::load_options fp8;
  fp8.quantization = "fp8";
  cpu::cpu_backend plain(2, nullptr);
  const std::vector<float> reference = run(model_dir, plain, fp8);
  const std::vector<float> unquantized = run(model_dir, plain);
  CHECK(reference != unquantized);  // quantized: other logits than bf16's
  const auto cache = check_cold_then_warm(
      [&](const auto& c) {
        cpu::cpu_backend be(2, c);
        return run(model_dir, be, fp8);
      },
      reference, "packed-cache-fp8");
  cpu::cpu_backend warm(2, cache);
  // The same file unquantized is not taken for the quantized weights.
  CHECK(run(model_dir, warm) == unquantized);
}

TEST_CASE(
    "packed-weight cache: stories260K in AWQ, GPTQ int8 and W8A8 checkpoints gives the same logits packed, packed "
    "into the cache, and mapped, and a warm start reads no codes") {
  const auto root = write_quantized_stories({"awq", "gptq8", "ct_w8a8"});
  std::vector<std::vector<float>> references;
  for (const std::string format : {"awq", "gptq8", "ct_w8a8"}) {
    INFO(format);
    const auto dir = root / format;
    cpu::cpu_backend plain(2, nullptr);
    const std::vector<float> reference = run_quantized(dir, plain);
    for (const auto& other : references)
      CHECK(other != reference);  // each format its own weights
    references.push_back(reference);
    if (format != "ct_w8a8" && !cpu::have_quantized_avx512_kernels()) {
      // Weight-only codes are kept as panels by the AVX-512 kernels only; elsewhere they are dequantized at import.
      MESSAGE("skipped for ", format, ": this CPU or build has no AVX-512 quantized kernels, so nothing is packed");
      continue;
    }
    const auto cache = check_cold_then_warm(
        [&](const auto& c) {
          cpu::cpu_backend be(2, c);
          return run_quantized(dir, be);
        },
        reference, "packed-cache-" + format);
    // Another format's files are other places: nothing of this cache is taken for them.
    if (format != "awq") {
      cpu::cpu_backend be(2, cache);
      const int64_t hits = cache->totals().hits;
      CHECK(run_quantized(root / "awq", be) == references.front());
      CHECK(cache->totals().hits == hits);
    }
  }
}
