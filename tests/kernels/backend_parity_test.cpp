// Every op of the backend interface on every compiled backend against float64 references written here or in
// lora_reference.hpp (never the cpu:: kernels), in the style of ggml's test-backend-ops: random odd shapes from fixed
// seeds (printed on failure), llm.c's tolerance |out - ref| <= tol + |ref| * eps per op, and guard values around
// every output (a NaN sentinel before and after the op's view of a larger allocation) that catch writes out of
// bounds and elements left unwritten. Each case runs twice: "on cpu" always, "on cuda" where a GPU is visible
// (doctest skips it elsewhere, and the listener and ctest's "gpu:" entry report it as skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_reference.hpp"
#include "kernel_test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/sampling.hpp"
#include "kernels/cuda/prefill_attention_math.hpp"
#include "kernels/quantized_linear.hpp"
#include "lora_reference.hpp"

using namespace actorllm;
using ops::sample_result;
using ops::sample_row;
using ops::sampler_rng;
using ops::sampling_params;

namespace {

// ---- backends and random data ----------------------------------------------------------------------------------

// The backend kind the running case tests (set by BACKEND_PARITY_CASE's two test cases).
device_kind kind_under_test = device_kind::cpu;

bool gpu_usable() {
  static const bool usable = visible_gpu_count() > 0;
  return usable;
}

// Runs f(backend&, kind) on a fresh backend of the kind under test, with its name attached to any failure.
template <class F>
void for_each_backend(F&& f) {
  const device_kind kind = kind_under_test;
  const std::string name{device_kind_name(kind)};
  CAPTURE(name);
  if (kind == device_kind::cuda)
    REQUIRE_MESSAGE(gpu_usable(), "no usable GPU: " << gpu_unavailable_reason());
  std::unique_ptr<backend> be = make_backend(kind, 2);
  REQUIRE(be != nullptr);
  CHECK(be->where().kind == kind);
  CHECK(!be->describe().empty());
  f(*be, kind);
  be->synchronize();
}

struct random_source {
  explicit random_source(uint32_t seed) : gen(seed) {}
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  float real(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  std::vector<float> reals(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v)
      x = real(lo, hi);
    return v;
  }
  std::mt19937 gen;
};

std::string shape_str(std::initializer_list<int64_t> dims) { return tensor_shape(dims).to_string(); }

// ---- tensors on the backend under test -------------------------------------------------------------------------

constexpr uint32_t sentinel = 0x7fc0deadu;  // a quiet NaN whose payload no kernel produces
constexpr int64_t guard_front = 16;         // elements before the view (keeps 64-byte alignment for f32)
constexpr int64_t guard_back = 29;          // elements after it (odd on purpose)

std::vector<std::byte> sentinel_bytes(size_t n) {
  std::vector<std::byte> b(n);
  for (size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::byte>((sentinel >> (8 * (i % 4))) & 0xffu);
  return b;
}

// An op's tensor inside a larger allocation: `view` (what the op gets) starts guard_front elements in; everything
// around it holds the sentinel. For an output the view starts as sentinel too, so unwritten elements show up as
// NaN; an in-place operand starts with `init`.
struct guarded {
  tensor whole;
  tensor view;
};

guarded alloc_guarded(backend& be, dtype type, tensor_shape shape, const void* init = nullptr) {
  guarded g;
  g.whole = be.alloc(type, {guard_front + shape.numel() + guard_back});
  g.view = g.whole;
  g.view.shape = shape;
  g.view.offset = g.whole.offset + static_cast<size_t>(guard_front) * dtype_size(type);
  std::vector<std::byte> bytes = sentinel_bytes(g.whole.nbytes());
  if (init != nullptr && g.view.nbytes() != 0)
    std::memcpy(bytes.data() + (g.view.offset - g.whole.offset), init, g.view.nbytes());
  be.upload(g.whole, bytes.data(), bytes.size());
  return g;
}

template <class T>
guarded alloc_guarded(backend& be, dtype type, tensor_shape shape, const std::vector<T>& init) {
  REQUIRE(init.size() * sizeof(T) == static_cast<size_t>(shape.numel()) * dtype_size(type));
  return alloc_guarded(be, type, shape, init.data());
}

// Downloads g, checks that the guards still hold the sentinel and returns the view's bytes.
std::vector<std::byte> read_checked(backend& be, const guarded& g, const std::string& what) {
  std::vector<std::byte> all(g.whole.nbytes());
  be.download(g.whole, all.data(), all.size());
  const std::vector<std::byte> pattern = sentinel_bytes(all.size());
  const size_t begin = g.view.offset - g.whole.offset, end = begin + g.view.nbytes();
  INFO(what);
  CHECK_MESSAGE(std::memcmp(all.data(), pattern.data(), begin) == 0, "the op wrote before its output");
  CHECK_MESSAGE(std::memcmp(all.data() + end, pattern.data() + end, all.size() - end) == 0,
                "the op wrote past the end of its output");
  return {all.begin() + static_cast<std::ptrdiff_t>(begin), all.begin() + static_cast<std::ptrdiff_t>(end)};
}

// A fused rope/cache-write run and its apart counterpart (each with guarded q, k, k_cache and v_cache) hold the same
// bytes in q, k and both caches.
template <class Run>
void check_same_rope_and_cache(backend& be, const Run& fused, const Run& apart, const std::string& what) {
  CHECK(read_checked(be, fused.q, what + " q") == read_checked(be, apart.q, what + " q"));
  CHECK(read_checked(be, fused.k, what + " k") == read_checked(be, apart.k, what + " k"));
  CHECK(read_checked(be, fused.k_cache, what + " k cache") == read_checked(be, apart.k_cache, what + " k cache"));
  CHECK(read_checked(be, fused.v_cache, what + " v cache") == read_checked(be, apart.v_cache, what + " v cache"));
}

template <class T>
std::vector<T> read_as(backend& be, const guarded& g, const std::string& what) {
  std::vector<std::byte> bytes = read_checked(be, g, what);
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

template <class T>
tensor input(backend& be, dtype type, tensor_shape shape, const std::vector<T>& data) {
  tensor t = be.alloc(type, shape);
  REQUIRE(t.nbytes() == data.size() * sizeof(T));
  be.upload(t, data.data(), t.nbytes());
  return t;
}

std::vector<float> download_all(backend& be, const tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.download(t, v.data(), t.nbytes());
  return v;
}

// A weight of type `type` holding `values` rounded to it; `exact` are the stored values the reference uses.
struct weight {
  tensor t;
  std::vector<double> exact;
};

weight make_weight(backend& be, dtype type, tensor_shape shape, const std::vector<float>& values) {
  std::vector<uint8_t> bytes = test::to_dtype(values, type);
  weight w{input(be, type, shape, bytes), std::vector<double>(values.size())};
  for (size_t i = 0; i < values.size(); ++i)
    w.exact[i] = test::element(bytes, type, i);
  return w;
}

constexpr dtype weight_types[] = {dtype::f32, dtype::f16, dtype::bf16};

// ---- float64 references ----------------------------------------------------------------------------------------

void ref_rms_norm(const double* x, int64_t width, const std::vector<double>& w, double eps, double* y) {
  double ss = 0;
  for (int64_t i = 0; i < width; ++i)
    ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(width) + eps);
  for (int64_t i = 0; i < width; ++i)
    y[i] = x[i] * inv * w[static_cast<size_t>(i)];
}

std::vector<double> ref_log_softmax(const float* x, int64_t n) {
  double m = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += std::exp(static_cast<double>(x[i]) - m);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - m - std::log(s);
  return out;
}

// transformers' rope init in float64: theta^(-2i/d), then linear or llama3 scaling.
std::vector<double> ref_inv_freq(const rope_config& cfg) {
  const int64_t half = cfg.head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] =
        1.0 / std::pow(cfg.theta, static_cast<double>(2 * i) / static_cast<double>(cfg.head_dim));
  const rope_scaling& s = cfg.scaling;
  for (double& f : inv) {
    if (s.type == rope_scaling::kind::linear) {
      f /= s.factor;
    } else if (s.type == rope_scaling::kind::llama3) {
      const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

}  // namespace

// ---- memory ----------------------------------------------------------------------------------------------------

// Defines the body `fn` once and two test cases over it: on the CPU backend ([asan]) and on CUDA (skipped without a
// GPU; in a build without the CUDA backend there is never one).
#define BACKEND_PARITY_CASE(fn, what)                                            \
  void fn();                                                                     \
  TEST_CASE("backend parity: " what " on cpu [asan]") {                          \
    kind_under_test = device_kind::cpu;                                          \
    fn();                                                                        \
  }                                                                              \
  TEST_CASE("backend parity: " what " on cuda" * doctest::skip(!gpu_usable())) { \
    kind_under_test = device_kind::cuda;                                         \
    fn();                                                                        \
  }                                                                              \
  void fn()

BACKEND_PARITY_CASE(parity_upload_download_and_copy, "upload, download and copy") {
  const uint32_t seed = 1001;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (dtype type : {dtype::f32, dtype::f16, dtype::bf16, dtype::i32, dtype::i64}) {
      const tensor_shape shape{rnd.integer(1, 9), rnd.integer(1, 77)};
      const std::string what = std::string(dtype_name(type)) + shape.to_string();
      CAPTURE(what);
      const size_t n = static_cast<size_t>(shape.numel()) * dtype_size(type);
      std::vector<std::byte> data(n), more(n);
      for (size_t i = 0; i < n; ++i) {
        data[i] = static_cast<std::byte>(rnd.integer(0, 255));
        more[i] = static_cast<std::byte>(rnd.integer(0, 255));
      }
      // A whole upload reads back byte for byte, and the guards around it are untouched.
      guarded a = alloc_guarded(be, type, shape);
      be.upload(a.view, data.data(), n);
      CHECK(read_checked(be, a, what + " upload") == data);
      // A partial upload changes only the prefix; a partial download returns only the prefix.
      const size_t part = n / 3;
      be.upload(a.view, more.data(), part);
      std::vector<std::byte> want = data;
      std::copy(more.begin(), more.begin() + static_cast<std::ptrdiff_t>(part), want.begin());
      CHECK(read_checked(be, a, what + " partial upload") == want);
      std::vector<std::byte> prefix(part + 1, std::byte{0x5a});
      be.download(a.view, prefix.data(), part);
      CHECK(std::equal(prefix.begin(), prefix.begin() + static_cast<std::ptrdiff_t>(part), want.begin()));
      CHECK(prefix[part] == std::byte{0x5a});
      // copy: device to device, exact, nothing outside dst.
      guarded b = alloc_guarded(be, type, shape);
      be.copy(a.view, b.view);
      CHECK(read_checked(be, b, what + " copy") == want);
      CHECK(read_checked(be, a, what + " copy source") == want);
      // A copy onto a reshaped view of the same bytes is the identity.
      tensor flat = a.view.reshape({shape.numel()});
      be.copy(flat, a.view);
      CHECK(read_checked(be, a, what + " self copy") == want);
    }
  });
}

BACKEND_PARITY_CASE(parity_alloc_kv_cache, "alloc_kv_cache: a tensor of the shape that holds what is written") {
  const uint32_t seed = 1002;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    // A KV cache's shape: [n_layer * 2 * n_blocks, block_size, n_head_kv, head_dim]; no blocks at all is allowed.
    for (const tensor_shape shape : {tensor_shape{2 * 2 * 3, 16, 4, 8}, tensor_shape{0, 16, 2, 8}}) {
      for (dtype type : {dtype::f32, dtype::bf16, dtype::f16}) {
        const std::string what = std::string(dtype_name(type)) + shape.to_string();
        CAPTURE(what);
        const tensor t = be.alloc_kv_cache(type, shape);
        CHECK(t.type == type);
        CHECK(t.shape == shape);
        CHECK(t.where().kind == kind);
        const size_t n = static_cast<size_t>(shape.numel()) * dtype_size(type);
        if (n == 0)
          continue;
        std::vector<std::byte> data(n), back(n);
        for (std::byte& b : data)
          b = static_cast<std::byte>(rnd.integer(0, 255));
        be.upload(t, data.data(), n);
        be.download(t, back.data(), n);
        CHECK(back == data);
        if (kind == device_kind::cpu)  // on memory the kernel can back with transparent huge pages
          CHECK(reinterpret_cast<uintptr_t>(t.data()) % (uintptr_t{2} << 20) == 0);
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_import_host_and_alloc, "import_host and alloc") {
  const uint32_t seed = 1003;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    const std::vector<float> values = rnd.reals(3 * 37);
    tensor host = make_host_tensor(dtype::f32, {3, 37});
    std::memcpy(host.data(), values.data(), host.nbytes());
    tensor t = be.import_host(host);
    CHECK(t.where() == be.where());
    CHECK(t.type == dtype::f32);
    CHECK(t.shape == host.shape);
    CHECK(download_all(be, t) == values);
    if (kind == device_kind::cpu)
      CHECK(t.data() == host.data());  // the CPU backend hands host tensors back as they are
    tensor a = be.alloc(dtype::bf16, {5, 3, 2});
    CHECK(a.type == dtype::bf16);
    CHECK(a.shape == tensor_shape{5, 3, 2});
    CHECK(a.nbytes() == 60);
    CHECK(a.where() == be.where());
    CHECK(a.buf->size() >= a.nbytes());
  });
}

// ---- ops -------------------------------------------------------------------------------------------------------

BACKEND_PARITY_CASE(parity_embedding, "embedding") {
  const uint32_t seed = 2001;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (dtype type : weight_types) {
      for (int rep = 0; rep < 3; ++rep) {
        const int64_t vocab = rnd.integer(5, 90), n_embd = rnd.integer(1, 70), n = rnd.integer(1, 40);
        // A vocab shard: rows [row_begin, row_begin + rows) of the full table.
        const int64_t row_begin = rep == 0 ? 0 : rnd.integer(0, vocab - 1);
        const int64_t rows = rep == 0 ? vocab : rnd.integer(1, vocab - row_begin);
        const std::string what = std::string(dtype_name(type)) + " shard " + std::to_string(row_begin) + "+" +
                                 std::to_string(rows) + " of " + std::to_string(vocab) + " n_embd " +
                                 std::to_string(n_embd);
        CAPTURE(what);
        weight table = make_weight(be, type, {rows, n_embd}, rnd.reals(rows * n_embd, -3.0f, 3.0f));
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (int32_t& id : ids)  // ids anywhere in the vocabulary, a few outside it (both sides)
          id = static_cast<int32_t>(rnd.integer(-2, vocab + 2));
        ids[0] = static_cast<int32_t>(row_begin);
        ids.back() = static_cast<int32_t>(row_begin + rows - 1);
        guarded out = alloc_guarded(be, dtype::f32, {n, n_embd});
        be.embedding(input(be, dtype::i32, {n}, ids), table.t, row_begin, out.view);
        std::vector<double> ref(static_cast<size_t>(n * n_embd), 0.0);
        for (int64_t t = 0; t < n; ++t) {
          const int64_t r = ids[static_cast<size_t>(t)] - row_begin;
          if (r >= 0 && r < rows)
            for (int64_t i = 0; i < n_embd; ++i)
              ref[static_cast<size_t>(t * n_embd + i)] = table.exact[static_cast<size_t>(r * n_embd + i)];
        }
        test::check_close(read_as<float>(be, out, what), ref, 0.0, 0.0, what);  // exact: a conversion
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_rms_norm, "rms_norm") {
  const uint32_t seed = 2002;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    // Random narrow rows, and wide ones as the models have them (a multiple of 4: the GPU's 16-byte loads; one
    // that is not; one wider than a block's single pass).
    for (dtype type : weight_types) {
      for (bool in_place : {false, true}) {
        for (const int64_t wide : {int64_t{0}, int64_t{4096}, int64_t{4098}, int64_t{5120}}) {
          const int64_t n = wide == 0 ? rnd.integer(1, 9) : 2, width = wide == 0 ? rnd.integer(1, 300) : wide;
          const float eps = in_place ? 1e-6f : 1e-5f;
          const std::string what =
              std::string(dtype_name(type)) + " " + shape_str({n, width}) + (in_place ? " in place" : "");
          CAPTURE(what);
          const std::vector<float> x = rnd.reals(n * width, -4.0f, 4.0f);
          weight w = make_weight(be, type, {width}, rnd.reals(width, -2.0f, 2.0f));
          guarded out = alloc_guarded(be, dtype::f32, {n, width}, in_place ? x.data() : nullptr);
          if (in_place) {
            be.rms_norm(out.view, w.t, eps, out.view);
          } else {
            tensor tx = input(be, dtype::f32, {n, width}, x);
            be.rms_norm(tx, w.t, eps, out.view);
            CHECK(download_all(be, tx) == x);  // the input is left alone
          }
          std::vector<double> xd(x.begin(), x.end()), ref(x.size());
          for (int64_t r = 0; r < n; ++r)
            ref_rms_norm(xd.data() + r * width, width, w.exact, eps, ref.data() + r * width);
          test::check_close(read_as<float>(be, out, what), ref, 1e-6, 1e-5, what);
        }
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_add_rms_norm, "add_rms_norm") {
  const uint32_t seed = 2003;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (dtype type : weight_types) {
      for (const int64_t wide : {int64_t{0}, int64_t{4096}, int64_t{4098}}) {
        const int64_t n = wide == 0 ? rnd.integer(1, 7) : 3, width = wide == 0 ? rnd.integer(1, 260) : wide;
        const std::string what = std::string(dtype_name(type)) + " " + shape_str({n, width});
        CAPTURE(what);
        const std::vector<float> residual = rnd.reals(n * width, -3.0f, 3.0f), delta = rnd.reals(n * width);
        weight w = make_weight(be, type, {width}, rnd.reals(width, -2.0f, 2.0f));
        guarded res = alloc_guarded(be, dtype::f32, {n, width}, residual);
        guarded out = alloc_guarded(be, dtype::f32, {n, width});
        tensor td = input(be, dtype::f32, {n, width}, delta);
        be.add_rms_norm(res.view, td, w.t, 1e-5f, out.view);
        std::vector<double> sum(residual.size()), ref(residual.size());
        for (size_t i = 0; i < sum.size(); ++i)
          sum[i] = static_cast<double>(residual[i]) + delta[i];
        for (int64_t r = 0; r < n; ++r)
          ref_rms_norm(sum.data() + r * width, width, w.exact, 1e-5, ref.data() + r * width);
        // The residual holds the f32 sum (one rounding), out the norm of it.
        test::check_close(read_as<float>(be, res, what + " residual"), sum, 0.0, 1.2e-7, what + " residual");
        test::check_close(read_as<float>(be, out, what + " out"), ref, 1e-6, 1e-5, what + " out");
        CHECK(download_all(be, td) == delta);
      }
    }
  });
}

// `values` rounded to `type` in a host tensor of `shape`, as a loader hands a weight over.
tensor host_weight(dtype type, tensor_shape shape, const std::vector<float>& values) {
  const std::vector<uint8_t> bytes = test::to_dtype(values, type);
  tensor host = make_host_tensor(type, shape);
  if (!bytes.empty())
    std::memcpy(host.data(), bytes.data(), bytes.size());
  return host;
}

// A Linear weight as the model binds it: from host memory through import_linear_weight (which may pack it).
tensor linear_weight(backend& be, dtype type, tensor_shape shape, const std::vector<float>& values) {
  return be.import_linear_weight(host_weight(type, shape, values));
}

// The input as a weight of `type` multiplies it: bf16 weights take it rounded to bf16 (every backend).
double multiplied_input(float x, dtype type) {
  return type == dtype::bf16 ? static_cast<double>(bf16_to_f32(f32_to_bf16(x))) : static_cast<double>(x);
}

// float64 x w^T (+ bias) and each output's tolerance for `rel` per unit of summed magnitude.
void ref_linear(const std::vector<float>& x, const weight& w, dtype type, const std::vector<float>* bias,
                int64_t n_tokens, int64_t n_in, int64_t n_out, double rel, std::vector<double>& ref,
                std::vector<double>& tol) {
  ref.assign(static_cast<size_t>(n_tokens * n_out), 0.0);
  tol.assign(ref.size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = bias ? (*bias)[static_cast<size_t>(o)] : 0.0, mag = std::fabs(acc);
      for (int64_t i = 0; i < n_in; ++i) {
        const double p =
            multiplied_input(x[static_cast<size_t>(t * n_in + i)], type) * w.exact[static_cast<size_t>(o * n_in + i)];
        acc += p;
        mag += std::fabs(p);
      }
      ref[static_cast<size_t>(t * n_out + o)] = acc;
      // f32 accumulation error grows with the sum of magnitudes, not with |ref| (cancellation).
      tol[static_cast<size_t>(t * n_out + o)] = 1e-6 + rel * mag;
    }
  }
}

// The relative bound of a backend's matmul: the CPU's products are exact (bf16: of the rounded input); cuBLAS's
// f16 GEMM reads the input rounded to f16 (2^-11 per product) and its bf16 GEMM is held to its earlier bound.
double matmul_rel(device_kind kind, dtype type) {
  if (kind == device_kind::cuda && type == dtype::f16)
    return 1.2e-3;
  if (kind == device_kind::cuda && type == dtype::bf16)
    return 8e-3;
  return 4e-6;
}

BACKEND_PARITY_CASE(parity_matmul, "matmul") {
  const uint32_t seed = 2004;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    // 1 and 3 tokens take the CPU's GEMV path, 97 and 130 its GEMM path; `linear` binds the weight as the model
    // does (the CPU packs bf16 weights for its vdpbf16ps kernels).
    for (int64_t n_tokens : {1, 3, 97, 130}) {
      for (dtype type : weight_types) {
        for (bool with_bias : {false, true}) {
          for (bool linear : {false, true}) {
            const int64_t n_in = rnd.integer(0, 1) ? 67 : rnd.integer(1, 90);
            const int64_t n_out = rnd.integer(0, 1) ? 33 : rnd.integer(1, 70);
            const std::string what = std::string(dtype_name(type)) + " " + shape_str({n_tokens, n_in}) + " x " +
                                     shape_str({n_out, n_in}) + (with_bias ? " + bias" : "") +
                                     (linear ? " (import_linear_weight)" : "");
            CAPTURE(what);
            const std::vector<float> x = rnd.reals(n_tokens * n_in), bias = rnd.reals(n_out);
            const std::vector<float> values = rnd.reals(n_out * n_in);
            weight w = make_weight(be, type, {n_out, n_in}, values);
            if (linear)
              w.t = linear_weight(be, type, {n_out, n_in}, values);
            tensor tx = input(be, dtype::f32, {n_tokens, n_in}, x);
            tensor tb = with_bias ? input(be, dtype::f32, {n_out}, bias) : tensor{};
            guarded y = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
            be.matmul(tx, w.t, tb, y.view);
            std::vector<double> ref, tol;
            ref_linear(x, w, type, with_bias ? &bias : nullptr, n_tokens, n_in, n_out, matmul_rel(kind, type), ref,
                       tol);
            const std::vector<float> got = read_as<float>(be, y, what);
            test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what);
          }
        }
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_stacked_linear_weight,
                    "import_stacked_linear_weight is import_linear_weight of the rows stacked") {
  const uint32_t seed = 2009;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    // Parts of whole 32-row panels but the last (the CPU packs each in place), and parts that are not (stacked first).
    const std::vector<std::vector<int64_t>> layouts = {{64, 32, 40}, {96, 7}, {33, 31}, {5}, {32, 0, 64}};
    for (const std::vector<int64_t>& rows : layouts) {
      for (dtype type : weight_types) {
        const int64_t n_in = 67, n_tokens = 2;
        std::string what = std::string(dtype_name(type)) + " parts";
        for (int64_t r : rows) {
          what += ' ';
          what += std::to_string(r);
        }
        CAPTURE(what);
        std::vector<float> all;
        std::vector<tensor> parts;
        for (int64_t r : rows) {
          const std::vector<float> values = rnd.reals(r * n_in);
          all.insert(all.end(), values.begin(), values.end());
          parts.push_back(host_weight(type, {r, n_in}, values));
        }
        const int64_t n_out = static_cast<int64_t>(all.size()) / n_in;
        const tensor stacked = be.import_stacked_linear_weight(parts);
        const tensor reference = linear_weight(be, type, {n_out, n_in}, all);
        CHECK(stacked.shape == reference.shape);
        CHECK(stacked.layout == reference.layout);
        const tensor tx = input(be, dtype::f32, {n_tokens, n_in}, rnd.reals(n_tokens * n_in));
        guarded y_stacked = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
        guarded y_reference = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
        be.matmul(tx, stacked, tensor{}, y_stacked.view);
        be.matmul(tx, reference, tensor{}, y_reference.view);
        const std::vector<float> got = read_as<float>(be, y_stacked, what),
                                 want = read_as<float>(be, y_reference, what);
        REQUIRE(got.size() == want.size());
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);  // the same bits
      }
    }
    // Parts that do not stack are refused by name.
    std::vector<tensor> mixed;
    mixed.push_back(make_host_tensor(dtype::bf16, {32, 8}));
    mixed.push_back(make_host_tensor(dtype::f32, {32, 8}));
    CHECK_THROWS_WITH_AS(be.import_stacked_linear_weight(mixed), doctest::Contains("does not stack"),
                         std::invalid_argument);
    std::vector<tensor> widths;
    widths.push_back(make_host_tensor(dtype::bf16, {32, 8}));
    widths.push_back(make_host_tensor(dtype::bf16, {32, 9}));
    CHECK_THROWS_AS(be.import_stacked_linear_weight(widths), std::invalid_argument);
    CHECK_THROWS_AS(be.import_stacked_linear_weight({}), std::invalid_argument);
  });
}

