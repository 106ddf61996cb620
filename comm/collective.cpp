// The host-memory forms of the tensor collectives.
#include "comm/collective.hpp"

#include "util/check.hpp"

#include <algorithm>

namespace actorllm {

void tp_collective::all_reduce_sum(const tensor& t) {
  ACTORLLM_CHECK(t.type == dtype::f32, "all_reduce_sum: the tensor must be f32");
  ACTORLLM_CHECK(t.where().kind == device_kind::cpu,
                 "all_reduce_sum: this communicator reduces host memory only; the tensor is on a device");
  all_reduce_sum(t.data_as<float>(), t.numel());
}

void tp_collective::all_gather(const tensor& in, const tensor& out) {
  ACTORLLM_CHECK(in.type == dtype::f32 && out.type == dtype::f32, "all_gather: the tensors must be f32");
  ACTORLLM_CHECK(in.where().kind == device_kind::cpu && out.where().kind == device_kind::cpu,
                 "all_gather: this communicator gathers host memory only; a tensor is on a device");
  ACTORLLM_CHECK(out.numel() == in.numel() * size(), "all_gather: the output must hold size() inputs");
  all_gather(in.data_as<float>(), in.numel(), out.data_as<float>());
}

std::vector<int64_t> tp_collective::all_to_all_rows(const float* send, std::span<const int64_t> send_rows,
                                                    int64_t width, std::vector<float>& recv) {
  return all_to_all_rows_via_all_gather(send, send_rows, width, recv);
}

void tp_collective::count_all_to_all(int64_t sent_rows, int64_t received_rows, int64_t width) {
  const auto peers = static_cast<uint64_t>(size() - 1);
  const auto row_bytes = static_cast<uint64_t>(width) * sizeof(float);
  exchange_stats_.exchanges += 1;
  exchange_stats_.rows_sent += static_cast<uint64_t>(sent_rows);
  exchange_stats_.rows_received += static_cast<uint64_t>(received_rows);
  exchange_stats_.bytes_sent += static_cast<uint64_t>(sent_rows) * row_bytes + peers * sizeof(int64_t);
  exchange_stats_.bytes_received += static_cast<uint64_t>(received_rows) * row_bytes + peers * sizeof(int64_t);
}

int64_t tp_collective::rows_to_send(std::span<const int64_t> send_rows, int64_t width) const {
  ACTORLLM_CHECK(static_cast<int>(send_rows.size()) == size(), "all_to_all_rows: one send count per rank");
  ACTORLLM_CHECK(width > 0, "all_to_all_rows: rows must have a width");
  int64_t n_send = 0;
  for (const int64_t rows : send_rows) {
    ACTORLLM_CHECK(rows >= 0, "all_to_all_rows: a negative row count");
    n_send += rows;
  }
  return n_send;
}

std::vector<int64_t> tp_collective::all_to_all_alone(const float* send, int64_t n_send, int64_t width,
                                                     std::vector<float>& recv) {
  recv.assign(send, send + n_send * width);
  count_all_to_all(0, 0, width);
  return {n_send};
}

std::vector<int64_t> tp_collective::all_to_all_rows_via_all_gather(const float* send,
                                                                   std::span<const int64_t> send_rows, int64_t width,
                                                                   std::vector<float>& recv) {
  const int n = size();
  const int me = rank();
  ACTORLLM_CHECK(static_cast<int>(send_rows.size()) == n, "all_to_all_rows: one send count per rank");
  ACTORLLM_CHECK(width > 0, "all_to_all_rows: rows must have a width");
  const auto un = static_cast<size_t>(n);
  // Step 1: every rank's counts (row counts stay far below 2^24, so floats carry them exactly).
  std::vector<float> my_counts(un);
  int64_t my_total = 0;
  for (size_t d = 0; d < un; ++d) {
    ACTORLLM_CHECK(send_rows[d] >= 0 && send_rows[d] < (int64_t{1} << 24), "all_to_all_rows: bad row count");
    my_counts[d] = static_cast<float>(send_rows[d]);
    my_total += send_rows[d];
  }
  std::vector<float> counts(un * un);
  all_gather(my_counts.data(), n, counts.data());
  auto count = [&](size_t src, size_t dst) { return static_cast<int64_t>(counts[src * un + dst]); };
  int64_t max_total = 0;
  std::vector<int64_t> from(un);
  for (size_t src = 0; src < un; ++src) {
    int64_t total = 0;
    for (size_t d = 0; d < un; ++d)
      total += count(src, d);
    max_total = std::max(max_total, total);
    from[src] = count(src, static_cast<size_t>(me));
  }
  int64_t n_recv = 0;
  for (int64_t r : from)
    n_recv += r;
  recv.assign(static_cast<size_t>(n_recv * width), 0.0f);
  // What the two all-gathers carry between ranks: every rank's counts, then every rank's padded buffer, to each peer.
  const auto peers = static_cast<uint64_t>(n - 1);
  const uint64_t carried = peers * (un + static_cast<uint64_t>(max_total * width)) * sizeof(float);
  exchange_stats_.exchanges += 1;
  exchange_stats_.rows_sent += static_cast<uint64_t>(my_total - send_rows[static_cast<size_t>(me)]);
  exchange_stats_.rows_received += static_cast<uint64_t>(n_recv - from[static_cast<size_t>(me)]);
  exchange_stats_.bytes_sent += carried;
  exchange_stats_.bytes_received += carried;
  if (max_total == 0)
    return from;
  // Step 2: every rank's rows, padded to the largest send; each rank keeps the runs addressed to it.
  std::vector<float> padded(static_cast<size_t>(max_total * width), 0.0f);
  if (my_total > 0)
    std::copy(send, send + my_total * width, padded.begin());
  std::vector<float> all(un * padded.size());
  all_gather(padded.data(), static_cast<int64_t>(padded.size()), all.data());
  float* out = recv.data();
  for (size_t src = 0; src < un; ++src) {
    int64_t offset = 0;  // rows src sent to ranks before this one
    for (size_t d = 0; d < static_cast<size_t>(me); ++d)
      offset += count(src, d);
    const float* begin = all.data() + src * padded.size() + offset * width;
    out = std::copy(begin, begin + from[src] * width, out);
  }
  return from;
}

}  // namespace actorllm
