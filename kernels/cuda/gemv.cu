// The small-batch GEMV over bf16 weights: one warp per output, each lane streaming 128-bit chunks of the weight row
// (a batch of gemv::tuning::loads_in_flight chunks issued before any math) and folding each into the sums of every row
// of x. The arithmetic (chunk order, fmas, butterfly, epilogues) is gemv_math.hpp's, which the CPU test emulates.
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/gemv.hpp"

#include <cuda_bf16.h>

#include <cstdlib>
#include <stdexcept>

namespace actorllm::cuda {
namespace {

using namespace gemv;

struct gemv_params {
  gemv_output outs[max_outputs];
  int n_outputs = 0;
  const void* w_up = nullptr;  // silu_gate: the up weight (outs[0] holds the gate weight and the output)
  bool y_bf16 = false;         // silu_gate: outs[0].y holds bf16
  const void* x = nullptr;
  int64_t rows = 0;
  int64_t n_in = 0;
};

__device__ __forceinline__ void load_x_chunk(const float* row, int64_t c, float (&x)[chunk_inputs]) {
  const auto* p = reinterpret_cast<const float4*>(row + c * chunk_inputs);
  const float4 a = __ldg(p), b = __ldg(p + 1);
  x[0] = round_to_bf16(a.x);
  x[1] = round_to_bf16(a.y);
  x[2] = round_to_bf16(a.z);
  x[3] = round_to_bf16(a.w);
  x[4] = round_to_bf16(b.x);
  x[5] = round_to_bf16(b.y);
  x[6] = round_to_bf16(b.z);
  x[7] = round_to_bf16(b.w);
}

__device__ __forceinline__ void load_x_chunk(const __nv_bfloat16* row, int64_t c, float (&x)[chunk_inputs]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(row + c * chunk_inputs));
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  unpack_chunk(words, x);
}

// The launch's outputs are picked by value (never by a run-time index into the parameter block, which would copy it
// to local memory): the warp's output index o is reduced to the one weight it falls in.
struct picked_output {
  const uint4* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t n_out = 0;
  int64_t o = 0;
};

__device__ __forceinline__ picked_output pick(const gemv_params& p, int64_t o) {
  picked_output out;
#pragma unroll
  for (int i = 0; i < max_outputs; ++i) {
    if (i < p.n_outputs && out.w == nullptr) {
      if (o < p.outs[i].n_out) {
        out.w = static_cast<const uint4*>(p.outs[i].w) + o * (p.n_in / chunk_inputs);
        out.bias = p.outs[i].bias;
        out.y = p.outs[i].y;
        out.n_out = p.outs[i].n_out;
        out.o = o;
      } else {
        o -= p.outs[i].n_out;
      }
    }
  }
  return out;
}

template <class X, int MaxRows, epilogue E, int LoadsAsked>
__global__ void __launch_bounds__(warps_per_block* warp_lanes) gemv_kernel(const __grid_constant__ gemv_params p) {
  constexpr int n_mats = E == epilogue::silu_gate ? 2 : 1;
  // Chunks loaded per weight before folding: the gate and up pair's two weights share the setting's budget, 4 to 8
  // each (16 per weight there spills at 2 rows).
  constexpr int Loads = n_mats == 1 ? LoadsAsked : LoadsAsked / 2 < 4 ? 4 : LoadsAsked / 2 > 8 ? 8 : LoadsAsked / 2;
  const int lane = static_cast<int>(threadIdx.x % warp_lanes);
  const picked_output out = pick(p, blockIdx.x * static_cast<int64_t>(warps_per_block) + threadIdx.x / warp_lanes);
  if (out.w == nullptr)
    return;  // past the last output: the same for the whole warp
  const int64_t n_chunks = chunks_of(p.n_in);
  const uint4* rows_of_w[n_mats];
  rows_of_w[0] = out.w;
  if constexpr (n_mats == 2)
    rows_of_w[1] = static_cast<const uint4*>(p.w_up) + out.o * n_chunks;
  const X* x = static_cast<const X*>(p.x);
  float sum[n_mats][MaxRows];
#pragma unroll
  for (int m = 0; m < n_mats; ++m)
#pragma unroll
    for (int r = 0; r < MaxRows; ++r)
      sum[m][r] = 0.0f;

  for (int64_t c0 = lane; c0 < n_chunks; c0 += warp_lanes * Loads) {
    uint4 loaded[n_mats][Loads];
#pragma unroll
    for (int u = 0; u < Loads; ++u) {
      const int64_t c = c0 + u * warp_lanes;
#pragma unroll
      for (int m = 0; m < n_mats; ++m)
        loaded[m][u] = c < n_chunks ? __ldcs(rows_of_w[m] + c) : make_uint4(0, 0, 0, 0);  // read once: evict first
    }
#pragma unroll
    for (int u = 0; u < Loads; ++u) {
      const int64_t c = c0 + u * warp_lanes;
      if (c >= n_chunks)
        continue;  // past the row's end (the chunks after it are too): nothing to fold
      float w[n_mats][chunk_inputs];
#pragma unroll
      for (int m = 0; m < n_mats; ++m) {
        const uint32_t words[4] = {loaded[m][u].x, loaded[m][u].y, loaded[m][u].z, loaded[m][u].w};
        unpack_chunk(words, w[m]);
      }
#pragma unroll
      for (int r = 0; r < MaxRows; ++r) {
        if (r < p.rows) {
          float xv[chunk_inputs];
          load_x_chunk(x + r * p.n_in, c, xv);
#pragma unroll
          for (int m = 0; m < n_mats; ++m)
            sum[m][r] = fold_chunk(w[m], xv, sum[m][r]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < n_mats; ++m)
#pragma unroll
    for (int r = 0; r < MaxRows; ++r)
      for (int offset = warp_lanes / 2; offset > 0; offset /= 2)
        sum[m][r] = butterfly_add(sum[m][r], __shfl_xor_sync(0xffffffffu, sum[m][r], offset));
        // Every lane holds every total; lane r writes row r.
#pragma unroll
  for (int r = 0; r < MaxRows; ++r) {
    if (r < p.rows && lane == r) {
      if constexpr (E == epilogue::silu_gate) {
        const float v = silu_times(sum[0][r], sum[1][r]);
        if (p.y_bf16)
          reinterpret_cast<__nv_bfloat16*>(out.y)[r * out.n_out + out.o] = __float2bfloat16_rn(v);
        else
          out.y[r * out.n_out + out.o] = v;
      } else {
        out.y[r * out.n_out + out.o] = linear_output(sum[0][r], out.bias, out.o);
      }
    }
  }
}

template <class X, epilogue E, int Loads>
void launch_rows(const gemv_params& p, int64_t n_outputs, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(blocks_for(n_outputs));
  constexpr unsigned threads = warps_per_block * warp_lanes;
  if (p.rows <= 1)
    gemv_kernel<X, 1, E, Loads><<<blocks, threads, 0, stream>>>(p);
  else if (p.rows <= 2)
    gemv_kernel<X, 2, E, Loads><<<blocks, threads, 0, stream>>>(p);
  else if (p.rows <= 4)
    gemv_kernel<X, 4, E, Loads><<<blocks, threads, 0, stream>>>(p);
  else
    gemv_kernel<X, 8, E, Loads><<<blocks, threads, 0, stream>>>(p);
  ACTORLLM_CUDA_CHECK_LAUNCH();
}

template <class X, epilogue E>
void launch_loads(const gemv_params& p, int64_t n_outputs, cudaStream_t stream) {
  switch (gemv_tuning().loads_in_flight) {
    case 4:
      return launch_rows<X, E, 4>(p, n_outputs, stream);
    case 8:
      return launch_rows<X, E, 8>(p, n_outputs, stream);
    case 16:
      return launch_rows<X, E, 16>(p, n_outputs, stream);
    default:
      return launch_rows<X, E, 32>(p, n_outputs, stream);
  }
}

template <epilogue E>
void launch(const gemv_params& p, int64_t n_outputs, bool x_bf16, cudaStream_t stream) {
  if (p.rows < 1 || p.rows > max_rows || p.n_in <= 0 || p.n_in % chunk_inputs != 0)
    throw std::invalid_argument("gemv: rows must be 1..8 and n_in a positive multiple of 8");
  if (n_outputs <= 0)
    return;
  if (x_bf16)
    launch_loads<__nv_bfloat16, E>(p, n_outputs, stream);
  else
    launch_loads<float, E>(p, n_outputs, stream);
}

}  // namespace

gemv::tuning& gemv_tuning() {
  static gemv::tuning t = [] {
    const char* text = std::getenv("ACTORLLM_GEMV");
    return text != nullptr ? gemv::parse_tuning(text) : gemv::tuning{};
  }();
  return t;
}

void gemv_linear(const gemv_output* outputs, int n_outputs, const void* x, bool x_bf16, int64_t rows, int64_t n_in,
                 cudaStream_t stream) {
  if (n_outputs < 1 || n_outputs > max_outputs)
    throw std::invalid_argument("gemv_linear: 1 to 3 outputs per launch");
  gemv_params p;
  int64_t total = 0;
  for (int i = 0; i < n_outputs; ++i) {
    p.outs[i] = outputs[i];
    total += outputs[i].n_out;
  }
  p.n_outputs = n_outputs;
  p.x = x;
  p.rows = rows;
  p.n_in = n_in;
  launch<epilogue::linear>(p, total, x_bf16, stream);
}

void gemv_silu_gate(const void* w_gate, const void* w_up, int64_t n_ff, const void* x, bool x_bf16, int64_t rows,
                    int64_t n_in, void* out, bool out_bf16, cudaStream_t stream) {
  gemv_params p;
  p.outs[0] = gemv_output{w_gate, nullptr, static_cast<float*>(out), n_ff};
  p.y_bf16 = out_bf16;
  p.n_outputs = 1;
  p.w_up = w_up;
  p.x = x;
  p.rows = rows;
  p.n_in = n_in;
  launch<epilogue::silu_gate>(p, n_ff, x_bf16, stream);
}

}  // namespace actorllm::cuda
