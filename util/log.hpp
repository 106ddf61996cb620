// Minimal leveled logging to stderr, vLLM-style lines: "INFO 11-22 10:01:02 [file] message".
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace actorllm::log {

enum class level { debug = 0, info = 1, warning = 2, error = 3 };

/// Messages below this level are dropped. Initialised from ACTORLLM_LOG_LEVEL (debug|info|warning|error).
level threshold();
void set_threshold(level l);

/// Writes one formatted line; thread-safe (one write per line).
void write(level l, std::string_view where, std::string_view message);

template <class... Args>
void info(std::string_view where, fmt::format_string<Args...> f, Args&&... args) {
  if (threshold() <= level::info)
    write(level::info, where, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warning(std::string_view where, fmt::format_string<Args...> f, Args&&... args) {
  if (threshold() <= level::warning)
    write(level::warning, where, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void error(std::string_view where, fmt::format_string<Args...> f, Args&&... args) {
  if (threshold() <= level::error)
    write(level::error, where, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void debug(std::string_view where, fmt::format_string<Args...> f, Args&&... args) {
  if (threshold() <= level::debug)
    write(level::debug, where, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace actorllm::log
