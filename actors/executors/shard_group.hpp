// Fan-out to a replica's shards: one request to each, every reply awaited, the results in shard order.
#pragma once

#include "actorllm/proto/error.hpp"

#include <caf/scoped_actor.hpp>

#include <optional>
#include <utility>
#include <vector>

namespace actorllm::actors {

/// Sends `xs...` to every handle as a request from `self` and waits for every reply: the results in the handles'
/// order. The first error is thrown (proto::to_exception) only after every reply is in, so no shard is left working
/// on a request nobody waits for.
template <class Result, class Handle, class... Ts>
std::vector<Result> ask_all(caf::scoped_actor& self, const std::vector<Handle>& handles, const Ts&... xs) {
  using response = decltype(self->request(handles.front(), caf::infinite, xs...));
  std::vector<response> pending;
  pending.reserve(handles.size());
  for (const auto& h : handles)
    pending.push_back(self->request(h, caf::infinite, xs...));
  std::vector<Result> results;
  results.reserve(handles.size());
  std::optional<caf::error> first;
  for (auto& p : pending)
    p.receive([&](Result r) { results.push_back(std::move(r)); },
              [&](caf::error& err) {
                if (!first)
                  first = std::move(err);
              });
  if (first)
    throw proto::to_exception(*first);
  return results;
}

}  // namespace actorllm::actors
