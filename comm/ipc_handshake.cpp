// The IPC handshake: records, their encoding, and the exchange.
#include "comm/ipc_handshake.hpp"

#include "comm/comm_error.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string_view>

namespace actorllm::comm {
namespace {

constexpr std::string_view record_magic = "actorllm-ipc/1";

template <class T>
void put(std::vector<char>& out, T v) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  auto u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

class reader {
 public:
  reader(const std::vector<char>& bytes, const std::string& key) : bytes_(bytes), key_(key) {}

  template <class T>
  T get() {
    need(sizeof(T));
    using U = std::make_unsigned_t<T>;
    U u = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      u |= static_cast<U>(static_cast<U>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i));
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }
  std::string string(size_t n) {
    need(n);
    std::string s(bytes_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  ipc_handle handle() {
    need(ipc_handle::size);
    ipc_handle h;
    std::memcpy(h.bytes.data(), bytes_.data() + pos_, ipc_handle::size);
    pos_ += ipc_handle::size;
    return h;
  }
  void finish() const {
    if (pos_ != bytes_.size())
      throw comm_error(
          fmt::format("ipc handshake: the record under '{}' has {} bytes after its end", key_, bytes_.size() - pos_));
  }

 private:
  void need(size_t n) const {
    if (bytes_.size() - pos_ < n)
      throw comm_error(
          fmt::format("ipc handshake: the record under '{}' is truncated ({} bytes)", key_, bytes_.size()));
  }
  const std::vector<char>& bytes_;
  const std::string& key_;
  size_t pos_ = 0;
};

uint64_t random_instance() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

constexpr std::string_view outcome_ok = "ok";
constexpr std::string_view outcome_failed = "failed\n";

// What a rank says after its first phase: "ok", or "failed\n" and its error.
std::vector<char> encode_outcome(std::string_view failure) {
  const std::string text = failure.empty() ? std::string(outcome_ok) : fmt::format("{}{}", outcome_failed, failure);
  return {text.begin(), text.end()};
}

// The failure a peer reported ("" for ok); throws on bytes that are neither.
std::string decode_outcome(const std::vector<char>& bytes, const std::string& key) {
  const std::string_view v(bytes.data(), bytes.size());
  if (v == outcome_ok)
    return {};
  if (v.starts_with(outcome_failed) && v.size() > outcome_failed.size())
    return std::string(v.substr(outcome_failed.size()));
  throw comm_error(fmt::format("ipc handshake: the value under '{}' is not a rank's outcome", key));
}

}  // namespace

std::string ipc_handshake_key(const std::string& group, uint64_t epoch, int rank) {
  return fmt::format("{}/ipc/{}/rank{}", group, epoch, rank);
}

std::string ipc_outcome_key(const std::string& group, uint64_t epoch, int rank, uint64_t instance) {
  return fmt::format("{}/ipc/{}/outcome/rank{}/{:016x}", group, epoch, rank, instance);
}

std::vector<char> encode_ipc_record(const ipc_rank_record& r) {
  std::vector<char> out(record_magic.begin(), record_magic.end());
  put(out, static_cast<uint32_t>(r.group.size()));
  out.insert(out.end(), r.group.begin(), r.group.end());
  put(out, r.epoch);
  put(out, static_cast<int32_t>(r.rank));
  put(out, static_cast<int32_t>(r.world_size));
  put(out, static_cast<int32_t>(r.device_id));
  put(out, r.process_id);
  put(out, r.instance);
  put(out, r.data_bytes);
  put(out, r.signal_bytes);
  out.insert(out.end(), r.data.bytes.begin(), r.data.bytes.end());
  out.insert(out.end(), r.signal.bytes.begin(), r.signal.bytes.end());
  return out;
}

ipc_rank_record decode_ipc_record(const std::vector<char>& bytes, const std::string& key) {
  reader in(bytes, key);
  if (bytes.size() < record_magic.size() || in.string(record_magic.size()) != record_magic)
    throw comm_error(fmt::format("ipc handshake: the value under '{}' is not an IPC record (wrong magic)", key));
  ipc_rank_record r;
  const auto group_size = in.get<uint32_t>();
  r.group = in.string(group_size);
  r.epoch = in.get<uint64_t>();
  r.rank = in.get<int32_t>();
  r.world_size = in.get<int32_t>();
  r.device_id = in.get<int32_t>();
  r.process_id = in.get<int64_t>();
  r.instance = in.get<uint64_t>();
  r.data_bytes = in.get<uint64_t>();
  r.signal_bytes = in.get<uint64_t>();
  r.data = in.handle();
  r.signal = in.handle();
  in.finish();
  return r;
}

namespace {

// The first phase after publishing: read every record, validate them all, then open the peers' handles.
std::unique_ptr<ipc_peer_buffers> read_and_open_peers(rendezvous_store& store, ipc_backend& backend,
                                                      const ipc_handshake_config& config, const ipc_rank_record& own,
                                                      const std::string& where,
                                                      std::chrono::steady_clock::time_point deadline,
                                                      std::vector<uint64_t>& instances) {
  auto buffers = std::make_unique<ipc_peer_buffers>(backend, config.rank, config.world_size, config.data_bytes,
                                                    config.signal_bytes);
  buffers->set_own({config.data, config.signal, own.device_id});

  // Read every record first (this rank's own too: another process that claimed this rank replaced it), validate
  // them all, and only then open: a group that does not belong together maps nothing.
  std::vector<ipc_rank_record> records(static_cast<size_t>(config.world_size));
  for (int r = 0; r < config.world_size; ++r) {
    const auto key = ipc_handshake_key(config.group, config.epoch, r);
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                 std::chrono::milliseconds{0});
    std::vector<char> bytes;
    try {
      bytes = store.get(key, left);
    } catch (const comm_error&) {
      throw comm_error(fmt::format("{}: rank {} did not publish its IPC buffers within {} ms (key '{}')", where, r,
                                   config.timeout.count(), key));
    }
    const auto rec = decode_ipc_record(bytes, key);
    const auto mismatch = [&](std::string_view field, const auto& theirs, const auto& ours) {
      return comm_error(fmt::format("{}: rank {} reports {} = {}, this rank has {}", where, r, field, theirs, ours));
    };
    if (rec.group != config.group)
      throw mismatch("group", rec.group, config.group);
    if (rec.epoch != config.epoch)
      throw mismatch("epoch", rec.epoch, config.epoch);
    if (rec.rank != r)
      throw comm_error(fmt::format("{}: the record under '{}' claims rank {}", where, key, rec.rank));
    if (rec.world_size != config.world_size)
      throw mismatch("world_size", rec.world_size, config.world_size);
    if (rec.data_bytes != config.data_bytes)
      throw mismatch("data_bytes", rec.data_bytes, config.data_bytes);
    if (rec.signal_bytes != config.signal_bytes)
      throw mismatch("signal_bytes", rec.signal_bytes, config.signal_bytes);
    if (r == config.rank && rec.instance != own.instance)
      throw comm_error(fmt::format("{}: another process (pid {}) published as rank {} too", where, rec.process_id, r));
    if (r != config.rank && rec.process_id == own.process_id && !backend.opens_own_process())
      throw comm_error(
          fmt::format("{}: rank {} runs in this process (pid {}); CUDA IPC cannot map a handle into the "
                      "process that exported it, so ranks of one process need another collective",
                      where, r, rec.process_id));
    for (int q = 0; q < r; ++q)
      if (records[static_cast<size_t>(q)].data == rec.data || records[static_cast<size_t>(q)].signal == rec.signal)
        throw comm_error(fmt::format("{}: ranks {} and {} published the same buffer handle", where, q, r));
    records[static_cast<size_t>(r)] = rec;
    instances[static_cast<size_t>(r)] = rec.instance;
  }

