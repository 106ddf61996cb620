// The meeting of a device communicator's ranks over a rendezvous_store.
#include "comm/device_rendezvous.hpp"

#include "comm/comm_error.hpp"

#include <fmt/format.h>

namespace actorllm::comm {

std::string device_group_key(std::string_view group, uint64_t epoch) {
  return fmt::format("{}/nccl/e{}/", group, epoch);
}

std::vector<char> exchange_unique_id(rendezvous_store& store, std::string_view key_prefix, int rank,
                                     const std::function<std::vector<char>()>& make_id,
                                     std::chrono::milliseconds timeout) {
  const std::string key = fmt::format("{}unique_id", key_prefix);
  if (rank == 0) {
    std::vector<char> id = make_id();
    if (id.empty())
      throw comm_error(fmt::format("{}: rank 0 made an empty unique id", key_prefix));
    store.set(key, id);
    return id;
  }
  std::vector<char> id;
  try {
    id = store.get(key, timeout);
  } catch (const comm_error& e) {
    throw comm_error(fmt::format("{}: rank {} never received rank 0's unique id: {}", key_prefix, rank, e.what()));
  }
  if (id.empty())
    throw comm_error(fmt::format("{}: rank {} received an empty unique id", key_prefix, rank));
  return id;
}

namespace {

// "<0|1>" then the identity: identities may hold any printable character, the flag is always one byte.
std::vector<char> encode(const rank_device& d) {
  std::vector<char> out;
  out.reserve(d.identity.size() + 1);
  out.push_back(d.nccl ? '1' : '0');
  out.insert(out.end(), d.identity.begin(), d.identity.end());
  return out;
}

rank_device decode(const std::vector<char>& bytes, std::string_view key) {
  if (bytes.empty() || (bytes[0] != '0' && bytes[0] != '1'))
    throw comm_error(fmt::format("rendezvous: key '{}' holds no rank device", key));
  return rank_device{std::string(bytes.begin() + 1, bytes.end()), bytes[0] == '1'};
}

}  // namespace

std::vector<rank_device> exchange_rank_devices(rendezvous_store& store, std::string_view key_prefix, int rank, int size,
                                               const rank_device& mine, std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    throw comm_error(fmt::format("{}: rank {} of {} is not a rank of the group", key_prefix, rank, size));
  store.set(fmt::format("{}device/{}", key_prefix, rank), encode(mine));
  std::vector<rank_device> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    if (r == rank) {
      all[static_cast<size_t>(r)] = mine;
      continue;
    }
    const std::string key = fmt::format("{}device/{}", key_prefix, r);
    try {
      all[static_cast<size_t>(r)] = decode(store.get(key, timeout), key);
    } catch (const comm_error& e) {
      throw comm_error(
          fmt::format("{}: rank {} never heard which device rank {} runs on: {}", key_prefix, rank, r, e.what()));
    }
  }
  return all;
}

}  // namespace actorllm::comm
