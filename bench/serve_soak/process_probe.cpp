// /proc/PID/status and /proc/PID/fd, read for the soak test.
#include "bench/serve_soak/process_probe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>

namespace actorllm::soak {
namespace {

// "0100007F:1F40" (IPv4, the address in host byte order of a little-endian machine) -> "127.0.0.1:8000"; an IPv6
// address is kept in its hex form, with the port decoded.
std::string decode_endpoint(const std::string& hex) {
  const auto colon = hex.find(':');
  if (colon == std::string::npos)
    return hex;
  const unsigned long port = std::stoul(hex.substr(colon + 1), nullptr, 16);
  const std::string addr = hex.substr(0, colon);
  if (addr.size() != 8)
    return fmt::format("[{}]:{}", addr, port);
  const unsigned long a = std::stoul(addr, nullptr, 16);
  return fmt::format("{}.{}.{}.{}:{}", a & 0xff, (a >> 8) & 0xff, (a >> 16) & 0xff, (a >> 24) & 0xff, port);
}

const char* tcp_state_name(unsigned long st) {
  static constexpr std::array<const char*, 12> names{"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
                                                     "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
                                                     "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
  return st < names.size() ? names[st] : "?";
}

// Socket inode -> "tcp LOCAL REMOTE STATE", from the process's view of /proc/net/tcp and tcp6.
std::map<std::string, std::string> tcp_sockets(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in{dir / "net" / table};
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      std::istringstream fields{line};
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)
        out[inode] = fmt::format("tcp {} {} {}", decode_endpoint(local), decode_endpoint(remote),
                                 tcp_state_name(std::stoul(state, nullptr, 16)));
    }
  }
  return out;
}

}  // namespace

process_sample sample_process(pid_t pid) {
  process_sample s;
  const std::filesystem::path dir = "/proc/" + std::to_string(pid);
  std::ifstream status{dir / "status"};
  if (!status)
    return s;
  std::string line;
  bool zombie = false;
  auto field_kb = [](const std::string& l) { return std::stoll(l.substr(l.find(':') + 1)); };
  while (std::getline(status, line)) {
    if (line.rfind("State:", 0) == 0)
      zombie = line.find('Z') != std::string::npos || line.find('X') != std::string::npos;
    else if (line.rfind("VmRSS:", 0) == 0)
      s.rss_kb = field_kb(line);
    else if (line.rfind("VmHWM:", 0) == 0)
      s.hwm_kb = field_kb(line);
    else if (line.rfind("Threads:", 0) == 0)
      s.threads = field_kb(line);
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator{dir / "fd", ec};
       !ec && it != std::filesystem::directory_iterator{}; it.increment(ec))
    ++s.fds;
  s.alive = !zombie && !ec;
  return s;
}

rss_split read_rss_split(pid_t pid) {
  rss_split out;
  std::ifstream smaps{"/proc/" + std::to_string(pid) + "/smaps"};
  std::string line;
  int64_t* bucket = &out.other_kb;
  while (std::getline(smaps, line)) {
    if (line.empty())
      continue;
    const char first = line.front();
    if ((first >= '0' && first <= '9') || (first >= 'a' && first <= 'f')) {
      // A mapping's head: "start-end perms offset dev inode [path]".
      std::istringstream fields{line};
      std::string range, perms, offset, dev, inode, path;
      fields >> range >> perms >> offset >> dev >> inode;
      std::getline(fields >> std::ws, path);
      const auto dash = range.find('-');
      const uint64_t size =
          std::stoull(range.substr(dash + 1), nullptr, 16) - std::stoull(range.substr(0, dash), nullptr, 16);
      if (path == "[heap]")
        bucket = &out.heap_kb;
      else if (path.empty())
        bucket = size > (uint64_t{64} << 20) ? &out.big_anon_kb : &out.anon_kb;
      else if (path.front() == '/')
        bucket = &out.file_kb;
      else
        bucket = &out.other_kb;
    } else if (line.rfind("Rss:", 0) == 0) {
      *bucket += std::stoll(line.substr(4));
    }
  }
  return out;
}

std::vector<std::string> describe_fds(pid_t pid) {
  const std::filesystem::path dir = "/proc/" + std::to_string(pid);
  const auto sockets = tcp_sockets(dir);
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator{dir / "fd", ec};
       !ec && it != std::filesystem::directory_iterator{}; it.increment(ec)) {
    std::error_code link_ec;
    const std::string target = std::filesystem::read_symlink(it->path(), link_ec).string();
    std::string line = it->path().filename().string() + " -> " + (link_ec ? "?" : target);
    if (target.rfind("socket:[", 0) == 0) {
      const std::string inode = target.substr(8, target.size() - 9);
      if (auto found = sockets.find(inode); found != sockets.end())
        line += " " + found->second;
    }
    out.push_back(std::move(line));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace actorllm::soak
