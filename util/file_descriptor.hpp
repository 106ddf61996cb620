// An open file descriptor, closed when it goes out of scope.
#pragma once

#include <unistd.h>

#include <utility>

namespace actorllm::util {

/// Owns one file descriptor (or none: negative) and closes it on destruction.
class file_descriptor {
 public:
  explicit file_descriptor(int fd = -1) : fd_(fd) {}
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() { close(); }

  int get() const { return fd_; }
  /// Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  /// Closes it now: close(2)'s result, or 0 when there was none.
  int close() { return fd_ >= 0 ? ::close(release()) : 0; }

 private:
  int fd_;
};

}  // namespace actorllm::util
