// The custom all-reduce's host side: its buffers, the per-message choice, and the staging copy before each kernel.
#include "comm/cuda/custom_all_reduce.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "util/check.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace actorllm::cuda {

custom_all_reduce_memory::custom_all_reduce_memory(int device_index, size_t data_bytes)
    : device_(device_index), data_bytes_(data_bytes) {
  ACTORLLM_CUDA_CHECK(cudaSetDevice(device_));
  ACTORLLM_CUDA_CHECK(cudaMalloc(&data_, data_bytes_ == 0 ? car::pack_bytes : data_bytes_));
  if (cudaMalloc(&signal_, signal_bytes()) != cudaSuccess) {
    cudaFree(data_);
    throw cuda_error("custom all-reduce: cudaMalloc of the signal buffer failed");
  }
  // Zeroed before any peer can see it (the handshake comes after): flags start at 0 and the first call uses 1.
  // Synchronous, so the zeros are in place before the handles are published.
  ACTORLLM_CUDA_CHECK(cudaMemset(signal_, 0, signal_bytes()));
  ACTORLLM_CUDA_CHECK(cudaDeviceSynchronize());
}

custom_all_reduce_memory::~custom_all_reduce_memory() {
  cudaSetDevice(device_);
  cudaFree(signal_);
  cudaFree(data_);
}

all_reduce_topology ipc_group_topology(const ipc_peer_buffers& buffers, bool nvlink_all_pairs) {
  all_reduce_topology g;
  g.world_size = buffers.size();
  g.single_node = true;
  g.all_pairs_ipc = true;
  g.shared_device = buffers.any_shared_device();
  g.fully_connected = nvlink_all_pairs || buffers.all_on_one_device();
  return g;
}

custom_all_reduce::custom_all_reduce(std::unique_ptr<ipc_peer_buffers> buffers, std::unique_ptr<tp_collective> fallback,
                                     all_reduce_topology topology, cudaStream_t stream, all_reduce_limits limits)
    : buffers_(std::move(buffers)),
      fallback_(std::move(fallback)),
      topology_(topology),
      stream_(stream),
      limits_(limits) {
  ACTORLLM_CHECK(buffers_ != nullptr && fallback_ != nullptr, "custom_all_reduce: no buffers or no fallback");
  ACTORLLM_CHECK(buffers_->size() <= car::max_ranks, "custom_all_reduce: more ranks than the signal layout holds");
  ACTORLLM_CHECK(topology_.world_size == buffers_->size(), "custom_all_reduce: topology of another world size");
  ACTORLLM_CHECK(fallback_->size() == buffers_->size() && fallback_->rank() == buffers_->rank(),
                 "custom_all_reduce: the fallback is another group");
  ACTORLLM_CHECK(buffers_->signal_bytes() >= sizeof(car::signal_layout), "custom_all_reduce: signal buffer too small");
  limits_.custom_max_ranks = std::min(limits_.custom_max_ranks, car::max_ranks);
}

custom_all_reduce::~custom_all_reduce() {
  if (device_table_ != nullptr)
    cudaFree(device_table_);
}

all_reduce_path custom_all_reduce::choose(dtype type, size_t bytes, const void* data) const {
  return choose_all_reduce(topology_, {type, bytes, reinterpret_cast<uintptr_t>(data), buffers_->data_bytes()},
                           limits_);
}

void custom_all_reduce::all_reduce_sum(const tensor& t) {
  if (size() == 1) {
    last_path_ = all_reduce_path::identity;
    return;
  }
  if (t.where().kind != device_kind::cuda) {
    last_path_ = all_reduce_path::host_staged;
    fallback_->all_reduce_sum(t);
    return;
  }
  last_path_ = choose(t.type, t.nbytes(), t.data());
  if (last_path_ == all_reduce_path::custom_one_shot || last_path_ == all_reduce_path::custom_two_shot)
    all_reduce_device(t.data(), t.numel(), t.type == dtype::bf16 ? element_type::bf16 : element_type::f32, last_path_);
  else
    fallback_->all_reduce_sum(t);
}

void custom_all_reduce::all_reduce_device(void* data, int64_t n, element_type type, all_reduce_path path) {
  if (path != all_reduce_path::custom_one_shot && path != all_reduce_path::custom_two_shot)
    throw std::invalid_argument(std::string{"custom_all_reduce: "} + to_string(path) + " is not a custom path");
  const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(element_size(type));
  if (bytes > buffers_->data_bytes())
    throw std::invalid_argument("custom_all_reduce: " + std::to_string(bytes) + " bytes exceed the " +
                                std::to_string(buffers_->data_bytes()) + "-byte staging buffer");
  if (n <= 0)
    return;
  // The staging buffer's device: the shard's thread may not have made it current (the buffers were made for it).
  // Its ordinal in this process, not the PCI location the ranks published (the first GPU run made PCI id 6400
  // current: invalid device ordinal).
  ACTORLLM_CUDA_CHECK(cudaSetDevice(buffers_->device_index()));
  if (device_table_ == nullptr) {
    car_rank_table table{};
    for (int r = 0; r < size(); ++r) {
      table.data[r] = buffers_->at(r).data;
      table.signal[r] = static_cast<car::signal_layout*>(buffers_->at(r).signal);
    }
    ACTORLLM_CUDA_CHECK(cudaMalloc(&device_table_, sizeof table));
    ACTORLLM_CUDA_CHECK(cudaMemcpy(device_table_, &table, sizeof table, cudaMemcpyHostToDevice));
  }
  // The message into this rank's staging buffer, where the peers read it; the kernel's start barrier tells them it
  // is there. The previous call's end barrier guaranteed nobody still reads the old contents.
  ACTORLLM_CUDA_CHECK(cudaMemcpyAsync(buffers_->at(rank()).data, data, bytes, cudaMemcpyDeviceToDevice, stream_));
  if (path == all_reduce_path::custom_one_shot)
    car_one_shot(device_table_, rank(), size(), n, type, data, stream_);
  else
    car_two_shot(device_table_, rank(), size(), n, type, data, stream_);
}

}  // namespace actorllm::cuda
