// The NCCL communicator on real GPUs, ranks as threads of this process (one GPU each): all-reduce, all-gather,
// all-to-all and send/recv against sums and copies computed on the host; abort and the watchdog's timeout unblocking
// a rank whose peer never comes; NCCL's refusal of two ranks on one GPU turned into an error instead of a hang.
// Without a GPU every case is skipped ("skipped: no GPU"); the cases that need two say "skipped: needs 2 GPUs" on a
// machine with one (tests/gpu_skip_listener.cpp). Not run yet on a GPU: written and compiled on a machine without one.
#include "comm/comm_error.hpp"
#include "comm/device_communicator.hpp"
#include "kernels/backend.hpp"

#include "../../comm/rank_threads.hpp"
#include "gpu_test_util.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#ifdef ACTORLLM_HAVE_NCCL
#include "comm/cuda/nccl_collective.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#endif

using namespace actorllm;
using namespace std::chrono_literals;
using cuda_test::gpu_available;
using cuda_test::gpu_count;
using cuda_test::require_gpu;
using cuda_test::require_gpus;

TEST_CASE("nccl: refused by name where it cannot run (no NCCL in the build, or a backend that is not a GPU)") {
  auto cpu = make_backend(device_kind::cpu, 1);
  try {
    make_nccl_communicator(std::vector<char>(128, 0), 0, 1, *cpu, "g", 1000ms);
    FAIL("an NCCL communicator on a CPU backend was made");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("NCCL group 'g'") != std::string::npos);
    CHECK((what.find("not a CUDA GPU") != std::string::npos || what.find("not built with NCCL") != std::string::npos));
  }
  CHECK(gpu_identity(*cpu).empty());
  if (!nccl_built())
    CHECK_THROWS_AS(make_nccl_unique_id(), std::runtime_error);
}

#ifdef ACTORLLM_HAVE_NCCL

namespace {

// Exact in bf16 and f32: small integers.
uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * 3 + (i % 17)); }

// Runs body(rank, backend, communicator) on `n` ranks, rank r on GPU r, all in one NCCL communicator.
template <class F>
void with_ranks(int n, F&& body, std::chrono::milliseconds timeout = 20'000ms) {
  const std::vector<char> id = cuda::nccl_collective::new_unique_id();
  test::run_rank_threads(n, [&](int rank) {
    cuda::cuda_backend be{rank};
    cuda::nccl_options options;
    options.group = "test";
    options.timeout = timeout;
    options.init_timeout = 60'000ms;  // NCCL's first init on a machine can take seconds; only the operations are timed
    cuda::nccl_collective comm{id, rank, n, be, options};
    body(rank, be, comm);
  });
}

}  // namespace

TEST_CASE("nccl (1 GPU): a one-rank communicator runs the NCCL path: all-reduce is the identity, all-gather a copy" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  // Which NCCL the binary found (a wheel's on a GPU machine) against the headers it was built with.
  MESSAGE("NCCL library " << cuda::nccl_collective::library_version() << ", built against "
                          << cuda::nccl_collective::header_version());
  with_ranks(1, [](int, cuda::cuda_backend& be, cuda::nccl_collective& comm) {
    std::vector<float> host(1000);
    for (int64_t i = 0; i < 1000; ++i)
      host[static_cast<size_t>(i)] = value(0, i);
    tensor t = be.alloc(dtype::f32, {1000});
    be.upload(t, host.data(), t.nbytes());
    comm.all_reduce_sum(t);
    tensor g = be.alloc(dtype::f32, {1000});
    comm.all_gather(t, g);
    std::vector<float> got(1000);
    be.download(g, got.data(), g.nbytes());
    comm.raise_if_broken();
    CHECK(got == host);
    std::vector<float> h2 = host;
    comm.all_reduce_sum(h2.data(), 1000);
    CHECK(h2 == host);
  });
}

TEST_CASE("nccl (1 GPU): two ranks on one GPU fail with an error, not a hang" * doctest::skip(!gpu_available())) {
  require_gpu();
  const std::vector<char> id = cuda::nccl_collective::new_unique_id();
  std::vector<std::string> errors(2);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        cuda::cuda_backend be{0};
        cuda::nccl_options options;
        options.group = "duplicate";
        options.timeout = 10'000ms;
        cuda::nccl_collective comm{id, r, 2, be, options};
      } catch (const comm::comm_error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks)
    t.join();
  CAPTURE(errors[0]);
  CAPTURE(errors[1]);
  CHECK((!errors[0].empty() || !errors[1].empty()));
  CHECK(std::chrono::steady_clock::now() - start < 15s);
}

