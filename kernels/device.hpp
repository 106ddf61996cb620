// Where tensors live and kernels run: the device a backend drives, and the `--device` choice that picks a backend.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorllm {

/// The kind of device a backend drives.
enum class device_kind : uint8_t { cpu, cuda };

/// One device: its kind and, for GPUs, its ordinal. The CPU is one device (index 0) whatever its cores.
struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;

  /// "cpu", "cuda:0", ...
  std::string to_string() const;
  friend bool operator==(const device&, const device&) = default;
};

/// "cpu" or "cuda".
std::string_view device_kind_name(device_kind kind);

/// The backends compiled into this build, by `--device` name, in preference order ("cpu" always).
std::vector<std::string> compiled_backends();

/// Resolves a `--device` value (vLLM's spelling: "cpu", "cuda", "auto") to the device kind shards run on. Empty
/// error on success; otherwise a message that names the value and what this build accepts (`cuda` and `auto` need
/// the CUDA backend, which this build does not have yet).
struct device_choice {
  device_kind kind = device_kind::cpu;
  std::string error;
};
device_choice resolve_device(std::string_view name);

}  // namespace actorllm