BACKEND_PARITY_CASE(parity_matmul_group_and_silu_gate, "matmul_group and matmul_silu_gate") {
  const uint32_t seed = 2014;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    for (int64_t n_tokens : {1, 5, 100}) {
      for (dtype type : weight_types) {
        const int64_t n_in = rnd.integer(1, 80);
        const std::string what = std::string(dtype_name(type)) + " " + shape_str({n_tokens, n_in});
        CAPTURE(what);
        const std::vector<float> x = rnd.reals(n_tokens * n_in);
        const tensor tx = input(be, dtype::f32, {n_tokens, n_in}, x);
        const double rel = matmul_rel(kind, type);
        // q/k/v-like: three outputs, the first two with a bias.
        const int64_t n_outs[] = {rnd.integer(1, 70), rnd.integer(1, 40), rnd.integer(1, 40)};
        std::vector<weight> ws;
        std::vector<std::vector<float>> biases;
        std::vector<guarded> ys;
        std::vector<linear_out> outs;
        for (int i = 0; i < 3; ++i) {
          const std::vector<float> values = rnd.reals(n_outs[i] * n_in);
          ws.push_back(make_weight(be, type, {n_outs[i], n_in}, values));
          ws.back().t = linear_weight(be, type, {n_outs[i], n_in}, values);
          biases.push_back(rnd.reals(n_outs[i]));
          ys.push_back(alloc_guarded(be, dtype::f32, {n_tokens, n_outs[i]}));
        }
        for (int i = 0; i < 3; ++i)
          outs.push_back({ws[static_cast<size_t>(i)].t,
                          i < 2 ? input(be, dtype::f32, {n_outs[i]}, biases[static_cast<size_t>(i)]) : tensor{},
                          ys[static_cast<size_t>(i)].view});
        be.matmul_group(tx, outs);
        for (size_t i = 0; i < 3; ++i) {
          std::vector<double> ref, tol;
          ref_linear(x, ws[i], type, i < 2 ? &biases[i] : nullptr, n_tokens, n_in, n_outs[i], rel, ref, tol);
          const std::string out_what = what + " group output " + std::to_string(i);
          const std::vector<float> got = read_as<float>(be, ys[i], out_what);
          test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, out_what);
        }

        const int64_t n_ff = rnd.integer(1, 70);
        const std::vector<float> gv = rnd.reals(n_ff * n_in), uv = rnd.reals(n_ff * n_in);
        weight wg = make_weight(be, type, {n_ff, n_in}, gv), wu = make_weight(be, type, {n_ff, n_in}, uv);
        wg.t = linear_weight(be, type, {n_ff, n_in}, gv);
        wu.t = linear_weight(be, type, {n_ff, n_in}, uv);
        guarded up = alloc_guarded(be, dtype::f32, {n_tokens, n_ff}),
                out = alloc_guarded(be, dtype::f32, {n_tokens, n_ff});
        be.matmul_silu_gate(tx, wg.t, wu.t, up.view, out.view);
        std::vector<double> g_ref, g_tol, u_ref, u_tol;
        ref_linear(x, wg, type, nullptr, n_tokens, n_in, n_ff, rel, g_ref, g_tol);
        ref_linear(x, wu, type, nullptr, n_tokens, n_in, n_ff, rel, u_ref, u_tol);
        std::vector<double> ref, tol;
        test::silu_gate_reference(g_ref, g_tol, u_ref, u_tol, ref, tol);
        const std::vector<float> got = read_as<float>(be, out, what + " silu gate");
        test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " silu gate");
      }
    }
  });
}

