// A step's plan as the scheduler sends it to every shard of its replica: one immutable plan shared by all the
// sends. Within a process it is a pointer (no copy, no serialization); across processes the plan is serialized once
// per step, on the first send that needs it, and every further send writes the same bytes.
#pragma once

#include "actorllm/proto/step_plan.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>
#include <caf/serializer.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

namespace actorllm::proto {

/// How many times this process serialized a step plan (into the bytes shared_plan sends). For tests and metrics:
/// a replica's step costs one, however many shards and processes receive it.
inline std::atomic<uint64_t>& plan_serializations() {
  static std::atomic<uint64_t> n{0};
  return n;
}

/// A step plan shared by every shard that receives it (see the file comment).
struct shared_plan {
  /// The serialized form, made once by whichever send needs it first.
  struct encoding {
    std::once_flag once;
    std::vector<char> bytes;
    caf::error error;
  };

  std::shared_ptr<const step_plan> plan;  ///< never null
  std::shared_ptr<encoding> encoded = std::make_shared<encoding>();

  shared_plan() = default;
  /// Wraps `p` for sending; every copy of the result shares its one serialization.
  explicit shared_plan(std::shared_ptr<const step_plan> p) : plan(std::move(p)) {}

  /// The plan's bytes (serializing it the first time), or the error of that serialization.
  const encoding& bytes() const {
    std::call_once(encoded->once, [this] {
      caf::binary_serializer sink{static_cast<caf::execution_unit*>(nullptr), encoded->bytes};
      encoded->error = sink(const_cast<step_plan&>(*plan));
      plan_serializations().fetch_add(1, std::memory_order_relaxed);
    });
    return *encoded;
  }

  /// Equal plans (by value).
  friend bool operator==(const shared_plan& a, const shared_plan& b) {
    return a.plan == b.plan || (a.plan && b.plan && *a.plan == *b.plan);
  }
};

/// CAF inspection of shared_plan. A serializer writes the plan's shared bytes (a byte sequence), a deserializer
/// reads them back into a fresh plan; any other inspector (to_string) sees the plan itself.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shared_plan& x) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    const shared_plan::encoding& e = x.bytes();
    if (e.error)
      return e.error;
    return f(caf::meta::type_name("shared_plan"), const_cast<std::vector<char>&>(e.bytes));
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    std::vector<char> bytes;
    return f(caf::meta::type_name("shared_plan"), bytes, caf::meta::load_callback([&]() -> caf::error {
               auto plan = std::make_shared<step_plan>();
               caf::binary_deserializer source{static_cast<caf::execution_unit*>(nullptr), bytes};
               if (auto err = source(*plan))
                 return err;
               x.plan = std::move(plan);
               x.encoded = std::make_shared<shared_plan::encoding>();
               return caf::none;
             }));
  } else {
    step_plan empty;
    step_plan& plan = x.plan ? const_cast<step_plan&>(*x.plan) : empty;
    return f(caf::meta::type_name("shared_plan"), plan);
  }
}

}  // namespace actorllm::proto
