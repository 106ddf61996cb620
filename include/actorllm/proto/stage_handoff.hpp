// CAF inspection of runner::stage_handoff (runner/stage_handoff.hpp), declared in its namespace so that argument-
// dependent lookup finds it, and the protocol's name for it.
#pragma once

#include "runner/stage_handoff.hpp"

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace actorllm::runner {

/// CAF inspection of stage_handoff: hidden states in host memory as rows and floats ([rows, rest]).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stage_handoff& x) {
  std::vector<float> hidden = Inspector::reads_state ? hidden_floats(x.hidden) : std::vector<float>{};
  int64_t rows = Inspector::reads_state && x.hidden.shape.n_dims > 0 ? x.hidden.shape[0] : 0;
  return f(caf::meta::type_name("stage_handoff"), x.step_id, rows, hidden, x.expert_tokens,
           caf::meta::load_callback([&]() -> caf::error {
             x.hidden = tensor{};
             if (!hidden.empty()) {
               const auto n = static_cast<int64_t>(hidden.size());
               x.hidden = make_host_tensor(dtype::f32,
                                           rows > 0 && n % rows == 0 ? tensor_shape{rows, n / rows} : tensor_shape{n});
               std::copy(hidden.begin(), hidden.end(), x.hidden.data_as<float>());
             }
             return caf::none;
           }));
}

}  // namespace actorllm::runner

namespace actorllm::proto {

/// Step output of one stage for the next (runner/stage_handoff.hpp).
using stage_handoff = runner::stage_handoff;
using runner::hidden_floats;

}  // namespace actorllm::proto
