// A region of work a profiler looks at: `ncu --profile-from-start off` profiles only the kernels between
// cudaProfilerStart and cudaProfilerStop, and a marker kernel at the start of each region tells the regions of one
// run apart in ncu's kernel list (scripts/gpu_profile_table.py splits the list at the markers).
#pragma once

namespace actorllm::cuda {

/// The marker kernel's name, as ncu lists it.
inline constexpr const char* profile_marker_kernel_name = "actorllm_profile_marker";

/// Starts the profiler on `device_index` and launches the marker (default stream); stops it when destroyed, after
/// synchronising the device so every kernel of the region has run inside it.
class profile_range {
 public:
  explicit profile_range(int device_index);
  ~profile_range();
  profile_range(const profile_range&) = delete;
  profile_range& operator=(const profile_range&) = delete;

 private:
  int device_;
};

}  // namespace actorllm::cuda
