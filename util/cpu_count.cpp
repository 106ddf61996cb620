// The usable CPU count: affinity mask and cgroup quota.
#include "util/cpu_count.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace actorllm {
namespace {

std::optional<long long> parse_integer(std::string_view s) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size())
    return std::nullopt;
  return v;
}

std::optional<std::string> read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    return std::nullopt;
  return line;
}

}  // namespace

std::optional<int> cpus_from_cfs(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0)
    return std::nullopt;
  return static_cast<int>(std::max<long long>(1, (quota_us + period_us - 1) / period_us));
}

std::optional<int> cpus_from_cpu_max(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == ' '))
    line.remove_suffix(1);
  const size_t space = line.find(' ');
  if (space == std::string_view::npos)
    return std::nullopt;
  const std::string_view quota = line.substr(0, space), period = line.substr(space + 1);
  if (quota == "max")
    return std::nullopt;
  const auto q = parse_integer(quota), p = parse_integer(period);
  if (!q || !p)
    return std::nullopt;
  return cpus_from_cfs(*q, *p);
}

int usable_cpu_count() {
  int n = 0;
#if defined(__linux__)
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
    n = CPU_COUNT(&allowed);
#endif
  if (n <= 0)
    n = static_cast<int>(std::thread::hardware_concurrency());
  std::optional<int> quota;
  if (const auto line = read_line("/sys/fs/cgroup/cpu.max"))
    quota = cpus_from_cpu_max(*line);
  else if (const auto q = read_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"))
    if (const auto p = read_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
      if (const auto qv = parse_integer(*q), pv = parse_integer(*p); qv && pv)
        quota = cpus_from_cfs(*qv, *pv);
  if (quota)
    n = std::min(n, *quota);
  return std::max(n, 1);
}

}  // namespace actorllm
