// Drops the sampler state of finished requests when no step plan is going out to carry the release: it travels
// the same path as the plans (tp rank 0 of each stage, in order), so it never overtakes a plan that samples them.
#pragma once

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <vector>

namespace actorllm::proto {

/// Requests whose sampler state the sampler shard may drop.
struct sampler_release {
  std::vector<uint64_t> request_ids;

  friend bool operator==(const sampler_release&, const sampler_release&) = default;
};

/// CAF inspection of sampler_release.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampler_release& x) {
  return f(caf::meta::type_name("sampler_release"), x.request_ids);
}

}  // namespace actorllm::proto
