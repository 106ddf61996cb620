// Devices and the `--device` choice.
#include "kernels/device.hpp"

#include <fmt/format.h>

namespace actorllm {

std::string_view device_kind_name(device_kind kind) { return kind == device_kind::cpu ? "cpu" : "cuda"; }

std::string device::to_string() const {
  if (kind == device_kind::cpu)
    return "cpu";
  return fmt::format("{}:{}", device_kind_name(kind), index);
}

std::vector<std::string> compiled_backends() { return {"cpu"}; }

device_choice resolve_device(std::string_view name) {
  device_choice c;
  if (name == "cpu")
    return c;
  if (name == "cuda" || name == "auto" || name == "gpu")
    c.error =
        fmt::format("--device {}: the CUDA backend is not part of this build yet; the only device is 'cpu'", name);
  else
    c.error = fmt::format("--device '{}' is not a device (valid: cpu; cuda and auto come with the CUDA backend)", name);
  return c;
}

}  // namespace actorllm