// 1 to 8 tokens over bf16 weights of whole 16-byte rows: on CUDA the small-batch GEMV (kernels/cuda/gemv.hpp), for
// matmul, a q/k/v group in one launch and gate/up with their SiLU in one launch, with f32 sums only (held to 2e-5
// per unit of magnitude, not cuBLAS's bf16 bound). A 9-token matmul (cuBLAS on CUDA) checks the size rule's edge.
BACKEND_PARITY_CASE(parity_small_batch_bf16, "bf16 matmul, matmul_group and matmul_silu_gate at 1 to 9 tokens") {
  const uint32_t seed = 2024;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    for (int64_t n_tokens = 1; n_tokens <= 9; ++n_tokens) {
      const int64_t n_in = n_tokens % 2 == 0 ? 64 : 264;  // 264: 33 chunks, one lane folds two
      const std::string what = "bf16 " + shape_str({n_tokens, n_in});
      CAPTURE(what);
      const double rel = n_tokens <= 8 ? 2e-5 : matmul_rel(kind, dtype::bf16);
      const std::vector<float> x = rnd.reals(n_tokens * n_in);
      const tensor tx = input(be, dtype::f32, {n_tokens, n_in}, x);
      const int64_t n_outs[] = {rnd.integer(1, 70), rnd.integer(1, 40), rnd.integer(1, 40)};
      std::vector<weight> ws;
      std::vector<std::vector<float>> biases;
      std::vector<guarded> ys;
      std::vector<linear_out> outs;
      for (int i = 0; i < 3; ++i) {
        const std::vector<float> values = rnd.reals(n_outs[i] * n_in);
        ws.push_back(make_weight(be, dtype::bf16, {n_outs[i], n_in}, values));
        ws.back().t = linear_weight(be, dtype::bf16, {n_outs[i], n_in}, values);
        biases.push_back(rnd.reals(n_outs[i]));
        ys.push_back(alloc_guarded(be, dtype::f32, {n_tokens, n_outs[i]}));
      }
      for (int i = 0; i < 3; ++i)
        outs.push_back({ws[static_cast<size_t>(i)].t,
                        i != 1 ? input(be, dtype::f32, {n_outs[i]}, biases[static_cast<size_t>(i)]) : tensor{},
                        ys[static_cast<size_t>(i)].view});
      be.matmul_group(tx, outs);
      for (size_t i = 0; i < 3; ++i) {
        std::vector<double> ref, tol;
        ref_linear(x, ws[i], dtype::bf16, i != 1 ? &biases[i] : nullptr, n_tokens, n_in, n_outs[i], rel, ref, tol);
        const std::string out_what = what + " group output " + std::to_string(i);
        const std::vector<float> got = read_as<float>(be, ys[i], out_what);
        test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, out_what);
      }
      // matmul alone, with the first weight's bias.
      guarded y = alloc_guarded(be, dtype::f32, {n_tokens, n_outs[0]});
      be.matmul(tx, ws[0].t, input(be, dtype::f32, {n_outs[0]}, biases[0]), y.view);
      {
        std::vector<double> ref, tol;
        ref_linear(x, ws[0], dtype::bf16, &biases[0], n_tokens, n_in, n_outs[0], rel, ref, tol);
        const std::vector<float> got = read_as<float>(be, y, what + " matmul");
        test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " matmul");
      }
      const int64_t n_ff = rnd.integer(1, 70);
      const std::vector<float> gv = rnd.reals(n_ff * n_in), uv = rnd.reals(n_ff * n_in);
      weight wg = make_weight(be, dtype::bf16, {n_ff, n_in}, gv), wu = make_weight(be, dtype::bf16, {n_ff, n_in}, uv);
      wg.t = linear_weight(be, dtype::bf16, {n_ff, n_in}, gv);
      wu.t = linear_weight(be, dtype::bf16, {n_ff, n_in}, uv);
      guarded up = alloc_guarded(be, dtype::f32, {n_tokens, n_ff}),
              out = alloc_guarded(be, dtype::f32, {n_tokens, n_ff});
      be.matmul_silu_gate(tx, wg.t, wu.t, up.view, out.view);
      std::vector<double> g_ref, g_tol, u_ref, u_tol, ref, tol;
      ref_linear(x, wg, dtype::bf16, nullptr, n_tokens, n_in, n_ff, rel, g_ref, g_tol);
      ref_linear(x, wu, dtype::bf16, nullptr, n_tokens, n_in, n_ff, rel, u_ref, u_tol);
      test::silu_gate_reference(g_ref, g_tol, u_ref, u_tol, ref, tol);
      const std::vector<float> got = read_as<float>(be, out, what + " silu gate");
      test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " silu gate");
    }
  });
}

// The norms writing the type the next matmul reads as it is (backend::matmul_input_type of a bf16 weight: f32 on the
// CPU, bf16 on CUDA, rounded once from the f32 norm), then matmul, matmul_group and matmul_silu_gate reading that
// activation: at 1 and 5 tokens (CUDA's GEMV with a bf16 x) and 12 (cuBLAS over a bf16 x, no conversion); and
// matmul_silu_gate and silu_mul writing their product in that type (the down projection's input).
BACKEND_PARITY_CASE(parity_norm_into_matmul_input, "norms into the matmul input type, and the matmuls that read it") {
  const uint32_t seed = 2025;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    for (const int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{12}}) {
      for (const int64_t width : {int64_t{256}, int64_t{4096}}) {
        for (const bool add : {false, true}) {
          const int64_t n_out = rnd.integer(1, 40);
          const std::vector<float> lin = rnd.reals(n_out * width, -0.1f, 0.1f);
          weight wl = make_weight(be, dtype::bf16, {n_out, width}, lin);
          wl.t = linear_weight(be, dtype::bf16, {n_out, width}, lin);
          const dtype act = be.matmul_input_type(wl.t);
          CHECK(act == (kind == device_kind::cuda ? dtype::bf16 : dtype::f32));
          const std::string what = std::string(add ? "add_rms_norm" : "rms_norm") + " into " +
                                   std::string(dtype_name(act)) + " " + shape_str({n_tokens, width});
          CAPTURE(what);
          const std::vector<float> residual = rnd.reals(n_tokens * width, -3.0f, 3.0f),
                                   delta = rnd.reals(n_tokens * width);
          weight wn = make_weight(be, dtype::bf16, {width}, rnd.reals(width, 0.5f, 1.5f));
          guarded res = alloc_guarded(be, dtype::f32, {n_tokens, width}, residual);
          guarded h = alloc_guarded(be, act, {n_tokens, width});
          if (add)
            be.add_rms_norm(res.view, input(be, dtype::f32, {n_tokens, width}, delta), wn.t, 1e-5f, h.view);
          else
            be.rms_norm(res.view, wn.t, 1e-5f, h.view);
          std::vector<double> sum(residual.size()), ref(residual.size());
          for (size_t i = 0; i < sum.size(); ++i)
            sum[i] = add ? static_cast<double>(residual[i] + delta[i]) : residual[i];
          for (int64_t r = 0; r < n_tokens; ++r)
            ref_rms_norm(sum.data() + r * width, width, wn.exact, 1e-5, ref.data() + r * width);
          std::vector<float> hv(residual.size());
          if (act == dtype::bf16) {
            const std::vector<uint16_t> bits = read_as<uint16_t>(be, h, what);
            for (size_t i = 0; i < bits.size(); ++i)
              hv[i] = bf16_to_f32(bits[i]);
          } else {
            hv = read_as<float>(be, h, what);
          }
          // One bf16 rounding (half a unit in the 8th bit) on top of the f32 norm's error.
          test::check_close(hv, ref, 1e-6, act == dtype::bf16 ? 1.0 / 256 + 1e-5 : 1e-5, what);
          // The matmuls read the activation as stored: the reference takes those values.
          const double rel = n_tokens <= 8 ? 2e-5 : matmul_rel(kind, dtype::bf16);
          std::vector<double> lref, ltol;
          ref_linear(hv, wl, dtype::bf16, nullptr, n_tokens, width, n_out, rel, lref, ltol);
          guarded y = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
          be.matmul(h.view, wl.t, tensor{}, y.view);
          const std::vector<float> got = read_as<float>(be, y, what + " matmul");
          test::check_close(got.data(), lref.data(), got.size(), ltol.data(), 0.0, 1e-6, what + " matmul");
          guarded y2 = alloc_guarded(be, dtype::f32, {n_tokens, n_out}),
                  y3 = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
          const linear_out two[] = {{wl.t, tensor{}, y2.view}, {wl.t, tensor{}, y3.view}};
          be.matmul_group(h.view, two);
          for (const guarded* g : {&y2, &y3}) {
            const std::vector<float> gg = read_as<float>(be, *g, what + " group");
            test::check_close(gg.data(), lref.data(), gg.size(), ltol.data(), 0.0, 1e-6, what + " group");
          }
          guarded up = alloc_guarded(be, dtype::f32, {n_tokens, n_out}),
                  out = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
          be.matmul_silu_gate(h.view, wl.t, wl.t, up.view, out.view);
          std::vector<double> sref, stol;
          test::silu_gate_reference(lref, ltol, lref, ltol, sref, stol);
          const std::vector<float> sg = read_as<float>(be, out, what + " silu gate");
          test::check_close(sg.data(), sref.data(), sg.size(), stol.data(), 0.0, 1e-6, what + " silu gate");
          // SiLU×mul's product in the input type of the down projection: matmul_silu_gate and silu_mul.
          std::vector<double> act_tol(stol);
          for (size_t i = 0; i < act_tol.size(); ++i)
            act_tol[i] += act == dtype::bf16 ? std::fabs(sref[i]) / 256 : 0.0;
          const auto read_act = [&](const guarded& g, const std::string& label) {
            if (act == dtype::f32)
              return read_as<float>(be, g, label);
            const std::vector<uint16_t> bits = read_as<uint16_t>(be, g, label);
            std::vector<float> v(bits.size());
            for (size_t i = 0; i < bits.size(); ++i)
              v[i] = bf16_to_f32(bits[i]);
            return v;
          };
          guarded out_act = alloc_guarded(be, act, {n_tokens, n_out});
          be.matmul_silu_gate(h.view, wl.t, wl.t, up.view, out_act.view);
          const std::vector<float> sa = read_act(out_act, what + " silu gate into the input type");
          test::check_close(sa.data(), sref.data(), sa.size(), act_tol.data(), 0.0, 1e-6,
                            what + " silu gate into the input type");
          guarded g_in = alloc_guarded(be, dtype::f32, {n_tokens, n_out}, sg),
                  silu_act = alloc_guarded(be, act, {n_tokens, n_out});
          const std::vector<float> ones(static_cast<size_t>(n_tokens * n_out), 1.0f);
          be.silu_mul(g_in.view, input(be, dtype::f32, {n_tokens, n_out}, ones), silu_act.view);
          std::vector<double> silu_ref(sg.size()), silu_tol(sg.size());
          for (size_t i = 0; i < sg.size(); ++i) {
            silu_ref[i] = sg[i] / (1.0 + std::exp(-static_cast<double>(sg[i])));
            silu_tol[i] = 1e-6 * std::fabs(silu_ref[i]) + (act == dtype::bf16 ? std::fabs(silu_ref[i]) / 256 : 0.0);
          }
          const std::vector<float> sm = read_act(silu_act, what + " silu_mul into the input type");
          test::check_close(sm.data(), silu_ref.data(), sm.size(), silu_tol.data(), 0.0, 1e-6,
                            what + " silu_mul into the input type");
        }
      }
    }
  });
}

