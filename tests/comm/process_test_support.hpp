// Helpers for the data-plane tests between real processes: a rendezvous store in a directory that forked children
// share, and a fork-per-rank runner.
#pragma once

#include "comm/comm_error.hpp"
#include "comm/rendezvous_store.hpp"

#include <doctest/doctest.h>
#include <gloo/rendezvous/file_store.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace actorllm::test {

/// Our rendezvous_store over Gloo's FileStore (one file per key in a shared directory), for processes of one host.
class file_store final : public comm::rendezvous_store {
 public:
  explicit file_store(const std::string& dir) : store_(dir) {}
  void set(const std::string& key, const std::vector<char>& value) override { store_.set(file_name(key), value); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_.wait({file_name(key)}, timeout);
    } catch (const std::exception& e) {
      throw comm::comm_error("rendezvous: key '" + key + "' not set within " + std::to_string(timeout.count()) +
                             " ms: " + e.what());
    }
    return store_.get(file_name(key));
  }

 private:
  static std::string file_name(std::string key) {
    std::replace(key.begin(), key.end(), '/', '_');  // keys are file names in one directory
    return key;
  }
  gloo::rendezvous::FileStore store_;
};

/// A child's wait status in words, for failure messages: "exit 1", "signal 13 (Broken pipe)".
inline std::string describe_status(int status) {
  if (WIFEXITED(status))
    return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "wait status " + std::to_string(status);
}

/// Forks one child per rank (before any Gloo context exists in this process: Gloo starts a thread per device),
/// runs body(rank) in each and returns their exit statuses: body's result, 2 when it threw, 3 when it threw
/// something else, a signal when it hung past the alarm. Children are reaped in rank order, so one that exits
/// early stays a zombie until the ranks before it are done.
template <class F>
std::vector<int> run_children(int n_rank, F&& body) {
  std::vector<pid_t> children;
  for (int rank = 0; rank < n_rank; ++rank) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(60);  // a hung child dies instead of hanging the test
      // As in `actorllm worker` (actors/runtime/worker_process.cpp): Gloo's writev() to a peer that died fails with
      // EPIPE rather than killing the writer with SIGPIPE.
      signal(SIGPIPE, SIG_IGN);
      int code = 3;
      try {
        code = body(rank);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        code = 2;
      } catch (...) {
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    statuses.push_back(status);
  }
  return statuses;
}

}  // namespace actorllm::test
