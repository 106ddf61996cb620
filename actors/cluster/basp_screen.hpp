// The screen between an authenticated peer and CAF's BASP parser (issue 30, item 3). The gate (control_gate.hpp)
// proves that a peer holds the key, not that what it sends next is well formed, and CAF 0.17.6 trusts the bytes it
// parses: a BASP header whose payload length is 4 GiB makes it allocate 4 GiB before reading a byte of it, a byte
// sequence whose length says 4 billion is resized (zero-filled) before its bytes are checked, a message nested in a
// message in a message overflows the stack, and a message before the handshake makes a proxy of a node nobody named.
// Each of these ends the process. The screen reads the stream a peer sends before CAF does and refuses it at the
// first header or payload CAF could not take safely:
//   - every header: a known operation, the flags BASP defines, zero padding, the fields CAF's own valid() demands,
//     a payload length within the limit (--max-control-message-bytes), and the operation allowed at that point
//     (the peer's handshake first, then no second server handshake);
//   - every payload: deserialized first, the way CAF will, into a throwaway copy with a deserializer that refuses
//     sequences longer than the bytes left could hold and objects nested deeper than max_nesting, and with
//     placeholder (null) proxies so nothing is created; a handshake must name a node other than none and this one,
//     and a link or unlink message must not name one of this process's own actors (CAF casts it to a proxy).
// A refused connection is closed; CAF only ever sees bytes the screen passed, so what it parses it has parsed once
// already without harm.
#pragma once

#include <caf/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace actorllm::actors {

/// The default of --max-control-message-bytes: the largest BASP payload a peer may send. The largest messages
/// actorllm sends are a pipeline stage's hidden states (stage_handoff: max_num_batched_tokens x hidden size x 4
/// bytes, 64 MiB for 2048 tokens of a model 8192 wide); step plans of a full batch are well under a MiB.
inline constexpr std::size_t default_max_control_message_bytes = std::size_t{256} << 20;

/// The deepest nesting of CAF objects (a message in a message...) a payload may hold.
inline constexpr std::size_t max_control_nesting = 32;

/// Which end of the connection this process is: it decides which handshake the peer must send first.
enum class basp_role {
  acceptor,   ///< we accepted: the peer answers our server handshake with its client handshake
  connector,  ///< we connected: the peer's server handshake comes first
};

/// Screens the bytes one peer sends on one connection (see the file comment). Not thread-safe: one per connection,
/// fed in order from the thread that reads it.
class basp_screen {
 public:
  basp_screen(basp_role role, std::size_t max_payload);

  /// Consumes `n` bytes from the peer, split anywhere. Returns why the connection must end (and from then on, for
  /// every call), or an empty string while the stream is well formed. `ctx` is the execution unit CAF will
  /// deserialize with (its system decides the types and the local node).
  std::string feed(caf::execution_unit* ctx, const char* data, std::size_t n);

  /// Headers and payloads passed so far.
  uint64_t messages() const { return messages_; }

 private:
  std::string check_header();
  /// Checks the payload `data` (payload_len_ bytes) of the header just read.
  std::string check_payload(caf::execution_unit* ctx, const char* data);

  basp_role role_;
  std::size_t max_payload_;
  std::string header_;   ///< the header being read (up to 32 bytes)
  std::string payload_;  ///< the payload being read, once its header passed
  uint8_t operation_ = 0;
  uint8_t flags_ = 0;
  uint32_t payload_len_ = 0;
  uint64_t dest_actor_ = 0;
  bool handshaken_ = false;
  uint64_t messages_ = 0;
  std::string refused_;
};

}  // namespace actorllm::actors