// A quantized Linear weight with random codes, zero points (GPTQ v1's 16 among the 4-bit ones) and scales;
// group_size 0: per channel.
quantized_linear random_quantized(random_source& rnd, int bits, int64_t n_out, int64_t n_in, int64_t group_size) {
  quantized_linear w;
  w.bits = bits;
  w.n_out = n_out;
  w.n_in = n_in;
  w.group_size = group_size == 0 ? n_in : group_size;
  for (int64_t i = 0; i < n_out * n_in; ++i)
    w.codes.push_back(static_cast<uint8_t>(rnd.integer(0, (1 << bits) - 1)));
  for (int64_t i = 0; i < n_out * w.n_groups(); ++i) {
    w.scales.push_back(rnd.real(0.002f, 0.05f));
    w.zeros.push_back(static_cast<uint8_t>(rnd.integer(0, bits == 4 ? 16 : 255)));
  }
  return w;
}

// float64 x w^T (+ bias) of the exactly dequantized weight with x rounded to bf16 (what every backend's weight-only
// path multiplies: the dequantized bf16 weight, or the codes themselves), tolerance `rel` per unit of magnitude.
void ref_quantized(const std::vector<float>& x, const quantized_linear& w, const std::vector<float>* bias,
                   int64_t n_tokens, double rel, std::vector<double>& ref, std::vector<double>& tol) {
  weight exact;
  exact.exact.resize(static_cast<size_t>(w.n_out * w.n_in));
  for (int64_t o = 0; o < w.n_out; ++o)
    for (int64_t i = 0; i < w.n_in; ++i)
      exact.exact[static_cast<size_t>(o * w.n_in + i)] = w.dequantized(o, i);
  ref_linear(x, exact, dtype::bf16, bias, n_tokens, w.n_in, w.n_out, rel, ref, tol);
}

// Weight-only int4 / int8 through import_quantized_linear: the backend's own layout where it has kernels (the CUDA
// GEMV up to 8 tokens, dequantized chunks beyond), the bf16 default elsewhere. The bound is the bf16 weight's: each
// product within 2^-9 of the exact one.
BACKEND_PARITY_CASE(parity_quantized_matmul, "matmul, matmul_group and matmul_silu_gate on quantized weights") {
  const uint32_t seed = 2015;
  CAPTURE(seed);
  constexpr double rel = 4e-3;
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int bits : {4, 8}) {
      for (int64_t group : {int64_t{16}, int64_t{32}, int64_t{0}}) {
        for (int64_t n_tokens : {1, 3, 8, 97}) {
          const bool with_bias = n_tokens != 3;
          const int64_t n_in = 32 * rnd.integer(1, 6), n_out = 2 * rnd.integer(0, 40) + 1;  // odd n_out
          const quantized_linear w = random_quantized(rnd, bits, n_out, n_in, group);
          const std::string what =
              w.describe() + " x " + std::to_string(n_tokens) + " tokens" + (with_bias ? " + bias" : "");
          CAPTURE(what);
          const tensor tw = be.import_quantized_linear(w);
          CHECK(tw.shape == tensor_shape{n_out, n_in});
          const std::vector<float> x = rnd.reals(n_tokens * n_in, -2.0f, 2.0f), bias = rnd.reals(n_out);
          const tensor tx = input(be, dtype::f32, {n_tokens, n_in}, x);
          const tensor tb = with_bias ? input(be, dtype::f32, {n_out}, bias) : tensor{};
          guarded y = alloc_guarded(be, dtype::f32, {n_tokens, n_out});
          be.matmul(tx, tw, tb, y.view);
          std::vector<double> ref, tol;
          ref_quantized(x, w, with_bias ? &bias : nullptr, n_tokens, rel, ref, tol);
          const std::vector<float> got = read_as<float>(be, y, what);
          test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what);
        }
      }
    }
    // Two quantized outputs of one input (int4 with a bias, int8), and a quantized SwiGLU pair.
    for (int64_t n_tokens : {2, 40}) {
      const int64_t n_in = 128;
      const std::string what = "group of " + std::to_string(n_tokens) + " tokens";
      CAPTURE(what);
      const std::vector<float> x = rnd.reals(n_tokens * n_in);
      const tensor tx = input(be, dtype::f32, {n_tokens, n_in}, x);
      const quantized_linear wa = random_quantized(rnd, 4, 45, n_in, 64), wb = random_quantized(rnd, 8, 17, n_in, 0);
      const std::vector<float> bias = rnd.reals(45);
      guarded ya = alloc_guarded(be, dtype::f32, {n_tokens, 45}), yb = alloc_guarded(be, dtype::f32, {n_tokens, 17});
      const linear_out outs[] = {{be.import_quantized_linear(wa), input(be, dtype::f32, {45}, bias), ya.view},
                                 {be.import_quantized_linear(wb), tensor{}, yb.view}};
      be.matmul_group(tx, outs);
      std::vector<double> ref, tol;
      ref_quantized(x, wa, &bias, n_tokens, rel, ref, tol);
      std::vector<float> got = read_as<float>(be, ya, what + " a");
      test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " a");
      ref_quantized(x, wb, nullptr, n_tokens, rel, ref, tol);
      got = read_as<float>(be, yb, what + " b");
      test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " b");

      const int64_t n_ff = 33;
      const quantized_linear wg = random_quantized(rnd, 4, n_ff, n_in, 32),
                             wu = random_quantized(rnd, 4, n_ff, n_in, 32);
      guarded up = alloc_guarded(be, dtype::f32, {n_tokens, n_ff}),
              out = alloc_guarded(be, dtype::f32, {n_tokens, n_ff});
      be.matmul_silu_gate(tx, be.import_quantized_linear(wg), be.import_quantized_linear(wu), up.view, out.view);
      std::vector<double> g_ref, g_tol, u_ref, u_tol;
      ref_quantized(x, wg, nullptr, n_tokens, rel, g_ref, g_tol);
      ref_quantized(x, wu, nullptr, n_tokens, rel, u_ref, u_tol);
      test::silu_gate_reference(g_ref, g_tol, u_ref, u_tol, ref, tol);
      got = read_as<float>(be, out, what + " silu gate");
      test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " silu gate");
    }
  });
}

BACKEND_PARITY_CASE(parity_make_rope_table_and_rope, "make_rope_table and rope") {
  const uint32_t seed = 2005;
  CAPTURE(seed);
  struct rope_case {
    const char* name;
    rope_config cfg;
  };
  std::vector<rope_case> cases(3);
  cases[0] = {"default", rope_config{64, 10000.0, {}}};
  cases[1] = {"linear", rope_config{18, 500000.0, {}}};
  cases[1].cfg.scaling.type = rope_scaling::kind::linear;
  cases[1].cfg.scaling.factor = 4.0;
  cases[2] = {"llama3", rope_config{128, 500000.0, {}}};
  cases[2].cfg.scaling = {rope_scaling::kind::llama3, 8.0, 1.0, 4.0, 8192};

  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (const rope_case& rc : cases) {
      const int64_t hd = rc.cfg.head_dim, half = hd / 2;
      rope_table table = be.make_rope_table(rc.cfg);
      CHECK(table.head_dim == hd);
      REQUIRE(table.inv_freq.numel() == half);
      CHECK(table.inv_freq.type == dtype::f32);
      CHECK(table.inv_freq.where() == be.where());
      const std::vector<float> inv = download_all(be, table.inv_freq);
      // transformers computes the table in float32: a few ulp from the float64 formula.
      test::check_close(inv, ref_inv_freq(rc.cfg), 0.0, 2e-6, std::string(rc.name) + " inv_freq");

      for (int norm = 0; norm < 4; ++norm) {  // 0: none, 1..3: q/k norm with an f32/f16/bf16 weight
        const int64_t n_tokens = rnd.integer(1, 13), n_head_kv = rnd.integer(1, 3), n_head = n_head_kv * 3;
        const std::string what = std::string(rc.name) + " n_tokens " + std::to_string(n_tokens) + " n_head " +
                                 std::to_string(n_head) + "/" + std::to_string(n_head_kv) + " norm " +
                                 std::to_string(norm);
        CAPTURE(what);
        std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
        for (int32_t& p : pos)
          p = static_cast<int32_t>(rnd.integer(0, 4999));
        pos[0] = 0;
        pos.back() = 4999;
        const std::vector<float> q = rnd.reals(n_tokens * n_head * hd, -2.0f, 2.0f);
        const std::vector<float> k = rnd.reals(n_tokens * n_head_kv * hd, -2.0f, 2.0f);
        guarded tq = alloc_guarded(be, dtype::f32, {n_tokens, n_head, hd}, q);
        guarded tk = alloc_guarded(be, dtype::f32, {n_tokens, n_head_kv, hd}, k);
        weight qn, kn;
        if (norm > 0) {
          qn = make_weight(be, weight_types[norm - 1], {hd}, rnd.reals(hd, 0.5f, 1.5f));
          kn = make_weight(be, weight_types[norm - 1], {hd}, rnd.reals(hd, 0.5f, 1.5f));
        }
        be.rope(table, input(be, dtype::i32, {n_tokens}, pos), tq.view, tk.view, qn.t, kn.t, 1e-6f);

        // Reference: the (checked) table's frequencies, angles and rotation in float64, HF rotate_half pairs.
        auto reference = [&](const std::vector<float>& v, int64_t heads, const weight& nw, std::vector<double>& ref,
                             std::vector<double>& tol) {
          ref.assign(v.size(), 0.0);
          tol.assign(v.size(), 0.0);
          std::vector<double> h(static_cast<size_t>(hd));
          for (int64_t t = 0; t < n_tokens; ++t) {
            for (int64_t head = 0; head < heads; ++head) {
              const size_t base = static_cast<size_t>((t * heads + head) * hd);
              for (int64_t i = 0; i < hd; ++i)
                h[static_cast<size_t>(i)] = v[base + static_cast<size_t>(i)];
              if (!nw.t.empty())
                ref_rms_norm(h.data(), hd, nw.exact, 1e-6, h.data());
              for (int64_t i = 0; i < half; ++i) {
                const double angle = pos[static_cast<size_t>(t)] * static_cast<double>(inv[static_cast<size_t>(i)]);
                const double a = h[static_cast<size_t>(i)], b = h[static_cast<size_t>(i + half)];
                ref[base + static_cast<size_t>(i)] = a * std::cos(angle) - b * std::sin(angle);
                ref[base + static_cast<size_t>(i + half)] = b * std::cos(angle) + a * std::sin(angle);
                // Float rounding of the pair's inputs and of cos/sin: relative to the pair, not to one element.
                tol[base + static_cast<size_t>(i)] = tol[base + static_cast<size_t>(i + half)] =
                    1e-6 + 1e-6 * (std::fabs(a) + std::fabs(b));
              }
            }
          }
        };
        std::vector<double> ref, tol;
        reference(q, n_head, qn, ref, tol);
        std::vector<float> got = read_as<float>(be, tq, what + " q");
        test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " q");
        reference(k, n_head_kv, kn, ref, tol);
        got = read_as<float>(be, tk, what + " k");
        test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-6, what + " k");
      }
    }
  });
}

