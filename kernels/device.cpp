// Devices and the `--device` choice.
#include "kernels/device.hpp"

#ifdef ACTORLLM_HAVE_CUDA
#include "kernels/cuda/device.hpp"
#endif

#include <fmt/format.h>

namespace actorllm {

std::string_view device_kind_name(device_kind kind) { return kind == device_kind::cpu ? "cpu" : "cuda"; }

std::string device::to_string() const {
  if (kind == device_kind::cpu)
    return "cpu";
  return fmt::format("{}:{}", device_kind_name(kind), index);
}

#ifdef ACTORLLM_HAVE_CUDA
std::vector<std::string> compiled_backends() { return {"cpu", "cuda"}; }
int visible_gpu_count() { return cuda::device_count(); }
std::string gpu_unavailable_reason() { return cuda::unavailable_reason(); }
#else
std::vector<std::string> compiled_backends() { return {"cpu"}; }
int visible_gpu_count() { return 0; }
std::string gpu_unavailable_reason() { return "this build has no CUDA backend (built without nvcc)"; }
#endif

std::string device_unusable_reason(device_kind kind) {
  if (kind == device_kind::cpu || visible_gpu_count() > 0)
    return {};
  return fmt::format("--device cuda: no usable GPU on this machine ({})", gpu_unavailable_reason());
}

device device_for_rank(device_kind kind, int rank, int gpu_count) {
  if (kind == device_kind::cpu)
    return device{};
  const int n = gpu_count < 1 ? 1 : gpu_count;
  return device{kind, (rank < 0 ? 0 : rank) % n};
}

device_choice resolve_device(std::string_view name) {
  device_choice c;
  const std::vector<std::string> built = compiled_backends();
  const bool has_cuda = built.size() > 1;
  if (name == "cpu")
    return c;
  if (name == "auto") {
    c.kind = has_cuda && visible_gpu_count() > 0 ? device_kind::cuda : device_kind::cpu;
    return c;
  }
  if (name == "cuda" || name == "gpu") {
    if (has_cuda)
      c.kind = device_kind::cuda;
    else
      c.error = fmt::format(
          "--device {}: no CUDA backend in this build (it was built without nvcc); the only "
          "device is 'cpu'",
          name);
    return c;
  }
  c.error = fmt::format("--device '{}' is not a device (valid: {})", name,
                        has_cuda ? "cpu, cuda, auto" : "cpu, auto; cuda needs a build with the CUDA backend");
  return c;
}

}  // namespace actorllm
