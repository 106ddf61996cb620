// Devices: names and the device of a rank. What this build and machine have is the registry's
// (kernels/registry/backend_registry.cpp).
#include "kernels/device.hpp"

#include <fmt/format.h>

namespace actorllm {

std::string_view device_kind_name(device_kind kind) { return kind == device_kind::cpu ? "cpu" : "cuda"; }

std::string device::to_string() const {
  if (kind == device_kind::cpu)
    return "cpu";
  return fmt::format("{}:{}", device_kind_name(kind), index);
}

device device_for_rank(device_kind kind, int rank, int gpu_count) {
  if (kind == device_kind::cpu)
    return device{};
  const int n = gpu_count < 1 ? 1 : gpu_count;
  return device{kind, (rank < 0 ? 0 : rank) % n};
}

}  // namespace actorllm