namespace {

// One attention step: sequences mixing decode rows, prefill chunks in the middle of a sequence and whole prompts,
// over random non-contiguous block tables. The cache is filled in two write_kv calls (the history, with padding
// rows, then this step's rows) and checked; then paged_attention against float64. Under a window, the
// block-table entries of blocks wholly before every query row's window point at a block nobody wrote (NaN): a
// backend must skip them, not read and mask them.
// A KV cache element type with its scales (fp8: the codes of x / scale; the others ignore them).
struct kv_format {
  dtype type = dtype::f32;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// The bytes of x as element type `type` under `scale` (fp8: the code of x / scale), and the value they stand for.
void encode_kv(float x, const kv_format& f, float scale, std::byte* dst) {
  if (f.type == dtype::fp8_e4m3)
    x /= scale;
  uint64_t slot = 0;
  store_from_f32(&slot, f.type, 0, x);
  std::memcpy(dst, &slot, dtype_size(f.type));
}
float kv_value(float x, const kv_format& f, float scale) {
  std::byte b[8]{};
  encode_kv(x, f, scale, b);
  uint64_t slot = 0;
  std::memcpy(&slot, b, sizeof slot);
  const float v = load_as_f32(&slot, f.type, 0);
  return f.type == dtype::fp8_e4m3 ? v * scale : v;
}

// `tensor_core_chunks`: the backend runs prefill chunks of a 16-bit or fp8 cache through tensor cores (CUDA: a
// sequence with cuda::prefill::min_rows query rows or more, head_dim 64 or 128), whose 16-bit q and softmax weights
// those rows are held to sixteen_bit_operand_bound for; the GPU tests hold that kernel to its CPU emulation bit for
// bit.
void attention_case(backend& be, random_source& rnd, int64_t n_head_kv, int64_t gqa, int64_t head_dim,
                    int64_t block_size, int64_t window, const kv_format& kv = {}, bool tensor_core_chunks = false) {
  const int64_t n_head = n_head_kv * gqa, kv_row = n_head_kv * head_dim;
  const std::string what = "n_head " + std::to_string(n_head) + "/" + std::to_string(n_head_kv) + " head_dim " +
                           std::to_string(head_dim) + " block_size " + std::to_string(block_size) + " window " +
                           std::to_string(window) + " kv " + std::string{dtype_name(kv.type)} + " scales " +
                           std::to_string(kv.k_scale) + "/" + std::to_string(kv.v_scale);
  CAPTURE(what);

  struct seq_spec {
    int64_t context, n_query;
  };
  std::vector<seq_spec> specs;
  const int64_t n_seqs = rnd.integer(3, 6);
  for (int64_t s = 0; s < n_seqs; ++s) {
    const int64_t context = rnd.integer(1, 60);
    switch (s % 3) {
      case 0:
        specs.push_back({context, 1});  // decode
        break;
      case 1:
        specs.push_back({context, rnd.integer(1, context)});  // a prefill chunk
        break;
      default:
        specs.push_back({context, context});  // a whole prompt
    }
  }

  int64_t blocks_needed = 0;
  for (const seq_spec& s : specs)
    blocks_needed += (s.context + block_size - 1) / block_size;
  const int64_t n_blocks = blocks_needed + 3;
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rnd.gen);
  const int32_t never_written = pool.back();

  const tensor_shape cache_shape{n_blocks, block_size, n_head_kv, head_dim};
  guarded kc = alloc_guarded(be, kv.type, cache_shape), vc = alloc_guarded(be, kv.type, cache_shape);
  const kv_layer cache{kc.view, vc.view, kv.k_scale, kv.v_scale};

  // Block tables, dense per-sequence k/v, and the slots of the history and of this step.
  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> dense_k, dense_v;
  std::vector<int64_t> hist_slots, step_slots;
  std::vector<float> hist_k, hist_v, step_k, step_v;
  std::vector<int32_t> step_pos, host_seqs, host_tables;
  std::vector<size_t> row_seq;
  // What the cache must hold: the sentinel, and each written slot's row in the cache's type.
  const size_t esize = dtype_size(kv.type);
  std::vector<std::byte> expect_k = sentinel_bytes(static_cast<size_t>(cache_shape.numel()) * esize),
                         expect_v = expect_k;
  size_t next = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const seq_spec& sp = specs[s];
    const int64_t nb = (sp.context + block_size - 1) / block_size;
    tables.emplace_back(pool.begin() + static_cast<std::ptrdiff_t>(next),
                        pool.begin() + static_cast<std::ptrdiff_t>(next + static_cast<size_t>(nb)));
    next += static_cast<size_t>(nb);
    dense_k.push_back(rnd.reals(sp.context * kv_row));
    dense_v.push_back(rnd.reals(sp.context * kv_row));
    const int64_t first_query = sp.context - sp.n_query;
    const int64_t first_seen = window > 0 ? std::max<int64_t>(0, first_query - window + 1) : 0;
    const int64_t first_kept_block = first_seen / block_size;  // earlier blocks are "freed" for this step
    for (int64_t p = first_kept_block * block_size; p < sp.context; ++p) {
      const int64_t slot = tables[s][static_cast<size_t>(p / block_size)] * block_size + p % block_size;
      const auto kb = dense_k[s].begin() + p * kv_row, vb = dense_v[s].begin() + p * kv_row;
      for (int64_t i = 0; i < kv_row; ++i) {
        const size_t at = static_cast<size_t>(slot * kv_row + i) * esize;
        encode_kv(kb[i], kv, kv.k_scale, expect_k.data() + at);
        encode_kv(vb[i], kv, kv.v_scale, expect_v.data() + at);
      }
      if (p >= first_query) {
        step_slots.push_back(slot);
        step_k.insert(step_k.end(), kb, kb + kv_row);
        step_v.insert(step_v.end(), vb, vb + kv_row);
        step_pos.push_back(static_cast<int32_t>(p));
        row_seq.push_back(s);
      } else {
        hist_slots.push_back(slot);
        hist_k.insert(hist_k.end(), kb, kb + kv_row);
        hist_v.insert(hist_v.end(), vb, vb + kv_row);
        if (p % 4 == 1) {  // a padding row: slot -1, never written
          hist_slots.push_back(-1);
          hist_k.insert(hist_k.end(), static_cast<size_t>(kv_row), 1e30f);
          hist_v.insert(hist_v.end(), static_cast<size_t>(kv_row), 1e30f);
        }
      }
    }
    for (int64_t b = 0; b < first_kept_block; ++b)
      tables[s][static_cast<size_t>(b)] = never_written;
    host_seqs.insert(host_seqs.end(), {static_cast<int32_t>(step_pos.size() - static_cast<size_t>(sp.n_query)),
                                       static_cast<int32_t>(sp.n_query), static_cast<int32_t>(host_tables.size()),
                                       static_cast<int32_t>(nb)});
    host_tables.insert(host_tables.end(), tables[s].begin(), tables[s].end());
  }

  // The history, as earlier steps would have written it (only positions and slots are read).
  attention_batch hist;
  hist.n_tokens = static_cast<int64_t>(hist_slots.size());
  if (hist.n_tokens > 0) {
    hist.slots = input(be, dtype::i64, {hist.n_tokens}, hist_slots);
    be.write_kv(cache, input(be, dtype::f32, {hist.n_tokens, n_head_kv, head_dim}, hist_k),
                input(be, dtype::f32, {hist.n_tokens, n_head_kv, head_dim}, hist_v), hist);
  }

  attention_batch batch;
  batch.n_tokens = static_cast<int64_t>(step_pos.size());
  batch.n_seqs = static_cast<int64_t>(specs.size());
  batch.positions = input(be, dtype::i32, {batch.n_tokens}, step_pos);
  batch.slots = input(be, dtype::i64, {batch.n_tokens}, step_slots);
  batch.seqs = input(be, dtype::i32, {batch.n_seqs, 4}, host_seqs);
  batch.block_tables = input(be, dtype::i32, {static_cast<int64_t>(host_tables.size())}, host_tables);
  batch.host_seqs = host_seqs;
  batch.host_block_tables = host_tables;
  const int64_t n_tokens = batch.n_tokens;
  be.write_kv(cache, input(be, dtype::f32, {n_tokens, n_head_kv, head_dim}, step_k),
              input(be, dtype::f32, {n_tokens, n_head_kv, head_dim}, step_v), batch);

  // Every written slot holds its row exactly, rounded to the cache's type; every other slot (and the guards) still
  // holds the sentinel.
  const std::vector<std::byte> got_k = read_checked(be, kc, what + " k cache");
  const std::vector<std::byte> got_v = read_checked(be, vc, what + " v cache");
  REQUIRE(got_k.size() == expect_k.size());
  size_t bad_k = 0, bad_v = 0;
  for (size_t i = 0; i < got_k.size(); i += esize) {
    bad_k += std::memcmp(got_k.data() + i, expect_k.data() + i, esize) != 0;
    bad_v += std::memcmp(got_v.data() + i, expect_v.data() + i, esize) != 0;
  }
  CHECK_MESSAGE(bad_k == 0, "write_kv: k cache elements wrong");
  CHECK_MESSAGE(bad_v == 0, "write_kv: v cache elements wrong");
  // The reference attends over what the cache holds.
  for (size_t s = 0; s < specs.size(); ++s) {
    for (float& x : dense_k[s])
      x = kv_value(x, kv, kv.k_scale);
    for (float& x : dense_v[s])
      x = kv_value(x, kv, kv.v_scale);
  }

  const std::vector<float> q = rnd.reals(n_tokens * n_head * head_dim, -1.5f, 1.5f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  tensor tq = input(be, dtype::f32, {n_tokens, n_head, head_dim}, q);
  guarded out = alloc_guarded(be, dtype::f32, {n_tokens, n_head, head_dim});
  be.paged_attention(tq, batch, cache, scale, window, out.view);

  std::vector<double> ref(q.size());
  // Each element's tolerance: 2e-6 + 1e-4 relative, plus the 16-bit operands' bound on a tensor-core chunk's rows.
  std::vector<double> tol(q.size(), 2e-6);
  const bool chunks_on_tensor_cores =
      tensor_core_chunks && kv.type != dtype::f32 && (head_dim == 64 || head_dim == 128);
  for (int64_t r = 0; r < n_tokens; ++r) {
    const size_t s = row_seq[static_cast<size_t>(r)];
    const bool sixteen_bit =
        chunks_on_tensor_cores && cuda::prefill::takes_sequence(static_cast<int32_t>(specs[s].n_query));
    for (int64_t h = 0; h < n_head; ++h) {
      const float* qh = q.data() + (r * n_head + h) * head_dim;
      const int64_t pos = step_pos[static_cast<size_t>(r)];
      test::reference_attention(qh, dense_k[s], dense_v[s], n_head_kv, h / gqa, head_dim, pos, window, scale,
                                ref.data() + (r * n_head + h) * head_dim);
      if (sixteen_bit)
        std::fill_n(tol.begin() + (r * n_head + h) * head_dim, head_dim,
                    2e-6 + test::sixteen_bit_operand_bound(qh, dense_k[s], dense_v[s], n_head_kv, h / gqa, head_dim,
                                                           pos, window, scale));
    }
  }
  const std::vector<float> got = read_as<float>(be, out, what + " out");
  REQUIRE(got.size() == ref.size());
  test::check_close(got.data(), ref.data(), got.size(), tol.data(), 0.0, 1e-4, what + " out");
}

}  // namespace

BACKEND_PARITY_CASE(parity_write_kv_and_paged_attention, "write_kv and paged_attention") {
  const uint32_t seed = 2006;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    struct layout {
      int64_t n_head_kv, gqa, head_dim, block_size;
    };
    // GQA 1, 2 and 4; block sizes 16 and odd 5 and 3; head sizes off the vector width.
    const layout layouts[] = {{2, 1, 16, 16}, {2, 2, 17, 5}, {1, 4, 64, 16}, {3, 2, 24, 3}};
    // No window, windows of one token, inside one block, starting mid-block, over several blocks, and wider than
    // any context.
    for (const layout& l : layouts)
      for (int64_t window : {0, 1, 4, 7, 13, 1000})
        attention_case(be, rnd, l.n_head_kv, l.gqa, l.head_dim, l.block_size, window);
  });
}

