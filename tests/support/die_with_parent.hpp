// For a child the tests fork (a server, a node): the child asks the kernel to kill it when the test process dies, so
// a test that aborts (a failed assertion on a client thread ends the binary with std::terminate) or is killed by
// ctest's timeout leaves no server behind, and no ctest waiting on the output pipe the orphan still holds.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace actorllm::test {

/// Call in the forked child before exec, with the pid the parent had before fork (getpid() there). Async-signal-safe.
/// Linux sends the signal when the thread that forked ends: fork from the test's main thread. Exits the child at once
/// when the parent already died between fork and this call.
inline void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(127);
}

}  // namespace actorllm::test
