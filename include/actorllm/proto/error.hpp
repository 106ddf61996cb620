// actorllm::errc as caf::error values, the house style for errors crossing actor boundaries: the code rides in the
// error, the message in its context, so both survive serialization.
#pragma once

#include "actorllm/error.hpp"
#include "engine/engine_error.hpp"

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

#include <string>

namespace actorllm::proto {

/// The error category of every actorllm error.
inline constexpr caf::atom_value error_category = caf::atom("actorllm");

/// An error with `code` and a message naming the offending values.
inline caf::error make_error(errc code, std::string message) {
  return caf::error{static_cast<uint8_t>(code), error_category, caf::make_message(std::move(message))};
}

/// The public code of an engine-core error; the codes of the core's own bookkeeping (a result for a step not in
/// flight, a double free) are protocol violations: internal.
inline errc to_errc(engine::engine_errc code) {
  switch (code) {
    case engine::engine_errc::invalid_argument:
      return errc::invalid_argument;
    case engine::engine_errc::duplicate_request:
      return errc::duplicate_request;
    case engine::engine_errc::unknown_request:
      return errc::unknown_request;
    case engine::engine_errc::exceeds_max_model_len:
      return errc::exceeds_max_model_len;
    case engine::engine_errc::exceeds_kv_cache:
      return errc::exceeds_kv_cache;
    case engine::engine_errc::too_many_sequences:
      return errc::too_many_sequences;
    default:
      return errc::internal;
  }
}

/// An engine-core error as a caf::error: its code (to_errc) and its message.
inline caf::error make_error(const engine::engine_error& err) { return make_error(to_errc(err.code), err.message); }

/// The actorllm code of `err`; errors of other categories (CAF's own, e.g. a dead actor) map to engine_failure.
inline errc code_of(const caf::error& err) {
  if (err.category() == error_category)
    return static_cast<errc>(err.code());
  return errc::engine_failure;
}

/// The message of `err`: the one it was made with, or CAF's description for errors of other categories.
inline std::string message_of(const caf::error& err) {
  if (err.category() == error_category && err.context().match_elements<std::string>())
    return err.context().get_as<std::string>(0);
  if (err.category() == caf::atom("system"))
    return "actor system error: " + caf::to_string(static_cast<caf::sec>(err.code()));
  return caf::to_string(err);
}

/// `err` as the exception the embedding API throws.
inline actorllm::error to_exception(const caf::error& err) { return actorllm::error{code_of(err), message_of(err)}; }

}  // namespace actorllm::proto