BACKEND_PARITY_CASE(parity_kv_cache_types, "write_kv and paged_attention over bf16, f16 and fp8 caches") {
  const uint32_t seed = 2007;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    std::vector<kv_format> formats = {{dtype::bf16}, {dtype::f16}};
    if (kind == device_kind::cuda)  // e4m3 with scales: 1, small ones, and a v scale under which values saturate
      formats.insert(formats.end(),
                     {{dtype::fp8_e4m3}, {dtype::fp8_e4m3, 0.01f, 0.004f}, {dtype::fp8_e4m3, 2.0f, 0.0015f}});
    // The main kernel's head sizes (64, 128), the small-head kernel's (8, stories260K's; 17), GQA 1 and 4, windows.
    struct layout {
      int64_t n_head_kv, gqa, head_dim, block_size, window;
    };
    const layout layouts[] = {
        {2, 1, 64, 16, 0}, {1, 4, 128, 16, 0}, {2, 4, 64, 5, 7}, {2, 2, 8, 16, 0}, {2, 1, 17, 4, 3}};
    for (const kv_format& f : formats)
      for (const layout& l : layouts)
        attention_case(be, rnd, l.n_head_kv, l.gqa, l.head_dim, l.block_size, l.window, f, kind == device_kind::cuda);
  });
}

namespace {

// Decode context parallelism through the backend: every sequence's positions dealt out to `n_ranks` caches
// (kv_shard_layout), each rank's paged_attention_partial over its share, merge_attention_partials over the ranks'
// parts, against float64 attention over every position. One kv head (the DCP case), gqa query heads.
void dcp_attention_case(backend& be, random_source& rnd, int32_t n_ranks, int32_t interleave, int64_t gqa,
                        int64_t head_dim, int64_t block_size, int64_t window) {
  const int64_t n_head = gqa, per_block = block_size * n_ranks;
  const std::string what = "dcp " + std::to_string(n_ranks) + " interleave " + std::to_string(interleave) + " heads " +
                           std::to_string(n_head) + " head_dim " + std::to_string(head_dim) + " block_size " +
                           std::to_string(block_size) + " window " + std::to_string(window);
  CAPTURE(what);
  const std::vector<std::pair<int64_t, int64_t>> specs = {
      {rnd.integer(1, 90), 1}, {rnd.integer(20, 90), 5}, {rnd.integer(1, 40), 0}, {1, 1}};  // 0: a whole prompt
  int64_t n_blocks = 1;
  for (const auto& [context, n_query] : specs)
    n_blocks += (context + per_block - 1) / per_block;
  std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rnd.gen);

  std::vector<std::vector<float>> dense_k, dense_v;
  std::vector<int32_t> pos, host_seqs, host_tables;
  std::vector<size_t> row_seq;
  size_t next = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const int64_t context = specs[s].first, n_query = specs[s].second == 0 ? context : specs[s].second;
    const int64_t nb = (context + per_block - 1) / per_block;
    host_seqs.insert(host_seqs.end(), {static_cast<int32_t>(pos.size()), static_cast<int32_t>(n_query),
                                       static_cast<int32_t>(host_tables.size()), static_cast<int32_t>(nb)});
    host_tables.insert(host_tables.end(), pool.begin() + static_cast<std::ptrdiff_t>(next),
                       pool.begin() + static_cast<std::ptrdiff_t>(next + static_cast<size_t>(nb)));
    next += static_cast<size_t>(nb);
    dense_k.push_back(rnd.reals(context * head_dim));
    dense_v.push_back(rnd.reals(context * head_dim));
    for (int64_t p = context - n_query; p < context; ++p) {
      pos.push_back(static_cast<int32_t>(p));
      row_seq.push_back(s);
    }
  }
  const auto n_tokens = static_cast<int64_t>(pos.size());
  const std::vector<float> q = rnd.reals(n_tokens * n_head * head_dim, -2.0f, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const tensor tq = input(be, dtype::f32, {n_tokens, n_head, head_dim}, q);
  const tensor parts = be.alloc(dtype::f32, {n_ranks * n_tokens, n_head * head_dim});
  const tensor lses = be.alloc(dtype::f32, {n_ranks * n_tokens, n_head});
  for (int32_t d = 0; d < n_ranks; ++d) {
    const kv_shard_layout layout{n_ranks, d, interleave};
    const tensor_shape cache_shape{n_blocks, block_size, 1, head_dim};
    const kv_layer cache{input(be, dtype::f32, cache_shape, std::vector<float>(cache_shape.numel(), std::nanf(""))),
                         input(be, dtype::f32, cache_shape, std::vector<float>(cache_shape.numel(), std::nanf("")))};
    // The history: every position this rank keeps, written where step_input_builder puts it.
    std::vector<int64_t> slots;
    std::vector<float> ks, vs;
    for (size_t s = 0; s < specs.size(); ++s)
      for (int64_t p = 0; p < specs[s].first; ++p) {
        if (!layout.owns(p))
          continue;
        slots.push_back(int64_t{host_tables[static_cast<size_t>(host_seqs[s * 4 + 2] + p / per_block)]} * block_size +
                        layout.local_count(p) % block_size);
        ks.insert(ks.end(), dense_k[s].begin() + p * head_dim, dense_k[s].begin() + (p + 1) * head_dim);
        vs.insert(vs.end(), dense_v[s].begin() + p * head_dim, dense_v[s].begin() + (p + 1) * head_dim);
      }
    attention_batch hist;
    hist.n_tokens = static_cast<int64_t>(slots.size());
    if (hist.n_tokens > 0) {
      hist.slots = input(be, dtype::i64, {hist.n_tokens}, slots);
      be.write_kv(cache, input(be, dtype::f32, {hist.n_tokens, 1, head_dim}, ks),
                  input(be, dtype::f32, {hist.n_tokens, 1, head_dim}, vs), hist);
    }
    attention_batch batch;
    batch.n_tokens = n_tokens;
    batch.n_seqs = static_cast<int64_t>(specs.size());
    batch.positions = input(be, dtype::i32, {n_tokens}, pos);
    batch.seqs = input(be, dtype::i32, {batch.n_seqs, 4}, host_seqs);
    batch.block_tables = input(be, dtype::i32, {static_cast<int64_t>(host_tables.size())}, host_tables);
    batch.host_seqs = host_seqs;
    batch.host_block_tables = host_tables;
    batch.kv_layout = layout;
    be.paged_attention_partial(tq, batch, cache, scale, window,
                               parts.slice_rows(d * n_tokens, n_tokens).reshape({n_tokens, n_head, head_dim}),
                               lses.slice_rows(d * n_tokens, n_tokens));
  }
  // Two halves of the heads merged apart, as two ranks of a group would.
  const int64_t first_half = n_head / 2;
  std::vector<float> merged(static_cast<size_t>(n_tokens * n_head * head_dim));
  for (const auto& [begin, count] : {std::pair{int64_t{0}, first_half}, std::pair{first_half, n_head - first_half}}) {
    if (count == 0)
      continue;
    const tensor out = be.alloc(dtype::f32, {n_tokens, count, head_dim});
    be.merge_attention_partials(parts, lses, n_ranks, begin, out);
    std::vector<float> host(static_cast<size_t>(out.numel()));
    be.download(out, host.data(), out.nbytes());
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(host.begin() + t * count * head_dim, count * head_dim,
                  merged.begin() + (t * n_head + begin) * head_dim);
  }
  std::vector<double> ref(merged.size());
  for (int64_t r = 0; r < n_tokens; ++r) {
    const size_t s = row_seq[static_cast<size_t>(r)];
    for (int64_t h = 0; h < n_head; ++h)
      test::reference_attention(q.data() + (r * n_head + h) * head_dim, dense_k[s], dense_v[s], 1, 0, head_dim,
                                pos[static_cast<size_t>(r)], window, scale, ref.data() + (r * n_head + h) * head_dim);
  }
  test::check_close(merged, ref, 2e-6, 1e-4, what);
}

}  // namespace

BACKEND_PARITY_CASE(parity_dcp_attention, "paged_attention_partial and merge_attention_partials (dcp)") {
  const uint32_t seed = 2016;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    // Heads of 16 (CUDA's small-head kernel) and 64 (its main kernel); 2 and 3 ranks; interleave 1 and 4; windows.
    for (int64_t head_dim : {16, 64})
      for (int32_t n_ranks : {2, 3})
        for (int32_t interleave : {1, 4})
          for (int64_t window : {0, 9})
            dcp_attention_case(be, rnd, n_ranks, interleave, 4, head_dim, 8, window);
  });
}

BACKEND_PARITY_CASE(parity_silu_mul, "silu_mul") {
  const uint32_t seed = 2007;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int alias = 0; alias < 3; ++alias) {  // out separate, out == gate, out == up
      const int64_t n = rnd.integer(1, 9), width = rnd.integer(1, 200);
      const std::string what = shape_str({n, width}) + " alias " + std::to_string(alias);
      CAPTURE(what);
      std::vector<float> gate = rnd.reals(n * width, -10.0f, 10.0f), up = rnd.reals(n * width, -3.0f, 3.0f);
      gate[0] = 80.0f;  // large magnitudes: exp must neither overflow into NaN nor lose the sign
      gate.back() = -80.0f;
      std::vector<double> ref(gate.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        const double g = gate[i];
        ref[i] = g / (1 + std::exp(-g)) * up[i];
      }
      guarded out = alias == 0 ? alloc_guarded(be, dtype::f32, {n, width})
                               : alloc_guarded(be, dtype::f32, {n, width}, alias == 1 ? gate : up);
      const tensor tg = alias == 1 ? out.view : input(be, dtype::f32, {n, width}, gate);
      const tensor tu = alias == 2 ? out.view : input(be, dtype::f32, {n, width}, up);
      be.silu_mul(tg, tu, out.view);
      test::check_close(read_as<float>(be, out, what), ref, 1e-6, 1e-5, what);
    }
  });
}

BACKEND_PARITY_CASE(parity_rope_write_kv, "rope_write_kv equals rope then write_kv, bit for bit") {
  const uint32_t seed = 2023;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    std::vector<kv_format> formats = {{dtype::f32}, {dtype::bf16}, {dtype::f16}};
    if (kind == device_kind::cuda)
      formats.push_back({dtype::fp8_e4m3, 0.02f, 0.005f});
    for (const kv_format& f : formats)
      for (const int64_t hd : {int64_t{64}, int64_t{128}})
        for (const bool qk_norm : {false, true}) {
          const int64_t n_head_kv = 2, n_head = 8, n_tokens = rnd.integer(1, 9), n_blocks = 4, block_size = 4;
          const std::string what = std::string(dtype_name(f.type)) + " head_dim " + std::to_string(hd) +
                                   (qk_norm ? " q/k norm" : "") + " tokens " + std::to_string(n_tokens);
          CAPTURE(what);
          const rope_table table = be.make_rope_table(rope_config{hd, 500000.0, {}});
          std::vector<int32_t> pos(static_cast<size_t>(n_tokens));
          for (int32_t& p : pos)
            p = static_cast<int32_t>(rnd.integer(0, 4000));
          // Distinct slots of the cache, the second token's a padding row (-1) when there is one.
          std::vector<int64_t> free_slots(static_cast<size_t>(n_blocks * block_size));
          std::iota(free_slots.begin(), free_slots.end(), 0);
          std::shuffle(free_slots.begin(), free_slots.end(), rnd.gen);
          std::vector<int64_t> slots(free_slots.begin(), free_slots.begin() + n_tokens);
          if (n_tokens > 1)
            slots[1] = -1;
          const std::vector<float> q = rnd.reals(n_tokens * n_head * hd, -2.0f, 2.0f);
          const std::vector<float> k = rnd.reals(n_tokens * n_head_kv * hd, -2.0f, 2.0f);
          const std::vector<float> v = rnd.reals(n_tokens * n_head_kv * hd, -2.0f, 2.0f);
          weight qn, kn;
          if (qk_norm) {
            qn = make_weight(be, dtype::bf16, {hd}, rnd.reals(hd, 0.5f, 1.5f));
            kn = make_weight(be, dtype::bf16, {hd}, rnd.reals(hd, 0.5f, 1.5f));
          }
          const tensor positions = input(be, dtype::i32, {n_tokens}, pos);
          const tensor tv = input(be, dtype::f32, {n_tokens, n_head_kv, hd}, v);
          attention_batch batch;
          batch.n_tokens = n_tokens;
          batch.slots = input(be, dtype::i64, {n_tokens}, slots);
          const tensor_shape cache_shape{n_blocks, block_size, n_head_kv, hd};
          struct run {
            guarded q, k, k_cache, v_cache;
          };
          auto fresh = [&] {
            return run{alloc_guarded(be, dtype::f32, {n_tokens, n_head, hd}, q),
                       alloc_guarded(be, dtype::f32, {n_tokens, n_head_kv, hd}, k),
                       alloc_guarded(be, f.type, cache_shape), alloc_guarded(be, f.type, cache_shape)};
          };
          run apart = fresh(), fused = fresh();
          const kv_layer apart_cache{apart.k_cache.view, apart.v_cache.view, f.k_scale, f.v_scale};
          const kv_layer fused_cache{fused.k_cache.view, fused.v_cache.view, f.k_scale, f.v_scale};
          be.rope(table, positions, apart.q.view, apart.k.view, qn.t, kn.t, 1e-6f);
          be.write_kv(apart_cache, apart.k.view, tv, batch);
          be.rope_write_kv(table, positions, fused.q.view, fused.k.view, qn.t, kn.t, 1e-6f, fused_cache, tv, batch);
          check_same_rope_and_cache(be, fused, apart, what);
        }
  });
}

