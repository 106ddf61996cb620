// Minimal leveled logging to stderr.
#include "util/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace actorllm::log {
namespace {

level initial_threshold() {
  const char* env = std::getenv("ACTORLLM_LOG_LEVEL");
  if (env == nullptr)
    return level::info;
  std::string_view v{env};
  if (v == "debug" || v == "DEBUG")
    return level::debug;
  if (v == "warning" || v == "WARNING")
    return level::warning;
  if (v == "error" || v == "ERROR")
    return level::error;
  return level::info;
}

std::atomic<level>& threshold_ref() {
  static std::atomic<level> t{initial_threshold()};
  return t;
}

const char* level_name(level l) {
  switch (l) {
    case level::debug:
      return "DEBUG";
    case level::info:
      return "INFO";
    case level::warning:
      return "WARNING";
    case level::error:
      return "ERROR";
  }
  return "INFO";
}

}  // namespace

level threshold() { return threshold_ref().load(std::memory_order_relaxed); }
void set_threshold(level l) { threshold_ref().store(l, std::memory_order_relaxed); }

void write(level l, std::string_view where, std::string_view message) {
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%m-%d %H:%M:%S", &tm);
  std::string line = fmt::format("{} {} [{}] {}\n", level_name(l), stamp, where, message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace actorllm::log
