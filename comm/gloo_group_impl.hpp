// Private to comm/: the Gloo objects behind a gloo_group, and the one place Gloo's exceptions become comm_error.
// Only comm/gloo_*.cpp include it, so Gloo's headers never reach the rest of actorllm.
#pragma once

#include "comm/comm_error.hpp"
#include "comm/gloo_group.hpp"

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace actorllm::comm {

struct gloo_group::impl {
  gloo_group* owner = nullptr;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  /// Set by the first failure: Gloo closes every pair of a context after a timeout or an I/O error, so later
  /// operations fail fast with the original cause instead of a confusing second error.
  std::string broken;

  /// "gloo group 'tp0' rank 1 of 2: <what>[ with rank <peer>]".
  std::string describe(std::string_view what, int peer) const;

  /// Runs `op`, turning any exception into a comm_error that names the group, this rank, the operation and the
  /// peer (-1: none in particular); marks the group broken when it throws.
  template <class F>
  decltype(auto) guarded(std::string_view what, int peer, F&& op) {
    if (!broken.empty())
      throw comm_error(describe(what, peer) + ": the group is broken since an earlier failure: " + broken);
    try {
      return std::forward<F>(op)();
    } catch (const std::exception& e) {
      fail(what, peer, e.what());
    }
  }

  [[noreturn]] void fail(std::string_view what, int peer, std::string_view cause);
};

}  // namespace actorllm::comm
