// How many CPUs this process can use: the CPUs it may run on (its affinity mask), capped by its cgroup's CPU quota
// (a container given "2 CPUs" on a 64-core host may run on all 64 but only for 2 CPUs' worth of time; a pool of 64
// threads there spends its time descheduled at barriers).
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

namespace actorllm {

/// The CPUs of the affinity mask, capped by the cgroup quota rounded up (cgroup_cpu_quota("/")); at least 1.
int usable_cpu_count();

/// The CPUs the cgroup this process runs in may use, from the files under `root` (the file system root; tests give a
/// directory of fake files): cgroup v2 when root/proc/self/cgroup has a "0::PATH" line and
/// root/sys/fs/cgroup/cgroup.controllers exists: the smallest cpu.max quota of PATH and of every cgroup above it (a
/// parent's limit binds its children), looked up under root/sys/fs/cgroup; else cgroup v1: the cpu controller's line
/// ("N:cpu,cpuacct:PATH"), cpu.cfs_quota_us / cpu.cfs_period_us of PATH under root/sys/fs/cgroup/cpu,cpuacct (or
/// cpuacct,cpu) or root/sys/fs/cgroup/cpu, or at that mount's top (a container's own cgroup, mounted as the root).
/// Nothing when no limit is set or nothing can be read.
std::optional<int> cgroup_cpu_quota(const std::filesystem::path& root);

/// The CPUs a cgroup v2 `cpu.max` line allows ("200000 100000" -> 2, "150000 100000" -> 2, "max 100000" -> none),
/// or nothing when the line is unlimited or not understood.
std::optional<int> cpus_from_cpu_max(std::string_view line);

/// The same from cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (quota -1: unlimited).
std::optional<int> cpus_from_cfs(long long quota_us, long long period_us);

}  // namespace actorllm
