// The backend registry: the one place that knows which backends this build has (make_backend, the devices it can
// run on and the `--device` choice). The interface (kernels/) and each backend (kernels/cpu, kernels/cuda) are built
// below it; nothing below links it.
#include "kernels/backend.hpp"
#include "kernels/device.hpp"

#include "kernels/cpu/cpu_backend.hpp"
#ifdef ACTORLLM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/device.hpp"
#endif

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace actorllm {

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

std::unique_ptr<backend> make_backend(device where, int n_threads) {
  switch (where.kind) {
    case device_kind::cpu:
      return std::make_unique<cpu::cpu_backend>(n_threads);
    case device_kind::cuda:
#ifdef ACTORLLM_HAVE_CUDA
      return std::make_unique<cuda::cuda_backend>(where.index);
#else
      break;
#endif
  }
  throw std::runtime_error("make_backend: device '" + where.to_string() +
                           "': this build has no CUDA backend (built without nvcc); the only device is 'cpu'");
}

std::unique_ptr<backend> make_backend(device_kind kind, int n_threads) {
  return make_backend(device{kind, 0}, n_threads);
}

}  // namespace actorllm
