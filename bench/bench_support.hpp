// Small helpers the benchmarks share: the median of their measurements and a temporary directory for files they
// write (adapters, configs), removed when it goes out of scope.
#pragma once

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

namespace actorllm::bench {

/// The median (the mean of the two middle values for an even count; 0 for none).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// A directory removed, with everything in it, when this goes out of scope.
struct scoped_dir {
  std::filesystem::path path;
  explicit scoped_dir(std::filesystem::path p) : path(std::move(p)) {}
  scoped_dir(const scoped_dir&) = delete;
  scoped_dir& operator=(const scoped_dir&) = delete;
  ~scoped_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace actorllm::bench