BACKEND_PARITY_CASE(parity_rope_write_kv_attention,
                    "rope_write_kv_attention equals rope_write_kv then paged_attention, bit for bit") {
  const uint32_t seed = 2031;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (const dtype kv_type : {dtype::f32, dtype::bf16, dtype::f16})
      for (const int64_t hd : {int64_t{64}, int64_t{128}})
        for (const bool qk_norm : {false, true})
          for (const bool prefill : {false, true}) {  // decode rows only (fused on the CPU), or a chunk among them
            const int64_t n_head_kv = rnd.integer(1, 3), gqa = 4, n_head = n_head_kv * gqa, block_size = 4;
            const int64_t n_seqs = rnd.integer(1, 5);
            const std::string what = std::string(dtype_name(kv_type)) + " head_dim " + std::to_string(hd) +
                                     (qk_norm ? " q/k norm" : "") + (prefill ? " with a prefill chunk" : "") +
                                     " sequences " + std::to_string(n_seqs) + " kv heads " + std::to_string(n_head_kv);
            CAPTURE(what);
            const rope_table table = be.make_rope_table(rope_config{hd, 10000.0, {}});
            // Each sequence: its blocks (shuffled across the cache), a history written before, this step's rows.
            std::vector<int32_t> host_seqs, host_tables, pos;
            std::vector<int64_t> slots, hist_slots;
            const int64_t n_blocks = n_seqs * 8;
            std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
            std::iota(ids.begin(), ids.end(), 0);
            std::shuffle(ids.begin(), ids.end(), rnd.gen);
            for (int64_t sq = 0; sq < n_seqs; ++sq) {
              const int64_t rows = prefill && sq == 0 ? 3 : 1;
              const int64_t context = rnd.integer(rows, 8 * block_size);
              const auto first_row = static_cast<int32_t>(pos.size());
              const auto first_entry = static_cast<int32_t>(host_tables.size());
              const int64_t nb = (context + block_size - 1) / block_size;
              for (int64_t b = 0; b < nb; ++b)
                host_tables.push_back(ids[static_cast<size_t>(sq * 8 + b)]);
              auto slot_of = [&](int64_t p) {
                return int64_t{host_tables[static_cast<size_t>(first_entry + p / block_size)]} * block_size +
                       p % block_size;
              };
              for (int64_t p = 0; p < context - rows; ++p)
                hist_slots.push_back(slot_of(p));
              for (int64_t p = context - rows; p < context; ++p) {
                pos.push_back(static_cast<int32_t>(p));
                slots.push_back(slot_of(p));
              }
              host_seqs.insert(host_seqs.end(),
                               {first_row, static_cast<int32_t>(rows), first_entry, static_cast<int32_t>(nb)});
            }
            const auto n_tokens = static_cast<int64_t>(pos.size());
            const auto n_hist = static_cast<int64_t>(hist_slots.size());
            const std::vector<float> q = rnd.reals(n_tokens * n_head * hd, -2.0f, 2.0f);
            const std::vector<float> k = rnd.reals(n_tokens * n_head_kv * hd, -2.0f, 2.0f);
            const std::vector<float> v = rnd.reals(n_tokens * n_head_kv * hd, -2.0f, 2.0f);
            const std::vector<float> hist_k = rnd.reals(std::max<int64_t>(n_hist, 1) * n_head_kv * hd, -2.0f, 2.0f);
            const std::vector<float> hist_v = rnd.reals(std::max<int64_t>(n_hist, 1) * n_head_kv * hd, -2.0f, 2.0f);
            weight qn, kn;
            if (qk_norm) {
              qn = make_weight(be, dtype::bf16, {hd}, rnd.reals(hd, 0.5f, 1.5f));
              kn = make_weight(be, dtype::bf16, {hd}, rnd.reals(hd, 0.5f, 1.5f));
            }
            const tensor positions = input(be, dtype::i32, {n_tokens}, pos);
            const tensor tv = input(be, dtype::f32, {n_tokens, n_head_kv, hd}, v);
            attention_batch batch;
            batch.n_tokens = n_tokens;
            batch.n_seqs = n_seqs;
            batch.positions = positions;
            batch.slots = input(be, dtype::i64, {n_tokens}, slots);
            batch.seqs = input(be, dtype::i32, {n_seqs, 4}, host_seqs);
            batch.block_tables = input(be, dtype::i32, {static_cast<int64_t>(host_tables.size())}, host_tables);
            batch.host_seqs = host_seqs;
            batch.host_block_tables = host_tables;
            // Each layout the backend reads: slot by slot, and kv heads outer where it allocates that.
            std::vector<std::byte> slot_by_slot_out;
            for (const bool heads_outer : {false, true}) {
              if (heads_outer && !be.kv_heads_outer())
                continue;
              const tensor_shape cache_shape = heads_outer ? tensor_shape{n_blocks, n_head_kv, block_size, hd}
                                                           : tensor_shape{n_blocks, block_size, n_head_kv, hd};
              struct run {
                guarded q, k, k_cache, v_cache, out;
              };
              auto fresh = [&] {
                run r{alloc_guarded(be, dtype::f32, {n_tokens, n_head, hd}, q),
                      alloc_guarded(be, dtype::f32, {n_tokens, n_head_kv, hd}, k),
                      alloc_guarded(be, kv_type, cache_shape), alloc_guarded(be, kv_type, cache_shape),
                      alloc_guarded(be, dtype::f32, {n_tokens, n_head, hd})};
                if (n_hist > 0) {
                  attention_batch hist;
                  hist.n_tokens = n_hist;
                  hist.slots = input(be, dtype::i64, {n_hist}, hist_slots);
                  be.write_kv(kv_layer{r.k_cache.view, r.v_cache.view, 1.0f, 1.0f, heads_outer},
                              input(be, dtype::f32, {n_hist, n_head_kv, hd}, hist_k),
                              input(be, dtype::f32, {n_hist, n_head_kv, hd}, hist_v), hist);
                }
                return r;
              };
              run apart = fresh(), fused = fresh();
              const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
              const kv_layer apart_cache{apart.k_cache.view, apart.v_cache.view, 1.0f, 1.0f, heads_outer};
              const kv_layer fused_cache{fused.k_cache.view, fused.v_cache.view, 1.0f, 1.0f, heads_outer};
              be.rope_write_kv(table, positions, apart.q.view, apart.k.view, qn.t, kn.t, 1e-6f, apart_cache, tv, batch);
              be.paged_attention(apart.q.view, batch, apart_cache, scale, 0, apart.out.view);
              be.rope_write_kv_attention(table, positions, fused.q.view, fused.k.view, qn.t, kn.t, 1e-6f, fused_cache,
                                         tv, batch, scale, 0, fused.out.view);
              const auto out = read_checked(be, fused.out, what + " out");
              CHECK(out == read_checked(be, apart.out, what + " out"));
              if (heads_outer)  // the same numbers in the other layout
                CHECK(out == slot_by_slot_out);
              else
                slot_by_slot_out = out;
              check_same_rope_and_cache(be, fused, apart, what);
            }
          }
  });
}

BACKEND_PARITY_CASE(parity_silu_mul_stacked, "silu_mul_stacked equals silu_mul over the split gate and up") {
  const uint32_t seed = 2015;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t n = rnd.integer(1, 9), ff = trial == 0 ? 1 : rnd.integer(1, 200);
      const std::string what = shape_str({n, 2 * ff});
      CAPTURE(what);
      std::vector<float> gate_up = rnd.reals(n * 2 * ff, -10.0f, 10.0f);
      gate_up[0] = 80.0f;  // large magnitudes, as silu_mul's case
      gate_up[static_cast<size_t>(ff - 1)] = -80.0f;
      std::vector<float> gate(static_cast<size_t>(n * ff)), up(gate.size());
      std::vector<double> ref(gate.size());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < ff; ++j) {
          const auto i = static_cast<size_t>(r * ff + j);
          gate[i] = gate_up[static_cast<size_t>(r * 2 * ff + j)];
          up[i] = gate_up[static_cast<size_t>(r * 2 * ff + ff + j)];
          ref[i] = double(gate[i]) / (1 + std::exp(-double(gate[i]))) * up[i];
        }
      guarded out = alloc_guarded(be, dtype::f32, {n, ff});
      be.silu_mul_stacked(input(be, dtype::f32, {n, 2 * ff}, gate_up), out.view);
      const std::vector<float> stacked = read_as<float>(be, out, what);
      test::check_close(stacked, ref, 1e-6, 1e-5, what);
      // The separate form on the same backend: the same values, bit for bit.
      guarded apart = alloc_guarded(be, dtype::f32, {n, ff});
      be.silu_mul(input(be, dtype::f32, {n, ff}, gate), input(be, dtype::f32, {n, ff}, up), apart.view);
      CHECK(read_as<float>(be, apart, what) == stacked);
      // Into bf16 (down's input on a GPU): each f32 value rounded once, to nearest even.
      guarded narrow = alloc_guarded(be, dtype::bf16, {n, ff});
      be.silu_mul_stacked(input(be, dtype::f32, {n, 2 * ff}, gate_up), narrow.view);
      const std::vector<uint16_t> bits = read_as<uint16_t>(be, narrow, what + " bf16");
      REQUIRE(bits.size() == stacked.size());
      size_t wrong = 0;
      for (size_t i = 0; i < bits.size(); ++i)
        wrong += bits[i] != f32_to_bf16(stacked[i]);
      CHECK_MESSAGE(wrong == 0, wrong << " bf16 values differ from the f32 ones rounded");
    }
  });
}

BACKEND_PARITY_CASE(parity_matmul_silu_stacked,
                    "matmul_silu_stacked equals the stacked matmul then silu_mul_stacked, bit for bit") {
  const uint32_t seed = 2019;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    // n_ff of whole 32-row panels (the CPU runs gate and up as one gated pair) and not; decode and prefill rows.
    for (int64_t n_ff : {64, 40, 96}) {
      for (int64_t n_tokens : {1, 3, 70}) {
        for (dtype type : weight_types) {
          const int64_t n_in = 67;
          const std::string what =
              std::string(dtype_name(type)) + " n_ff " + std::to_string(n_ff) + " tokens " + std::to_string(n_tokens);
          CAPTURE(what);
          std::vector<tensor> parts;
          for (int p = 0; p < 2; ++p)
            parts.push_back(host_weight(type, {n_ff, n_in}, rnd.reals(n_ff * n_in)));
          const tensor gate_up = be.import_stacked_linear_weight(parts);
          const tensor tx = input(be, dtype::f32, {n_tokens, n_in}, rnd.reals(n_tokens * n_in));
          guarded wide = alloc_guarded(be, dtype::f32, {n_tokens, 2 * n_ff});
          guarded fused = alloc_guarded(be, dtype::f32, {n_tokens, n_ff});
          be.matmul_silu_stacked(tx, gate_up, wide.view, fused.view);
          guarded wide2 = alloc_guarded(be, dtype::f32, {n_tokens, 2 * n_ff});
          guarded apart = alloc_guarded(be, dtype::f32, {n_tokens, n_ff});
          be.matmul(tx, gate_up, tensor{}, wide2.view);
          be.silu_mul_stacked(wide2.view, apart.view);
          const std::vector<float> got = read_as<float>(be, fused, what), want = read_as<float>(be, apart, what);
          REQUIRE(got.size() == want.size());
          CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
          // Into bf16: the f32 result rounded once.
          guarded narrow = alloc_guarded(be, dtype::bf16, {n_tokens, n_ff});
          be.matmul_silu_stacked(tx, gate_up, wide.view, narrow.view);
          const std::vector<uint16_t> bits = read_as<uint16_t>(be, narrow, what + " bf16");
          size_t wrong = 0;
          for (size_t i = 0; i < bits.size(); ++i)
            wrong += bits[i] != f32_to_bf16(want[i]);
          CHECK_MESSAGE(wrong == 0, wrong << " bf16 values differ from the f32 ones rounded");
        }
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_split_columns, "split_columns puts each part's columns in its own rows") {
  const uint32_t seed = 2016;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t n = rnd.integer(1, 9), n_parts = rnd.integer(1, 4);
      std::vector<int64_t> cols;
      int64_t total = 0;
      for (int64_t p = 0; p < n_parts; ++p)
        total += cols.emplace_back(rnd.integer(1, 70));
      const int64_t width = total + rnd.integer(0, 5);  // a source wider than its parts: the rest is not read
      const std::string what = shape_str({n, width}) + " into " + std::to_string(n_parts) + " parts";
      CAPTURE(what);
      const std::vector<float> src = rnd.reals(n * width, -5.0f, 5.0f);
      std::vector<guarded> parts;
      std::vector<tensor> views;
      for (int64_t c : cols) {
        parts.push_back(alloc_guarded(be, dtype::f32, {n, c}));
        views.push_back(parts.back().view);
      }
      be.split_columns(input(be, dtype::f32, {n, width}, src), views);
      int64_t first = 0;
      for (size_t p = 0; p < cols.size(); ++p) {
        const std::vector<float> got = read_as<float>(be, parts[p], what);
        std::vector<float> want;
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < cols[p]; ++c)
            want.push_back(src[static_cast<size_t>(r * width + first + c)]);
        CHECK(got == want);  // a copy: bit for bit
        first += cols[p];
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_add, "add") {
  const uint32_t seed = 2008;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (bool broadcast : {false, true}) {
      for (int alias = 0; alias < (broadcast ? 2 : 3); ++alias) {  // out separate, out == a, out == b
        const int64_t n = rnd.integer(1, 9), width = rnd.integer(1, 150);
        const std::string what =
            shape_str({n, width}) + (broadcast ? " + one row" : " + same shape") + " alias " + std::to_string(alias);
        CAPTURE(what);
        const std::vector<float> a = rnd.reals(n * width, -5.0f, 5.0f), b = rnd.reals(broadcast ? width : n * width);
        std::vector<double> ref(a.size());
        for (size_t i = 0; i < ref.size(); ++i)
          ref[i] = static_cast<double>(a[i]) + b[broadcast ? i % static_cast<size_t>(width) : i];
        guarded out = alias == 1   ? alloc_guarded(be, dtype::f32, {n, width}, a)
                      : alias == 2 ? alloc_guarded(be, dtype::f32, {n, width}, b)
                                   : alloc_guarded(be, dtype::f32, {n, width});
        const tensor ta = alias == 1 ? out.view : input(be, dtype::f32, {n, width}, a);
        const tensor tb =
            alias == 2 ? out.view : input(be, dtype::f32, broadcast ? tensor_shape{width} : tensor_shape{n, width}, b);
        be.add(ta, tb, out.view);
        test::check_close(read_as<float>(be, out, what), ref, 0.0, 1.2e-7, what);  // one rounding
      }
    }
  });
}