  // Open in rank order; a failure leaves the peers opened so far in `buffers`, whose destructor closes them.
  for (int r = 0; r < config.world_size; ++r) {
    if (r == config.rank)
      continue;
    const auto& rec = records[static_cast<size_t>(r)];
    ipc_rank_buffers mapped;
    mapped.device_id = rec.device_id;
    try {
      mapped.data = backend.open_handle(rec.data);
      mapped.signal = backend.open_handle(rec.signal);
    } catch (const std::exception& e) {
      if (mapped.data != nullptr)
        backend.close_handle(mapped.data);
      throw comm_error(fmt::format("{}: opening rank {}'s IPC handles failed: {}", where, r, e.what()));
    }
    buffers->set_opened_peer(r, mapped);
  }
  return buffers;
}

}  // namespace

std::unique_ptr<ipc_peer_buffers> ipc_handshake(rendezvous_store& store, ipc_backend& backend,
                                                const ipc_handshake_config& config) {
  const auto where =
      fmt::format("ipc handshake of group '{}' (epoch {}), rank {}", config.group, config.epoch, config.rank);
  if (config.world_size < 1 || config.rank < 0 || config.rank >= config.world_size)
    throw comm_error(fmt::format("{}: rank outside a group of {}", where, config.world_size));
  if (config.data == nullptr || config.signal == nullptr || config.data_bytes == 0 || config.signal_bytes == 0)
    throw comm_error(fmt::format("{}: no data or signal buffer to share", where));

  ipc_rank_record own;
  own.group = config.group;
  own.epoch = config.epoch;
  own.rank = config.rank;
  own.world_size = config.world_size;
  own.device_id = backend.device_id();
  own.process_id = static_cast<int64_t>(::getpid());
  own.instance = random_instance();
  own.data_bytes = config.data_bytes;
  own.signal_bytes = config.signal_bytes;
  own.data = backend.export_handle(config.data);
  own.signal = backend.export_handle(config.signal);
  store.set(ipc_handshake_key(config.group, config.epoch, config.rank), encode_ipc_record(own));

  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  const auto time_left = [&] {
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                    std::chrono::milliseconds{0});
  };
  std::unique_ptr<ipc_peer_buffers> buffers;
  std::vector<uint64_t> instances(static_cast<size_t>(config.world_size));  // of the records this rank read
  try {
    buffers = read_and_open_peers(store, backend, config, own, where, deadline, instances);
  } catch (const std::exception& e) {
    // The peers learn of it in their second phase instead of waiting for this rank until their timeout.
    store.set(ipc_outcome_key(config.group, config.epoch, config.rank, own.instance), encode_outcome(e.what()));
    throw;
  }
  store.set(ipc_outcome_key(config.group, config.epoch, config.rank, own.instance), encode_outcome(""));

  // The second phase: no rank returns before every peer has mapped its buffers. A rank that returned at once could
  // fail or exit before a slower peer opened its handles, freeing what that peer was opening (the first GPU run:
  // cudaIpcOpenMemHandle "invalid argument" on rank 1 after rank 0 had thrown); and a group where one rank could
  // not map fails on every rank, naming it, rather than on one.
  for (int r = 0; r < config.world_size; ++r) {
    if (r == config.rank)
      continue;
    // Under the instance of the record this rank opened: an earlier handshake's outcome is never read.
    const auto key = ipc_outcome_key(config.group, config.epoch, r, instances[static_cast<size_t>(r)]);
    std::vector<char> bytes;
    try {
      bytes = store.get(key, time_left());
    } catch (const comm_error&) {
      throw comm_error(fmt::format("{}: rank {} did not report mapping the group's buffers within {} ms (key '{}')",
                                   where, r, config.timeout.count(), key));
    }
    const std::string failure = decode_outcome(bytes, key);
    if (!failure.empty())
      throw comm_error(fmt::format("{}: rank {} could not join the group: {}", where, r, failure));
  }
  return buffers;
}

}  // namespace actorllm::comm
