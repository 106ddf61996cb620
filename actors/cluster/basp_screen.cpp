// The BASP screen: see basp_screen.hpp.
#include "actors/cluster/basp_screen.hpp"

#include <caf/actor_control_block.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/execution_unit.hpp>
#include <caf/message.hpp>
#include <caf/node_id.hpp>
#include <caf/proxy_registry.hpp>
#include <caf/sec.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <set>
#include <vector>

namespace actorllm::actors {
namespace {

constexpr std::size_t header_bytes = 32;  // caf::io::basp::header_size

// caf::io::basp::message_type
constexpr uint8_t server_handshake = 0;
constexpr uint8_t client_handshake = 1;
constexpr uint8_t direct_message = 2;
constexpr uint8_t routed_message = 3;
constexpr uint8_t monitor_message = 4;
constexpr uint8_t down_message = 5;
constexpr uint8_t heartbeat = 6;

constexpr uint8_t known_flags = 0x01 | 0x02;  // named_receiver_flag | select_connection_flag

const char* operation_name(uint8_t op) {
  static constexpr const char* names[] = {"server handshake", "client handshake", "direct message", "routed message",
                                          "monitor message",  "down message",     "heartbeat"};
  return op <= heartbeat ? names[op] : "unknown operation";
}

uint64_t big_endian(const std::string& bytes, std::size_t at, std::size_t n) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i)
    v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

/// Types a message may carry that actorllm never sends and CAF acts on while parsing them: a group is looked up (and
/// created) by name as it is read, and stream messages drive CAF's stream machinery.
bool foreign_type(const std::string& names) {
  for (const char* t : {"@group", "stream_msg"})
    if (names.find(t) != std::string::npos)
      return true;
  return false;
}

/// CAF's binary deserializer with bounds: a sequence may not claim more elements than the bytes left could hold
/// (8 per byte: a vector<bool> packs them), so no resize() before the check allocates more than the payload's size
/// times eight; objects (messages, errors) and sequences (a config_value's lists) may not nest deeper than
/// max_control_nesting; and a message may not carry a foreign_type.
class bounded_deserializer final : public caf::deserializer {
 public:
  bounded_deserializer(caf::execution_unit* ctx, const char* data, std::size_t size)
      : caf::deserializer(ctx), inner_(ctx, data, size) {}

  /// The first error met, or empty. CAF's loaders drop some errors of what they nest (a message in a message reads
  /// on after its inner message failed), so the first one sticks: every later read fails too, and the caller asks
  /// here rather than trusting what the load returned.
  const std::string& failure() const { return failure_; }

  caf::error begin_object(uint16_t& typenr, std::string& name) override {
    if (!failure_.empty())
      return stop();
    if (++depth_ > max_control_nesting)
      return fail("objects nested deeper than " + std::to_string(max_control_nesting));
    if (auto err = checked(inner_.begin_object(typenr, name)))
      return err;
    if (foreign_type(name))
      return fail("a type actorllm never sends: " + name);
    return caf::none;
  }
  caf::error end_object() override {
    --depth_;
    return checked(inner_.end_object());
  }
  caf::error begin_sequence(std::size_t& num) override {
    num = 0;  // what a loader that ignores the error below would use
    if (!failure_.empty())
      return stop();
    if (++depth_ > max_control_nesting)
      return fail("sequences nested deeper than " + std::to_string(max_control_nesting));
    if (auto err = checked(inner_.begin_sequence(num)))
      return err;
    if (num / 8 > inner_.remaining()) {
      const std::size_t claimed = num;
      num = 0;
      return fail(fmt::format("a sequence of {} elements in {} bytes", claimed, inner_.remaining()));
    }
    return caf::none;
  }
  caf::error end_sequence() override {
    --depth_;
    return checked(inner_.end_sequence());
  }
  caf::error apply_raw(std::size_t num_bytes, void* data) override {
    return checked(inner_.apply_raw(num_bytes, data));
  }