BACKEND_PARITY_CASE(parity_gather_rows, "gather_rows") {
  const uint32_t seed = 2009;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int rep = 0; rep < 4; ++rep) {
      const int64_t n = rnd.integer(1, 40), width = rnd.integer(1, 130), m = rnd.integer(1, 12);
      const std::string what = shape_str({n, width}) + " -> " + std::to_string(m) + " rows";
      CAPTURE(what);
      const std::vector<float> x = rnd.reals(n * width);
      std::vector<int32_t> rows(static_cast<size_t>(m));
      for (int32_t& r : rows)  // repeats allowed, any order
        r = static_cast<int32_t>(rnd.integer(0, n - 1));
      rows.back() = static_cast<int32_t>(n - 1);
      guarded out = alloc_guarded(be, dtype::f32, {m, width});
      be.gather_rows(input(be, dtype::f32, {n, width}, x), input(be, dtype::i32, {m}, rows), out.view);
      std::vector<double> ref;
      for (int32_t r : rows)
        ref.insert(ref.end(), x.begin() + r * width, x.begin() + (r + 1) * width);
      test::check_close(read_as<float>(be, out, what), ref, 0.0, 0.0, what);
    }
  });
}

BACKEND_PARITY_CASE(parity_copy_columns, "copy_columns") {
  const uint32_t seed = 2010;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int rep = 0; rep < 5; ++rep) {
      // Vocab shards side by side: src [rows, shard], dst [rows, vocab].
      const int64_t rows = rnd.integer(1, 7), src_w = rnd.integer(1, 90), dst_w = src_w + rnd.integer(0, 60);
      const int64_t n_cols = rnd.integer(rep == 0 ? 0 : 1, src_w), src_col = rnd.integer(0, src_w - n_cols);
      const int64_t dst_col = rnd.integer(0, dst_w - n_cols);
      const std::string what = shape_str({rows, src_w}) + " [" + std::to_string(src_col) + ", +" +
                               std::to_string(n_cols) + ") -> " + shape_str({rows, dst_w}) + " at " +
                               std::to_string(dst_col);
      CAPTURE(what);
      const std::vector<float> src = rnd.reals(rows * src_w), dst = rnd.reals(rows * dst_w, 5.0f, 6.0f);
      guarded out = alloc_guarded(be, dtype::f32, {rows, dst_w}, dst);
      be.copy_columns(input(be, dtype::f32, {rows, src_w}, src), src_col, out.view, dst_col, n_cols);
      std::vector<double> ref(dst.begin(), dst.end());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < n_cols; ++c)
          ref[static_cast<size_t>(r * dst_w + dst_col + c)] = src[static_cast<size_t>(r * src_w + src_col + c)];
      test::check_close(read_as<float>(be, out, what), ref, 0.0, 0.0, what);
    }
  });
}

BACKEND_PARITY_CASE(parity_lora_add, "lora_add") {
  const uint32_t seed = 2012;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind) {
    random_source rnd(seed);
    for (int rep = 0; rep < 6; ++rep) {
      // Ranks 1 to 17 (16-byte loads where rank and n_in allow), slots drawn from -1 .. n_slots - 1.
      const int64_t n = rep == 0 ? 1 : rnd.integer(2, 40), n_in = rnd.integer(1, 300), n_out = rnd.integer(1, 200);
      const int64_t n_slots = rnd.integer(1, 4), rank = rep % 2 == 0 ? 16 : rnd.integer(1, 17);
      const test::lora_case c = test::random_lora_case(n, n_in, n_out, n_slots, rank, seed * 10 + rep);
      const std::string what = c.describe();
      CAPTURE(what);
      guarded shrunk = alloc_guarded(be, dtype::f32, {n, rank}, c.shrunk);
      guarded y = alloc_guarded(be, dtype::f32, {n, n_out}, c.y);
      be.lora_add(input(be, dtype::f32, {n, n_in}, c.x), input(be, dtype::f32, {n_slots, rank, n_in}, c.a),
                  input(be, dtype::f32, {n_slots, n_out, rank}, c.b), input(be, dtype::i32, {n}, c.slots), shrunk.view,
                  y.view);
      test::check_lora(c, test::lora_reference(c), read_as<float>(be, shrunk, what + " shrunk"),
                       read_as<float>(be, y, what + " y"), what);
    }
  });
}

BACKEND_PARITY_CASE(parity_sample, "sample") {
  const uint32_t seed = 2011;
  CAPTURE(seed);
  for_each_backend([&](backend& be, device_kind kind) {
    random_source rnd(seed);
    std::unique_ptr<backend> serial = make_backend(kind, 1);  // results must not depend on the thread count
    for (int64_t n_vocab : {7, 517, 4099}) {
      const int64_t n_rows = 12;
      CAPTURE(n_vocab);
      std::vector<float> logits = rnd.reals(n_rows * n_vocab, -6.0f, 6.0f);
      std::vector<sampling_params> params(static_cast<size_t>(n_rows));
      std::vector<std::vector<int32_t>> prompt(static_cast<size_t>(n_rows)), output(prompt);
      std::vector<uint64_t> seeds(static_cast<size_t>(n_rows));
      for (int64_t i = 0; i < n_rows; ++i) {
        sampling_params& p = params[static_cast<size_t>(i)];
        float* row = logits.data() + i * n_vocab;
        if (i < 4) {
          // Greedy, with the maximum tied between two ids: the lower one wins.
          p.temperature = 0.0f;
          const auto lo = static_cast<size_t>(rnd.integer(0, n_vocab - 1));
          const auto hi = static_cast<size_t>(rnd.integer(0, n_vocab - 1));
          row[lo] = row[hi] = 9.0f;
        } else {
          const float temps[] = {0.5f, 1.0f, 1.7f};
          p.temperature = temps[i % 3];
          p.top_k = i % 4 == 0 ? 0 : static_cast<int32_t>(rnd.integer(1, 50));
          p.top_p = i % 3 == 0 ? 1.0f : rnd.real(0.3f, 1.0f);
          p.min_p = i % 5 == 0 ? 0.05f : 0.0f;
        }
        if (i % 3 == 1) {  // penalties over prompt and output ids (some outside the vocabulary)
          p.repetition_penalty = 1.3f;
          p.frequency_penalty = 0.4f;
          p.presence_penalty = 0.2f;
          for (int j = 0; j < 9; ++j) {
            prompt[static_cast<size_t>(i)].push_back(static_cast<int32_t>(rnd.integer(0, n_vocab + 3)));
            output[static_cast<size_t>(i)].push_back(static_cast<int32_t>(rnd.integer(-1, n_vocab - 1)));
          }
        }
        p.logprobs = static_cast<int32_t>(i % 4) - 1;  // -1, 0, 1, 2: none, the token's, top 1, top 2
        if (i == 5)
          p.logprobs = 20;
        seeds[static_cast<size_t>(i)] = rnd.gen();
      }

      // Expected: cpu::sample row by row with an identical generator on a copy of the same logits.
      std::vector<sample_result> want;
      std::vector<sampler_rng> want_rng;
      for (int64_t i = 0; i < n_rows; ++i) {
        want_rng.emplace_back(seeds[static_cast<size_t>(i)]);
        std::vector<float> row(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab);
        want.push_back(cpu::sample(row.data(), n_vocab, params[static_cast<size_t>(i)], prompt[static_cast<size_t>(i)],
                                   output[static_cast<size_t>(i)], want_rng.back()));
      }

      for (backend* b : {&be, serial.get()}) {
        CAPTURE(b->describe());
        std::vector<sampler_rng> rngs;
        for (uint64_t s : seeds)
          rngs.emplace_back(s);
        std::vector<sample_row> rows(static_cast<size_t>(n_rows));
        for (size_t i = 0; i < rows.size(); ++i)
          rows[i] = sample_row{&params[i], prompt[i], output[i], &rngs[i], nullptr};
        std::vector<sample_result> got(rows.size());
        b->sample(input(*b, dtype::f32, {n_rows, n_vocab}, logits), rows, got);
        for (size_t i = 0; i < rows.size(); ++i) {
          CAPTURE(i);
          const float* row = logits.data() + static_cast<int64_t>(i) * n_vocab;
          const std::vector<double> lsm = ref_log_softmax(row, n_vocab);
          if (params[i].temperature == 0.0f) {  // greedy against the float64 argmax, lowest id on ties
            const auto best = static_cast<int32_t>(std::max_element(row, row + n_vocab) - row);
            if (params[i].repetition_penalty == 1.0f)
              CHECK(got[i].token == best);
          }
          CHECK(got[i].token == want[i].token);
          REQUIRE(got[i].token >= 0);
          REQUIRE(got[i].token < n_vocab);
          // Raw logprobs (before penalties and temperature) against float64 log_softmax.
          CHECK(std::fabs(got[i].logprob - lsm[static_cast<size_t>(got[i].token)]) <= 1e-5);
          CHECK(std::fabs(got[i].logprob - want[i].logprob) <= 1e-5);
          const size_t n_top = params[i].logprobs > 0 ? std::min<size_t>(static_cast<size_t>(params[i].logprobs),
                                                                         static_cast<size_t>(n_vocab))
                                                      : 0;
          REQUIRE(got[i].top.size() == n_top);
          std::vector<int32_t> order(static_cast<size_t>(n_vocab));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
            return lsm[static_cast<size_t>(x)] > lsm[static_cast<size_t>(y)];
          });
          for (size_t j = 0; j < n_top; ++j) {
            CHECK(got[i].top[j].token == order[j]);
            CHECK(std::fabs(got[i].top[j].logprob - lsm[static_cast<size_t>(order[j])]) <= 1e-5);
          }
          // The generator advanced exactly as cpu::sample's did; greedy rows draw nothing.
          sampler_rng after = rngs[i], want_after = want_rng[i], fresh(seeds[i]);
          CHECK(after.next() == want_after.next());
          if (params[i].temperature == 0.0f)
            CHECK(sampler_rng(rngs[i]).next() == fresh.next());
        }
      }

      // Rows that share one generator draw from it in row order.
      sampler_rng shared_want(77), shared_got(77);
      std::vector<sample_result> want_shared;
      for (int64_t i = 4; i < 8; ++i) {
        std::vector<float> row(logits.begin() + i * n_vocab, logits.begin() + (i + 1) * n_vocab);
        want_shared.push_back(cpu::sample(row.data(), n_vocab, params[static_cast<size_t>(i)],
                                          prompt[static_cast<size_t>(i)], output[static_cast<size_t>(i)], shared_want));
      }
      std::vector<sample_row> rows;
      for (size_t i = 4; i < 8; ++i)
        rows.push_back(sample_row{&params[i], prompt[i], output[i], &shared_got, nullptr});
      std::vector<sample_result> got(rows.size());
      std::vector<float> part(logits.begin() + 4 * n_vocab, logits.begin() + 8 * n_vocab);
      be.sample(input(be, dtype::f32, {4, n_vocab}, part), rows, got);
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i].token == want_shared[i].token);
      CHECK(shared_got.next() == shared_want.next());
    }
  });
}