TEST_CASE("nccl (1 GPU): a rank whose peer never joins gives up after the timeout, naming the group" *
          doctest::skip(!gpu_available())) {
  require_gpu();
  cuda::cuda_backend be{0};
  cuda::nccl_options options;
  options.group = "lonely";
  options.timeout = 1500ms;
  const auto start = std::chrono::steady_clock::now();
  try {
    cuda::nccl_collective comm{cuda::nccl_collective::new_unique_id(), 0, 2, be, options};
    FAIL("a communicator of 2 was made with one rank");
  } catch (const comm::comm_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("nccl group 'lonely' rank 0/2") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("nccl (2 GPUs): all-reduce of f32 and bf16 device tensors equals the host sum" *
          doctest::skip(gpu_count() < 2)) {
  require_gpus(2);
  const int n = gpu_count() >= 4 ? 4 : 2;
  const int64_t len = 3 * 1024 + 5;
  with_ranks(n, [&](int rank, cuda::cuda_backend& be, cuda::nccl_collective& comm) {
    std::vector<float> mine(static_cast<size_t>(len));
    std::vector<uint16_t> mine16(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) {
      mine[static_cast<size_t>(i)] = value(rank, i);
      mine16[static_cast<size_t>(i)] = to_bf16(value(rank, i));
    }
    tensor t = be.alloc(dtype::f32, {len});
    tensor t16 = be.alloc(dtype::bf16, {len});
    be.upload(t, mine.data(), t.nbytes());
    be.upload(t16, mine16.data(), t16.nbytes());
    comm.all_reduce_sum(t);
    comm.all_reduce_sum(t16);
    std::vector<float> got(static_cast<size_t>(len));
    std::vector<uint16_t> got16(static_cast<size_t>(len));
    be.download(t, got.data(), t.nbytes());
    be.download(t16, got16.data(), t16.nbytes());
    comm.raise_if_broken();
    for (int64_t i = 0; i < len; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r)
        want += value(r, i);
      REQUIRE(got[static_cast<size_t>(i)] == want);
      REQUIRE(from_bf16(got16[static_cast<size_t>(i)]) == want);  // sums of small integers stay exact in bf16
    }
  });
}

TEST_CASE("nccl (2 GPUs): all-gather, the host primitives and all_to_all_rows match the host result" *
          doctest::skip(gpu_count() < 2)) {
  require_gpus(2);
  const int n = 2;
  with_ranks(n, [&](int rank, cuda::cuda_backend& be, cuda::nccl_collective& comm) {
    const int64_t len = 777;
    std::vector<float> mine(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i)
      mine[static_cast<size_t>(i)] = value(rank, i);
    tensor in = be.alloc(dtype::f32, {len});
    tensor out = be.alloc(dtype::f32, {n * len});
    be.upload(in, mine.data(), in.nbytes());
    comm.all_gather(in, out);
    std::vector<float> got(static_cast<size_t>(n * len));
    be.download(out, got.data(), out.nbytes());
    comm.raise_if_broken();
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < len; ++i)
        REQUIRE(got[static_cast<size_t>(r * len + i)] == value(r, i));
    // Host primitives.
    std::vector<float> sum = mine;
    comm.all_reduce_sum(sum.data(), len);
    for (int64_t i = 0; i < len; ++i)
      REQUIRE(sum[static_cast<size_t>(i)] == value(0, i) + value(1, i));
    std::vector<float> gathered(static_cast<size_t>(n * len));
    comm.all_gather(mine.data(), len, gathered.data());
    CHECK(gathered == got);
    // all_to_all_rows: rank r sends (r + d + 1) rows of width 3 to rank d, each row filled with 100 r + 10 d + k.
    const int64_t width = 3;
    std::vector<int64_t> send_rows(static_cast<size_t>(n));
    std::vector<float> send;
    for (int d = 0; d < n; ++d) {
      send_rows[static_cast<size_t>(d)] = rank + d + 1;
      for (int64_t k = 0; k < rank + d + 1; ++k)
        for (int64_t c = 0; c < width; ++c)
          send.push_back(static_cast<float>(100 * rank + 10 * d + k));
    }
    std::vector<float> recv;
    const std::vector<int64_t> from = comm.all_to_all_rows(send.data(), send_rows, width, recv);
    std::vector<float> want;
    for (int s = 0; s < n; ++s) {
      REQUIRE(from[static_cast<size_t>(s)] == s + rank + 1);
      for (int64_t k = 0; k < s + rank + 1; ++k)
        for (int64_t c = 0; c < width; ++c)
          want.push_back(static_cast<float>(100 * s + 10 * rank + k));
    }
    CHECK(recv == want);
  });
}

