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

std::optional<std::string> read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line))
    return std::nullopt;
  return line;
}

std::optional<int> smaller(std::optional<int> a, std::optional<int> b) {
  if (a && b)
    return std::min(*a, *b);
  return a ? a : b;
}

// The cgroup path of /proc/self/cgroup's line whose controller list (the middle field) satisfies `wanted`.
template <class Pred>
std::optional<std::string> cgroup_path(const std::filesystem::path& root, Pred wanted) {
  std::ifstream in(root / "proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos)
      continue;
    if (wanted(std::string_view{line}.substr(first + 1, second - first - 1)))
      return line.substr(second + 1);
  }
  return std::nullopt;
}

// The tightest limit of `cgroup` and the cgroups above it, each read by `read_quota(dir)`. A cgroup missing under the
// mount is skipped: in a container the mount's top is the container's own cgroup while the path names it as the host
// sees it.
template <class Read>
std::optional<int> tightest_on_the_way_up(const std::filesystem::path& mount, const std::string& cgroup,
                                          Read read_quota) {
  std::optional<int> cpus;
  for (std::filesystem::path p = std::filesystem::path(cgroup).relative_path();; p = p.parent_path()) {
    cpus = smaller(cpus, read_quota(mount / p));
    if (p.empty())
      break;
  }
  return cpus;
}

std::optional<int> quota_v2(const std::filesystem::path& root, const std::string& cgroup) {
  return tightest_on_the_way_up(root / "sys/fs/cgroup", cgroup, [](const std::filesystem::path& dir) {
    const auto line = read_line(dir / "cpu.max");
    return line ? cpus_from_cpu_max(*line) : std::nullopt;
  });
}

std::optional<int> quota_v1(const std::filesystem::path& root, const std::string& cgroup) {
  for (const char* controller : {"cpu,cpuacct", "cpuacct,cpu", "cpu"}) {
    const std::filesystem::path mount = root / "sys/fs/cgroup" / controller;
    std::error_code ec;
    if (!std::filesystem::is_directory(mount, ec))
      continue;
    return tightest_on_the_way_up(mount, cgroup, [](const std::filesystem::path& dir) -> std::optional<int> {
      const auto q = read_line(dir / "cpu.cfs_quota_us"), p = read_line(dir / "cpu.cfs_period_us");
      if (!q || !p)
        return std::nullopt;
      const auto qv = parse_integer(*q), pv = parse_integer(*p);
      return qv && pv ? cpus_from_cfs(*qv, *pv) : std::nullopt;
    });
  }
  return std::nullopt;
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

std::optional<int> cgroup_cpu_quota(const std::filesystem::path& root) {
  std::error_code ec;
  if (std::filesystem::exists(root / "sys/fs/cgroup/cgroup.controllers", ec))
    if (const auto path = cgroup_path(root, [](std::string_view controllers) { return controllers.empty(); }))
      return quota_v2(root, *path);
  const auto is_cpu = [](std::string_view controllers) {
    for (size_t begin = 0; begin <= controllers.size();) {
      const size_t comma = std::min(controllers.find(',', begin), controllers.size());
      if (controllers.substr(begin, comma - begin) == "cpu")
        return true;
      begin = comma + 1;
    }
    return false;
  };
  if (const auto path = cgroup_path(root, is_cpu))
    return quota_v1(root, *path);
  return std::nullopt;
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
  if (const auto quota = cgroup_cpu_quota("/"))
    n = std::min(n, *quota);
  return std::max(n, 1);
}

}  // namespace actorllm
