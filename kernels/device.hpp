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

/// The backends compiled into this build, by `--device` name, in preference order ("cpu" always; "cuda" when the
/// build has the CUDA backend).
std::vector<std::string> compiled_backends();

/// GPUs this process can use (after CUDA_VISIBLE_DEVICES): 0 in a build without CUDA, and 0 (never an error) when the
/// driver or the devices are missing.
int visible_gpu_count();

/// Why no GPU is usable (the driver's words, or that the build has no CUDA backend); empty when one is.
std::string gpu_unavailable_reason();

/// Empty when this machine can run shards on `kind` now; otherwise why not ("--device cuda: no usable GPU on this
/// machine (the driver's reason)"). Checked where shards start (the engine for its own processes, each worker for
/// itself), apart from resolve_device, which only knows the build.
std::string device_unusable_reason(device_kind kind);

/// The device a shard of global rank `rank` (stage * tp_size + tp_rank) runs on: the CPU, or for CUDA the visible
/// GPUs round robin (rank r on GPU r % count, so the shards of one process or of one node's worker processes get a
/// GPU each while there are enough; with fewer GPUs, shards share them). `gpu_count` < 1 counts as 1.
device device_for_rank(device_kind kind, int rank, int gpu_count);

/// Resolves a `--device` value (vLLM's spelling: "cpu", "cuda", "auto") to the device kind shards run on. Empty
/// error on success; otherwise a message that names the value and what this build accepts. "auto" is CUDA when this
/// process sees a GPU and the CPU otherwise; "cuda" needs the CUDA backend in the build (whether a GPU is there is
/// checked where the shards start: a worker may have one where the engine has none).
struct device_choice {
  device_kind kind = device_kind::cpu;
  std::string error;
};
device_choice resolve_device(std::string_view name);

}  // namespace actorllm
