// The meeting of a custom all-reduce group: every rank publishes the CUDA IPC handles of its data and signal buffers
// through the rendezvous store, reads every peer's, checks that they belong together, and maps the peers' buffers
// into its own process. Plain C++ over rendezvous_store and comm/ipc_memory.hpp's ipc_backend, so the protocol is
// unit-tested with memory_store and a fake backend on threads.
#pragma once

#include "comm/ipc_memory.hpp"
#include "comm/rendezvous_store.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace actorllm::comm {

/// What one rank brings to the handshake.
struct ipc_handshake_config {
  /// The group's name; with the epoch, the prefix of every key ("<group>/ipc/<epoch>/rank<r>").
  std::string group;
  /// A re-created group takes a new epoch, so it never reads a dead group's keys (the store keeps them).
  uint64_t epoch = 0;
  int rank = 0;
  int world_size = 1;
  /// This rank's data buffer (the start of a device allocation) and its size; every rank's must be the same size.
  void* data = nullptr;
  size_t data_bytes = 0;
  /// This rank's signal buffer (the start of a device allocation, zeroed before the handshake) and its size.
  void* signal = nullptr;
  size_t signal_bytes = 0;
  /// How long to wait for all peers together.
  std::chrono::milliseconds timeout{30000};
};

/// What a rank publishes: its identity, its buffers' sizes and their handles.
struct ipc_rank_record {
  std::string group;
  uint64_t epoch = 0;
  int rank = 0;
  int world_size = 0;
  int device_id = -1;
  int64_t process_id = 0;
  /// Random per handshake: tells a rank's own record from another process that claimed the same rank.
  uint64_t instance = 0;
  uint64_t data_bytes = 0;
  uint64_t signal_bytes = 0;
  ipc_handle data;
  ipc_handle signal;
};

/// The store key of `rank`'s record.
std::string ipc_handshake_key(const std::string& group, uint64_t epoch, int rank);

/// The store key of `rank`'s outcome ("ok" once it has mapped every peer, or its failure) for the record of that
/// `instance`: a rank that publishes again (a new handshake in the same epoch) never has its old outcome read.
std::string ipc_outcome_key(const std::string& group, uint64_t epoch, int rank, uint64_t instance);

/// The record's bytes (a magic and version first, little-endian fixed-width fields).
std::vector<char> encode_ipc_record(const ipc_rank_record& record);

/// Parses a record read under `key`; throws comm_error naming the key when the bytes are not a record.
ipc_rank_record decode_ipc_record(const std::vector<char>& bytes, const std::string& key);

/// Runs the handshake of one rank: publish, read every peer, validate, open the peers' handles (never this rank's
/// own), then publish the outcome and wait for every peer's: no rank returns before every peer has mapped its
/// buffers (so none frees them while a peer is still opening them), and one rank's failure fails every rank, named.
/// Every failure is a comm_error naming the group, the epoch, this rank, the peer and the field: a peer that never
/// published (after the timeout), a record of another group, epoch or world size, a different buffer size, two ranks
/// with one record, a peer in this very process when the backend cannot open those. On failure every handle already
/// opened is closed again. The returned object closes the peers' mappings when destroyed.
std::unique_ptr<ipc_peer_buffers> ipc_handshake(rendezvous_store& store, ipc_backend& backend,
                                                const ipc_handshake_config& config);

}  // namespace actorllm::comm
