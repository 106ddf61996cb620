// usable CPUs from the cgroup files: fake /proc/self/cgroup and /sys/fs/cgroup trees in a temporary directory, laid
// out as a cgroup v2 host, a v2 container, a v1 host and a v1 container show them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <unistd.h>

#include "util/cpu_count.hpp"

namespace fs = std::filesystem;
using actorllm::cgroup_cpu_quota;

namespace {

// A directory standing for "/", removed at the end of the test.
struct fake_root {
  fs::path dir;
  fake_root() {
    dir = fs::temp_directory_path() /
          ("actorllm_cgroup_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~fake_root() { fs::remove_all(dir); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write(const std::string& path, const std::string& text) const {
    const fs::path p = dir / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

}  // namespace

TEST_CASE("cgroup quota v2: the process's own cgroup and the tightest limit above it") {
  fake_root root;
  root.write("proc/self/cgroup", "0::/system.slice/engine.service\n");
  root.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  root.write("sys/fs/cgroup/cpu.max", "max 100000\n");  // the root: unlimited (not even present on real hosts)
  SUBCASE("the service's own limit") {
    root.write("sys/fs/cgroup/system.slice/cpu.max", "max 100000\n");
    root.write("sys/fs/cgroup/system.slice/engine.service/cpu.max", "300000 100000\n");
    CHECK(cgroup_cpu_quota(root.dir) == 3);
  }
  SUBCASE("a parent's tighter limit binds the child") {
    root.write("sys/fs/cgroup/system.slice/cpu.max", "150000 100000\n");
    root.write("sys/fs/cgroup/system.slice/engine.service/cpu.max", "800000 100000\n");
    CHECK(cgroup_cpu_quota(root.dir) == 2);
  }
  SUBCASE("no limit anywhere") {
    root.write("sys/fs/cgroup/system.slice/engine.service/cpu.max", "max 100000\n");
    CHECK_FALSE(cgroup_cpu_quota(root.dir).has_value());
  }
  SUBCASE("another cgroup's limit is not ours") {
    root.write("sys/fs/cgroup/other.slice/cpu.max", "100000 100000\n");
    CHECK_FALSE(cgroup_cpu_quota(root.dir).has_value());
  }
}

TEST_CASE("cgroup quota v2 in a container: the namespace's root is the container's cgroup") {
  fake_root root;
  root.write("proc/self/cgroup", "0::/\n");
  root.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  root.write("sys/fs/cgroup/cpu.max", "200000 100000\n");
  CHECK(cgroup_cpu_quota(root.dir) == 2);
}

TEST_CASE("cgroup quota v1: the cpu controller's line, on the host and in a container") {
  fake_root root;
  root.write("proc/self/cgroup",
             "9:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n");  // a hybrid host lists a v2 line too
  SUBCASE("the host's view: the path under the mount") {
    root.write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    root.write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    root.write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
    root.write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    CHECK(cgroup_cpu_quota(root.dir) == 3);
  }
  SUBCASE("inside the container: its cgroup is the mount's top, the path names it as the host sees it") {
    root.write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
    root.write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    CHECK(cgroup_cpu_quota(root.dir) == 1);
  }
  SUBCASE("a plain cpu mount, unlimited") {
    root.write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
    root.write("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
    CHECK_FALSE(cgroup_cpu_quota(root.dir).has_value());
  }
  SUBCASE("files that are not numbers are no limit") {
    root.write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "lots\n");
    root.write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    CHECK_FALSE(cgroup_cpu_quota(root.dir).has_value());
  }
}

TEST_CASE("cgroup quota: nothing to read is no limit") {
  fake_root root;
  CHECK_FALSE(cgroup_cpu_quota(root.dir).has_value());
  root.write("proc/self/cgroup", "garbage without colons\n");
  CHECK_FALSE(cgroup_cpu_quota(root.dir).has_value());
}

TEST_CASE("usable CPUs: never more than the affinity mask") {
  const int n = actorllm::usable_cpu_count();
  CHECK(n >= 1);
  CHECK(n <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (const auto quota = cgroup_cpu_quota("/"))
    CHECK(n <= *quota);
}
