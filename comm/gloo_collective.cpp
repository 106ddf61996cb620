// TP collectives over Gloo.
#include "comm/gloo_collective.hpp"

#include "comm/gloo_group_impl.hpp"
#include "util/check.hpp"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>

#include <fmt/format.h>

#include <cstring>

namespace actorllm::comm {

gloo_collective::gloo_collective(std::shared_ptr<gloo_group> group) : group_(std::move(group)) {
  ACTORLLM_CHECK(group_ != nullptr, "gloo_collective needs a group");
}

namespace {
constexpr size_t bcube_max_bytes = size_t{256} << 10;
}  // namespace

void gloo_collective::all_reduce_sum(float* data, int64_t n) {
  ACTORLLM_CHECK(n >= 0, "negative element count");
  if (n == 0 || size() == 1)
    return;
  auto& state = *group_->impl_;
  state.guarded(fmt::format("all_reduce_sum of {} floats", n), -1, [&] {
    gloo::AllreduceOptions opts{state.context};
    opts.setOutput(data, static_cast<size_t>(n));  // no input: in place
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTimeout(group_->timeout());
    // Decode-sized buffers (a token's hidden state is a few KiB) are latency-bound: BCube finishes in log2(size)
    // exchanges where the ring takes 2(size - 1) steps. Large buffers keep the bandwidth-optimal ring.
    if (static_cast<size_t>(n) * sizeof(float) < bcube_max_bytes)
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    gloo::allreduce(opts);
  });
}

void gloo_collective::all_gather(const float* in, int64_t n_per_rank, float* out) {
  ACTORLLM_CHECK(n_per_rank >= 0, "negative element count");
  float* own = out + static_cast<ptrdiff_t>(rank()) * n_per_rank;
  if (in != own)
    std::memmove(own, in, static_cast<size_t>(n_per_rank) * sizeof(float));
  if (n_per_rank == 0 || size() == 1)
    return;
  auto& state = *group_->impl_;
  state.guarded(fmt::format("all_gather of {} floats per rank", n_per_rank), -1, [&] {
    gloo::AllgatherOptions opts{state.context};
    opts.setOutput(out, static_cast<size_t>(n_per_rank * size()));  // no input: this rank's slice is in place
    opts.setTimeout(group_->timeout());
    gloo::allgather(opts);
  });
}

}  // namespace actorllm::comm