TEST_CASE("nccl (2 GPUs): send/recv of a device tensor between two ranks" * doctest::skip(gpu_count() < 2)) {
  require_gpus(2);
  with_ranks(2, [&](int rank, cuda::cuda_backend& be, cuda::nccl_collective& comm) {
    const int64_t rows = 5, n_embd = 4096;
    tensor t = be.alloc(dtype::f32, {rows, n_embd});
    std::vector<float> host(static_cast<size_t>(rows * n_embd));
    for (int step = 0; step < 3; ++step) {  // transfers match in order
      if (rank == 0) {
        for (size_t i = 0; i < host.size(); ++i)
          host[i] = static_cast<float>(step * 1000 + static_cast<int>(i % 1000));
        be.upload(t, host.data(), t.nbytes());
        comm.send(t, 1);
        be.synchronize();
      } else {
        comm.recv(t, 0);
        be.download(t, host.data(), t.nbytes());
        for (size_t i = 0; i < host.size(); ++i)
          REQUIRE(host[i] == static_cast<float>(step * 1000 + static_cast<int>(i % 1000)));
      }
      comm.raise_if_broken();
    }
  });
}

TEST_CASE("nccl (2 GPUs): abort from another thread unblocks a rank waiting in a collective whose peer is gone" *
          doctest::skip(gpu_count() < 2)) {
  require_gpus(2);
  std::promise<std::function<void(const std::string&)>> handle;
  auto handle_future = handle.get_future();
  std::promise<void> rank1_joined;
  std::thread aborter([&] {
    auto abort = handle_future.get();
    std::this_thread::sleep_for(300ms);  // rank 0 is waiting in its all-reduce by then
    abort("peer declared dead by the test");
  });
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_finished = rank0_done.get_future().share();
  std::string error;
  std::chrono::steady_clock::duration waited{};
  with_ranks(
      2,
      [&](int rank, cuda::cuda_backend& be, cuda::nccl_collective& comm) {
        if (rank == 1) {
          rank0_finished.wait();  // joined, alive, but never takes part in a collective: a peer that is gone
          return;
        }
        tensor t = be.alloc(dtype::f32, {1 << 20});
        const auto start = std::chrono::steady_clock::now();
        handle.set_value(comm.abort_handle());
        comm.all_reduce_sum(t);
        be.synchronize();  // would wait forever on the missing peer without the abort
        waited = std::chrono::steady_clock::now() - start;
        try {
          comm.raise_if_broken();
        } catch (const comm::comm_error& e) {
          error = e.what();
        }
        CHECK_THROWS_AS(comm.all_reduce_sum(t), comm::comm_error);  // broken for good
        rank0_done.set_value();
      },
      60'000ms);  // long: the abort, not the watchdog's timeout, must be what ends it
  aborter.join();
  CAPTURE(error);
  CHECK(error.find("peer declared dead by the test") != std::string::npos);
  CHECK(error.find("nccl group 'test' rank 0/2") != std::string::npos);
  CHECK(waited < 30s);
}

TEST_CASE("nccl (2 GPUs): the watchdog aborts a collective whose peer never comes after the timeout" *
          doctest::skip(gpu_count() < 2)) {
  require_gpus(2);
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_finished = rank0_done.get_future().share();
  std::string error;
  std::chrono::steady_clock::duration waited{};
  with_ranks(
      2,
      [&](int rank, cuda::cuda_backend& be, cuda::nccl_collective& comm) {
        if (rank == 1) {
          rank0_finished.wait();
          return;
        }
        tensor t = be.alloc(dtype::f32, {4096});
        const auto start = std::chrono::steady_clock::now();
        comm.all_reduce_sum(t);
        be.synchronize();  // returns once the watchdog has aborted the communicator
        waited = std::chrono::steady_clock::now() - start;
        try {
          comm.raise_if_broken();
        } catch (const comm::comm_error& e) {
          error = e.what();
        }
        rank0_done.set_value();
      },
      1000ms);
  CAPTURE(error);
  CHECK(error.find("ncclAllReduce did not complete within 1000 ms") != std::string::npos);
  CHECK(waited < 20s);
}

#endif  // ACTORLLM_HAVE_NCCL
