// What the soak test reads of the server process from /proc/PID: RSS, open descriptors, threads, and whether it
// still runs (a child of the script that died stays a zombie until reaped).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace actorllm::soak {

/// One reading of /proc/PID.
struct process_sample {
  bool alive = false;  ///< /proc/PID exists and is not a zombie
  int64_t rss_kb = 0;  ///< VmRSS
  int64_t hwm_kb = 0;  ///< VmHWM: the peak RSS so far
  int64_t fds = 0;     ///< entries of /proc/PID/fd
  int64_t threads = 0;
};

/// Reads /proc/PID/status and /proc/PID/fd; `alive` false (the rest 0) when the process is gone.
process_sample sample_process(pid_t pid);

/// RSS split by the kind of mapping that holds it (/proc/PID/smaps), to tell where growth comes from.
struct rss_split {
  int64_t heap_kb = 0;      ///< [heap]: the main malloc arena
  int64_t big_anon_kb = 0;  ///< anonymous mappings over 64 MiB: mostly the KV cache's tensors, counted as touched
  int64_t anon_kb = 0;      ///< other anonymous mappings: malloc's thread arenas (64 MiB at most), stacks, blocks
  int64_t file_kb = 0;      ///< file-backed mappings: the binary, libraries, mmapped weights
  int64_t other_kb = 0;     ///< [stack], [vdso] and the like
};

/// Reads /proc/PID/smaps; all 0 when the process is gone.
rss_split read_rss_split(pid_t pid);

/// Each open descriptor as "N -> TARGET" (TARGET as /proc/PID/fd/N links to it: a path, "pipe:[...]",
/// "socket:[INODE]"), TCP sockets followed by their connection from /proc/PID/net/tcp{,6}, e.g.
/// "12 -> socket:[4711] tcp 127.0.0.1:8000 127.0.0.1:51234 CLOSE_WAIT". Sorted; empty when the process is gone.
/// For naming the descriptors an idle point has beyond another.
std::vector<std::string> describe_fds(pid_t pid);

}  // namespace actorllm::soak