 protected:
  caf::error apply_impl(int8_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(uint8_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(int16_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(uint16_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(int32_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(uint32_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(int64_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(uint64_t& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(float& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(double& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(long double& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(std::string& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(std::u16string& x) override { return checked(inner_.apply(x)); }
  caf::error apply_impl(std::u32string& x) override { return checked(inner_.apply(x)); }

 private:
  caf::error stop() const { return caf::make_error(caf::sec::invalid_argument, failure_); }
  caf::error fail(std::string why) {
    if (failure_.empty())
      failure_ = std::move(why);
    return stop();
  }
  /// `err` of the inner deserializer, made sticky; after a failure, the failure.
  caf::error checked(caf::error err) {
    if (!failure_.empty())
      return stop();
    if (err)
      return fail(to_string(err));
    return caf::none;
  }

  caf::binary_deserializer inner_;
  std::size_t depth_ = 0;
  std::string failure_;
};

/// Proxies that are never made: the screen's copy of a message names remote actors as null pointers, so checking
/// it creates nothing (CAF makes the real proxies when it parses the message afterwards).
class no_proxies final : public caf::proxy_registry::backend {
 public:
  caf::strong_actor_ptr make_proxy(caf::node_id, caf::actor_id) override { return nullptr; }
  void set_last_hop(caf::node_id*) override {}
};

/// Points `ctx` at a proxy registry of placeholders while alive, and back where it was after.
class placeholder_proxies {
 public:
  explicit placeholder_proxies(caf::execution_unit* ctx)
      : ctx_(ctx), previous_(ctx->proxy_registry_ptr()), registry_(ctx->system(), backend_) {
    ctx_->proxy_registry_ptr(&registry_);
  }
  ~placeholder_proxies() { ctx_->proxy_registry_ptr(previous_); }
  placeholder_proxies(const placeholder_proxies&) = delete;
  placeholder_proxies& operator=(const placeholder_proxies&) = delete;

 private:
  caf::execution_unit* ctx_;
  caf::proxy_registry* previous_;
  no_proxies backend_;
  caf::proxy_registry registry_;
};

std::string node_problem(caf::execution_unit* ctx, const caf::node_id& node, const char* what) {
  if (node == caf::none)
    return fmt::format("its {} names no node", what);
  if (node == ctx->system().node())
    return fmt::format("its {} names this process's own node", what);
  return {};
}

}  // namespace

basp_screen::basp_screen(basp_role role, std::size_t max_payload) : role_(role), max_payload_(max_payload) {}

std::string basp_screen::feed(caf::execution_unit* ctx, const char* data, std::size_t n) {
  while (refused_.empty() && n > 0) {
    if (header_.size() < header_bytes) {
      const std::size_t take = std::min(n, header_bytes - header_.size());
      header_.append(data, take);
      data += take;
      n -= take;
      if (header_.size() < header_bytes)
        break;
      refused_ = check_header();
      if (!refused_.empty() || payload_len_ > 0)
        continue;
    } else {
      // The whole payload at hand (CAF reads exactly a payload at a time) is checked where it lies, else gathered.
      const char* payload = data;
      if (payload_.empty() && n >= payload_len_) {
        data += payload_len_;
        n -= payload_len_;
      } else {
        const std::size_t take = std::min(n, std::size_t{payload_len_} - payload_.size());
        payload_.append(data, take);
        data += take;
        n -= take;
        if (payload_.size() < payload_len_)
          break;
        payload = payload_.data();
      }
      try {
        refused_ = check_payload(ctx, payload);
      } catch (const std::exception& e) {  // what CAF's own parse of these bytes would have thrown in its thread
        refused_ = fmt::format("its {} throws when parsed: {}", operation_name(operation_), e.what());
      }
      if (!refused_.empty())
        continue;
    }
    ++messages_;
    header_.clear();
    if (payload_.capacity() > (std::size_t{1} << 20))
      payload_ = std::string{};  // a big message's buffer is not kept for the small ones after it
    else
      payload_.clear();
  }
  return refused_;
}

std::string basp_screen::check_header() {
  operation_ = static_cast<uint8_t>(header_[0]);
  flags_ = static_cast<uint8_t>(header_[3]);
  payload_len_ = static_cast<uint32_t>(big_endian(header_, 4, 4));
  const uint64_t operation_data = big_endian(header_, 8, 8);
  const uint64_t source_actor = big_endian(header_, 16, 8);
  dest_actor_ = big_endian(header_, 24, 8);
  if (operation_ > heartbeat)
    return fmt::format("a BASP header with the unknown operation {}", operation_);
  const char* op = operation_name(operation_);
  if (header_[1] != 0 || header_[2] != 0 || (flags_ & ~known_flags) != 0)
    return fmt::format("a {} header with unknown flags or padding", op);
  if (payload_len_ > max_payload_)
    return fmt::format("a {} of {} bytes, more than --max-control-message-bytes ({})", op, payload_len_, max_payload_);
  // caf::io::basp::valid(), and a payload where CAF reads one.
  bool valid = true;
  switch (operation_) {
    case server_handshake:
      valid = operation_data != 0 && payload_len_ > 0;
      break;
    case client_handshake:
      valid = source_actor == 0 && dest_actor_ == 0 && payload_len_ > 0;
      break;
    case direct_message:
    case routed_message:
      valid = dest_actor_ != 0 && payload_len_ > 0;
      break;
    case monitor_message:
      valid = payload_len_ > 0 && operation_data == 0;
      break;
    case down_message:
      valid = source_actor != 0 && dest_actor_ == 0 && payload_len_ > 0 && operation_data == 0;
      break;
    case heartbeat:
      valid = source_actor == 0 && dest_actor_ == 0 && payload_len_ == 0 && operation_data == 0;
      break;
    default:
      break;
  }
  if (!valid)
    return fmt::format("a malformed {} header", op);
  // A message's id carries its category: CAF files an up- or downstream one in a stream queue of the receiving
  // actor, which then reads its content as a stream message whatever it is (a segfault). actorllm has no streams.
  constexpr uint64_t category_mask = 0x3000000000000000;  // caf::message_id::category_flag_mask
  if ((operation_ == direct_message || operation_ == routed_message) && ((operation_data & category_mask) >> 60) > 1)
    return fmt::format("a {} of a stream category", op);
  // The order: the peer's handshake opens the connection; a server handshake comes once, from the acceptor.
  const uint8_t opening = role_ == basp_role::acceptor ? client_handshake : server_handshake;
  if (!handshaken_ && operation_ != opening)
    return fmt::format("a {} before its {}", op, operation_name(opening));
  if (handshaken_ && operation_ == server_handshake)
    return "a second server handshake";
  if (role_ == basp_role::acceptor && operation_ == server_handshake)
    return "a server handshake to the accepting side";
  return {};
}

std::string basp_screen::check_payload(caf::execution_unit* ctx, const char* data) {
  const char* op = operation_name(operation_);
  bounded_deserializer source{ctx, data, payload_len_};
  placeholder_proxies proxies{ctx};
  // Whether the parse failed: by what it returned, or by the failure it met on the way (see failure()).
  auto failed = [&](const caf::error& err) { return err || !source.failure().empty(); };
  auto unparsable = [&](const caf::error& err) {
    return fmt::format("its {} does not parse: {}", op,
                       source.failure().empty() ? ctx->system().render(err) : source.failure());
  };
  switch (operation_) {
    case server_handshake: {
      caf::node_id node;
      std::vector<std::string> app_ids;
      caf::actor_id aid = 0;
      std::set<std::string> interfaces;
      if (auto err = source(node, app_ids, aid, interfaces); failed(err))
        return unparsable(err);
      // Our own node here is CAF's "connected to itself", which it handles; no node at all it does not.
      if (node == caf::none)
        return "its server handshake names no node";
      break;
    }
    case client_handshake: {
      caf::node_id node;
      if (auto err = source(node); failed(err))
        return unparsable(err);
      if (auto problem = node_problem(ctx, node, op); !problem.empty())
        return problem;
      break;
    }
    case direct_message:
    case routed_message: {
      if (operation_ == routed_message) {
        caf::node_id from;
        caf::node_id to;
        if (auto err = source(from, to); failed(err))
          return unparsable(err);
        if (to == caf::none)
          return "its routed message names no destination node";
      }
      std::vector<caf::strong_actor_ptr> stages;
      caf::message msg;
      if (auto err = source(stages, msg); failed(err))
        return unparsable(err);
      // CAF takes the actor of a link or unlink message for a proxy; one of ours is not.
      if (msg.match_elements<caf::atom_value, caf::strong_actor_ptr>()) {
        const auto atom = msg.get_as<caf::atom_value>(0);
        if ((atom == caf::link_atom::value || atom == caf::unlink_atom::value) &&
            msg.get_as<caf::strong_actor_ptr>(1) != nullptr)
          return fmt::format("its {} links a proxy that is one of this process's own actors", op);
      }
      break;
    }
    case monitor_message: {
      caf::node_id from;
      caf::node_id to;
      if (auto err = source(from, to); failed(err))
        return unparsable(err);
      break;
    }
    case down_message: {
      caf::node_id from;
      caf::node_id to;
      caf::error reason;
      if (auto err = source(from, to, reason); failed(err))
        return unparsable(err);
      break;
    }
    default:
      break;
  }
  if (operation_ == client_handshake || operation_ == server_handshake)
    handshaken_ = true;
  return {};
}

}  // namespace actorllm::actors
