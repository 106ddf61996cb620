// Which CUDA devices this process can use, asked without failing when there is no driver or GPU.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace actorllm::cuda {

/// One visible GPU.
struct device_info {
  int index = 0;
  std::string name;
  size_t total_memory = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
};

/// Number of usable GPUs; 0 (never an error) when the driver or the devices are missing.
int device_count();

/// Description of every usable GPU.
std::vector<device_info> devices();

/// Why no GPU is usable (the driver's message), or empty when at least one is.
std::string unavailable_reason();

/// The device's copy bandwidth in bytes per second, counting bytes read and written (the convention of the GPU-PLAN
/// roofline figures): the best of `reps` device-to-device copies of `bytes`, timed with CUDA events.
double measure_copy_bandwidth(int device_index, size_t bytes, int reps);

/// The driver's CUDA version (e.g. 13000), or 0 without a driver.
int driver_version();

}  // namespace actorllm::cuda
