// The `actorllm worker` processes a test started (directly, or through the server or node agent it started), found
// through /proc: for killing one, or checking which replica each serves.
#pragma once

#include <doctest/doctest.h>

#include <dirent.h>
#include <sys/types.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace actorllm::test {

struct worker_process {
  pid_t pid = 0;
  std::string command_line;  ///< its arguments joined by spaces
};

/// Live `actorllm worker` children of `parent`, in /proc order (ascending pids).
inline std::vector<worker_process> worker_children(pid_t parent) {
  std::vector<worker_process> out;
  DIR* proc = ::opendir("/proc");
  REQUIRE(proc != nullptr);
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0)
      continue;
    std::ifstream stat{"/proc/" + std::to_string(pid) + "/stat"};
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream rest{line.substr(close + 2)};
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent || state == 'Z')
      continue;
    std::ifstream cmd{"/proc/" + std::to_string(pid) + "/cmdline"};
    std::string args{std::istreambuf_iterator<char>{cmd}, {}};
    for (auto& c : args)
      if (c == '\0')
        c = ' ';
    if (args.find(" worker ") != std::string::npos)
      out.push_back({pid, std::move(args)});
  }
  ::closedir(proc);
  return out;
}

/// The pids of worker_children(parent) whose command line holds `part` (all of them for an empty `part`).
inline std::vector<pid_t> worker_pids_of(pid_t parent, const std::string& part = {}) {
  std::vector<pid_t> out;
  for (const auto& w : worker_children(parent))
    if (w.command_line.find(part) != std::string::npos)
      out.push_back(w.pid);
  return out;
}

}  // namespace actorllm::test
