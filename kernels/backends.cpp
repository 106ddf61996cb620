// make_backend: the one place that knows which backends this build has.
#include "kernels/backend.hpp"

#include "kernels/cpu/cpu_backend.hpp"

#include <stdexcept>
#include <string>

namespace actorllm {

std::unique_ptr<backend> make_backend(device_kind kind, int n_threads) {
  switch (kind) {
    case device_kind::cpu:
      return std::make_unique<cpu::cpu_backend>(n_threads);
    case device_kind::cuda:
      break;
  }
  throw std::runtime_error("make_backend: device '" + std::string(device_kind_name(kind)) +
                           "': this build has no CUDA backend yet (the only device is 'cpu')");
}

}  // namespace actorllm
