// Progress display: see progress_bar.hpp.
#include "util/progress_bar.hpp"

#include "util/log.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace actorllm::util {
namespace {

bool stderr_is_terminal() {
  const char* env = std::getenv("ACTORLLM_PROGRESS");
  if (env != nullptr && std::string_view{env} == "0")
    return false;
  return ::isatty(STDERR_FILENO) == 1;
}

std::string format_amount(uint64_t n, bool bytes) {
  if (!bytes)
    return fmt::format("{}", n);
  const double d = static_cast<double>(n);
  if (d >= double(1ull << 30))
    return fmt::format("{:.2f} GiB", d / double(1ull << 30));
  return fmt::format("{:.1f} MiB", d / double(1ull << 20));
}

}  // namespace

progress_bar::progress_bar(std::string label, bool bytes)
    : label_(std::move(label)), bytes_(bytes), interactive_(stderr_is_terminal()) {}

void progress_bar::add_total(uint64_t units) {
  std::lock_guard lock{draw_mutex_};
  if (!started_ || finished_) {
    // A new round of loading (a restart reloads): start the clock and the counts afresh.
    if (finished_) {
      total_.store(0);
      done_.store(0);
    }
    started_ = true;
    finished_ = false;
    last_quarter_ = 0;
    start_ = std::chrono::steady_clock::now();
    last_draw_ = start_;
  }
  total_.fetch_add(units, std::memory_order_relaxed);
}

void progress_bar::advance(uint64_t units) {
  const uint64_t done = done_.fetch_add(units, std::memory_order_relaxed) + units;
  const uint64_t total = total_.load(std::memory_order_relaxed);
  if (total == 0)
    return;
  std::unique_lock lock{draw_mutex_, std::try_to_lock};
  if (!lock.owns_lock() || finished_)
    return;
  const auto now = std::chrono::steady_clock::now();
  if (interactive_) {
    if (now - last_draw_ < std::chrono::milliseconds{100})
      return;
  } else {
    // Plain lines only at each quarter, and only for loads slow enough to need them.
    const int quarter = static_cast<int>(done * 4 / total);
    if (quarter <= last_quarter_ || quarter >= 4 || now - start_ < std::chrono::seconds{1})
      return;
    last_quarter_ = quarter;
  }
  last_draw_ = now;
  draw(done, total, false);
}

void progress_bar::finish_if_complete() {
  std::lock_guard lock{draw_mutex_};
  const uint64_t total = total_.load();
  const uint64_t done = done_.load();
  if (finished_ || !started_ || done < total)
    return;
  finished_ = true;
  draw(done, total, true);
}

void progress_bar::draw(uint64_t done, uint64_t total, bool final_line) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int percent = total == 0 ? 100 : static_cast<int>(done * 100 / total);
  if (!interactive_) {
    if (final_line)
      log::info("progress", "{}: 100% {} in {:.2f} s", label_, format_amount(total, bytes_), seconds);
    else
      log::info("progress", "{}: {}% ({} of {}, {:.1f} s)", label_, percent, format_amount(done, bytes_),
                format_amount(total, bytes_), seconds);
    return;
  }
  constexpr int width = 30;
  const int filled = percent * width / 100;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  const std::string line =
      fmt::format("\r{}: {:3d}% [{}] {} / {} {:.1f} s{}", label_, percent, bar, format_amount(done, bytes_),
                  format_amount(total, bytes_), seconds, final_line ? "\n" : "");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

progress_bar& weight_loading_progress() {
  static progress_bar bar{"Loading weights"};
  return bar;
}

}  // namespace actorllm::util
