// Expert parallelism's exchange: the real all-to-all (tp_collective::all_to_all_rows) against the all-gather form it
// replaced (all_to_all_rows_via_all_gather), on the host transports an EP group runs over: threads of one process
// (shared_memory_collective, the lockstep EP group), processes of one host (interprocess_collective, forked here) and
// Gloo over loopback TCP (threads, each its own Gloo rank). One step is an MoE layer's dispatch ([expert id, hidden]
// rows of width n_embd + 1 to the ranks holding each token's experts) and combine (n_embd-wide outputs back), with
// Mixtral's routing shape: top-2 of 8 experts, split contiguously over the ep ranks, drawn from a seeded generator.
// Reports, per rank and step, the bytes moved (what each rank receives from the others; on average it sends as
// much) and the step time of both forms, and their ratios. Prints a table, writes JSON.
//
// Every rank is a thread or process of this one machine: with fewer cores than ranks they take turns, and the times
// say more about the scheduler than the transport; the bytes do not depend on it.
#include "bench/bench_json.hpp"
#include "comm/gloo_collective.hpp"
#include "comm/interprocess_collective.hpp"
#include "comm/memory_store.hpp"
#include "comm/shared_memory_collective.hpp"
#include "util/json_writer.hpp"

#include <gloo/rendezvous/file_store.h>
#include <CLI/CLI.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace actorllm;

constexpr int n_expert = 8;
constexpr int n_expert_used = 2;

struct shape {
  int ep = 4;
  int64_t n_embd = 4096;
  int64_t tokens = 16;  // per rank
};

/// One rank's measurement of one form (all-to-all or all-gather) on one shape.
struct rank_result {
  double step_seconds = 0;
  uint64_t bytes_received = 0;  // per step
  uint64_t bytes_sent = 0;      // per step
};

/// Steps per measurement: enough to average small exchanges, few for the large ones. The same on every rank
/// (a collective's ranks must agree), since it depends on the shape alone.
int steps_for(const shape& s) {
  const double bytes = static_cast<double>(s.tokens * n_expert_used * s.n_embd) * sizeof(float) * s.ep;
  return static_cast<int>(std::clamp(64e6 / bytes, 3.0, 50.0));
}

/// The dispatch rows of one rank: each token's two experts drawn from a generator seeded by the rank; rows grouped
/// by destination rank, as moe_layer lays them out.
struct dispatch {
  std::vector<int64_t> send_rows;
  std::vector<float> send;
};

dispatch make_dispatch(const shape& s, int rank, uint32_t seed) {
  std::mt19937 rng{seed * 1009u + static_cast<uint32_t>(rank)};
  std::uniform_int_distribution<int> pick{0, n_expert - 1};
  const int experts_per_rank = n_expert / s.ep;
  std::vector<std::vector<int>> experts_to(static_cast<size_t>(s.ep));
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int a = pick(rng);
    int b = pick(rng);
    while (b == a)
      b = pick(rng);
    for (int e : {a, b})
      experts_to[static_cast<size_t>(e / experts_per_rank)].push_back(e);
  }
  dispatch d;
  const int64_t width = s.n_embd + 1;
  for (const auto& experts : experts_to) {
    d.send_rows.push_back(static_cast<int64_t>(experts.size()));
    for (int e : experts) {
      d.send.push_back(static_cast<float>(e));
      d.send.insert(d.send.end(), static_cast<size_t>(width - 1), 0.5f);
    }
  }
  return d;
}

/// Runs `steps` MoE exchanges (dispatch and combine) on `c`, all-to-all or all-gather, after one warm-up.
rank_result measure(tp_collective& c, const shape& s, bool all_gather_form, uint32_t seed) {
  const dispatch d = make_dispatch(s, c.rank(), seed);
  const int64_t width = s.n_embd + 1;
  std::vector<float> recv, out, back;
  auto step = [&] {
    auto exchange = [&](const float* send, std::span<const int64_t> rows, int64_t w, std::vector<float>& into) {
      return all_gather_form ? c.all_to_all_rows_via_all_gather(send, rows, w, into)
                             : c.all_to_all_rows(send, rows, w, into);
    };
    const std::vector<int64_t> from = exchange(d.send.data(), d.send_rows, width, recv);
    // The experts' outputs: one n_embd row per row received (their values do not matter here).
    out.assign(recv.size() / static_cast<size_t>(width) * static_cast<size_t>(s.n_embd), 0.25f);
    exchange(out.data(), from, s.n_embd, back);
  };
  step();
  const int steps = steps_for(s);
  const exchange_stats before = c.exchange_statistics();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i)
    step();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const exchange_stats after = c.exchange_statistics();
  return {seconds / steps, (after.bytes_received - before.bytes_received) / static_cast<uint64_t>(steps),
          (after.bytes_sent - before.bytes_sent) / static_cast<uint64_t>(steps)};
}

/// One row of the table: both forms on one transport and shape, over all ranks.
struct row {
  std::string transport;
  shape s;
  rank_result all_to_all, all_gather;  // bytes: the mean over ranks; time: the slowest rank's
};

rank_result combine(const std::vector<rank_result>& ranks) {
  rank_result r;
  for (const auto& x : ranks) {
    r.step_seconds = std::max(r.step_seconds, x.step_seconds);
    r.bytes_received += x.bytes_received;
    r.bytes_sent += x.bytes_sent;
  }
  r.bytes_received /= ranks.size();
  r.bytes_sent /= ranks.size();
  return r;
}

/// Runs body(rank) for every rank, each on its own thread.
template <class Body>
void on_threads(int n, Body&& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { body(r); });
  for (auto& t : threads)
    t.join();
}

row threads_row(const shape& s, uint32_t seed) {
  auto group = std::make_shared<comm::shared_memory_group>(s.ep, "the expert-parallel group");
  std::vector<rank_result> a2a(static_cast<size_t>(s.ep)), ag(static_cast<size_t>(s.ep));
  on_threads(s.ep, [&](int r) {
    comm::shared_memory_collective c{group, r};
    a2a[static_cast<size_t>(r)] = measure(c, s, false, seed);
    ag[static_cast<size_t>(r)] = measure(c, s, true, seed);
  });
  return {"threads (shared memory)", s, combine(a2a), combine(ag)};
}

row gloo_row(const shape& s, uint32_t seed, int index) {
  comm::memory_store store;
  std::vector<rank_result> a2a(static_cast<size_t>(s.ep)), ag(static_cast<size_t>(s.ep));
  on_threads(s.ep, [&](int r) {
    auto group = std::make_shared<comm::gloo_group>(store, "ep" + std::to_string(index), r, s.ep,
                                                    comm::gloo_group_options{.host = "127.0.0.1"});
    comm::gloo_collective c{group};
    a2a[static_cast<size_t>(r)] = measure(c, s, false, seed);
    ag[static_cast<size_t>(r)] = measure(c, s, true, seed);
  });
  return {"Gloo (loopback TCP)", s, combine(a2a), combine(ag)};
}

/// A rendezvous_store over Gloo's FileStore in a directory the forked ranks share.
class file_store final : public comm::rendezvous_store {
 public:
  explicit file_store(const std::string& dir) : store_(dir) {}
  void set(const std::string& key, const std::vector<char>& value) override { store_.set(flat(key), value); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    store_.wait({flat(key)}, timeout);
    return store_.get(flat(key));
  }

 private:
  static std::string flat(std::string key) {
    std::replace(key.begin(), key.end(), '/', '_');
    return key;
  }
  gloo::rendezvous::FileStore store_;
};

/// Every shape over forked processes: one child per rank runs them all, its results in memory shared with this
/// process. Runs before any Gloo group exists here (Gloo's threads do not survive a fork).
std::vector<row> process_rows(const std::vector<shape>& shapes, int ep, uint32_t seed) {
  const auto dir = std::filesystem::temp_directory_path() / ("actorllm-bench-ep-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const size_t n_results = shapes.size() * static_cast<size_t>(ep) * 2;
  void* mem =
      ::mmap(nullptr, n_results * sizeof(rank_result), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    throw std::runtime_error("mmap of the results failed");
  auto* results = new (mem) rank_result[n_results];
  std::vector<pid_t> children;
  for (int r = 0; r < ep; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        file_store store{dir.string()};
        auto c = comm::interprocess_collective::try_create(store, "ep", r, ep);
        if (!c)
          ::_exit(4);
        for (size_t i = 0; i < shapes.size(); ++i) {
          results[(i * static_cast<size_t>(ep) + static_cast<size_t>(r)) * 2] = measure(*c, shapes[i], false, seed);
          results[(i * static_cast<size_t>(ep) + static_cast<size_t>(r)) * 2 + 1] = measure(*c, shapes[i], true, seed);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 2;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "processes at ep %d: a rank ended with wait status %d%s\n", ep, status,
                   WIFEXITED(status) && WEXITSTATUS(status) == 4 ? " (no shared-memory segment for every rank)" : "");
      ok = false;
    }
  }
  std::filesystem::remove_all(dir);
  std::vector<row> rows;
  if (ok)
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<rank_result> a2a, ag;
      for (int r = 0; r < ep; ++r) {
        a2a.push_back(results[(i * static_cast<size_t>(ep) + static_cast<size_t>(r)) * 2]);
        ag.push_back(results[(i * static_cast<size_t>(ep) + static_cast<size_t>(r)) * 2 + 1]);
      }
      rows.push_back({"processes (shm segment)", shapes[i], combine(a2a), combine(ag)});
    }
  else
    std::fprintf(stderr, "processes at ep %d: a rank failed; no rows\n", ep);
  ::munmap(mem, n_results * sizeof(rank_result));
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Expert parallelism's exchange: all-to-all against all-gather, bytes and time per MoE step"};
  std::vector<int> eps{4, 8};
  std::vector<int64_t> widths{4096, 1024};
  std::vector<int64_t> batches{1, 16, 256};
  std::vector<std::string> transports{"threads", "processes", "gloo"};
  std::string json_path = "bench/results/ep_exchange.json";
  uint32_t seed = 1;
  app.add_option("--ep", eps, "Expert-parallel group sizes (each must divide 8 experts)")->capture_default_str();
  app.add_option("--n-embd", widths, "Hidden sizes")->capture_default_str();
  app.add_option("--tokens", batches, "Tokens per rank per step")->capture_default_str();
  app.add_option("--transport", transports, "threads, processes, gloo")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the routing")->capture_default_str();
  app.add_option("--json", json_path, "Where to write the JSON results")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  for (int ep : eps)
    if (ep < 1 || n_expert % ep != 0) {
      std::fprintf(stderr, "--ep %d: must divide the %d experts\n", ep, n_expert);
      return 2;
    }
  for (const auto& t : transports)
    if (t != "threads" && t != "processes" && t != "gloo") {
      std::fprintf(stderr, "--transport %s: one of threads, processes, gloo\n", t.c_str());
      return 2;
    }
  auto wanted = [&](const char* t) { return std::find(transports.begin(), transports.end(), t) != transports.end(); };

  std::vector<row> rows;
  for (int ep : eps) {
    std::vector<shape> shapes;
    for (int64_t w : widths)
      for (int64_t b : batches)
        shapes.push_back({ep, w, b});
    // Forked ranks first: no Gloo thread exists yet in this process.
    if (wanted("processes")) {
      std::fprintf(stderr, "processes, ep %d...\n", ep);
      for (auto& r : process_rows(shapes, ep, seed))
        rows.push_back(r);
    }
  }
  int gloo_index = 0;
  for (int ep : eps)
    for (int64_t w : widths)
      for (int64_t b : batches) {
        const shape s{ep, w, b};
        if (wanted("threads")) {
          std::fprintf(stderr, "threads, ep %d, n_embd %ld, %ld tokens...\n", ep, static_cast<long>(w),
                       static_cast<long>(b));
          rows.push_back(threads_row(s, seed));
        }
        if (wanted("gloo")) {
          std::fprintf(stderr, "gloo, ep %d, n_embd %ld, %ld tokens...\n", ep, static_cast<long>(w),
                       static_cast<long>(b));
          rows.push_back(gloo_row(s, seed, gloo_index++));
        }
      }
  std::stable_sort(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.transport < b.transport; });

  const unsigned cores = std::thread::hardware_concurrency();
  std::printf(
      "MoE step = dispatch + combine, top-%d of %d experts; bytes: received per rank per step (the mean; it "
      "sends as much); time: the slowest rank; %u cores for up to %d ranks%s\n",
      n_expert_used, n_expert, cores, *std::max_element(eps.begin(), eps.end()),
      static_cast<int>(cores) < *std::max_element(eps.begin(), eps.end()) ? " (oversubscribed: times are "
                                                                            "the scheduler's as much as the "
                                                                            "transport's)"
                                                                          : "");
  std::printf("%-24s %3s %6s %6s %14s %14s %8s %11s %11s %8s\n", "transport", "ep", "n_embd", "tokens", "a2a MB/step",
              "ag MB/step", "ag/a2a", "a2a ms", "ag ms", "ag/a2a");
  for (const auto& r : rows) {
    const double a2a_mb = static_cast<double>(r.all_to_all.bytes_received) / 1e6;
    const double ag_mb = static_cast<double>(r.all_gather.bytes_received) / 1e6;
    std::printf("%-24s %3d %6ld %6ld %14.3f %14.3f %7.1fx %11.3f %11.3f %7.2fx\n", r.transport.c_str(), r.s.ep,
                static_cast<long>(r.s.n_embd), static_cast<long>(r.s.tokens), a2a_mb, ag_mb,
                a2a_mb > 0 ? ag_mb / a2a_mb : 0.0, r.all_to_all.step_seconds * 1e3, r.all_gather.step_seconds * 1e3,
                r.all_gather.step_seconds / r.all_to_all.step_seconds);
  }

  actorllm::json_writer w;
  w.begin_object();
  w.key("benchmark").value("ep_exchange");
  w.key("n_expert").value(n_expert);
  w.key("n_expert_used").value(n_expert_used);
  w.key("seed").value(static_cast<int64_t>(seed));
  w.key("cores").value(static_cast<int64_t>(cores));
  w.key("results").begin_array();
  for (const auto& r : rows) {
    w.begin_object();
    w.key("transport").value(r.transport);
    w.key("ep").value(r.s.ep);
    w.key("n_embd").value(r.s.n_embd);
    w.key("tokens_per_rank").value(r.s.tokens);
    w.key("all_to_all_bytes_received_per_rank").value(r.all_to_all.bytes_received);
    w.key("all_to_all_bytes_sent_per_rank").value(r.all_to_all.bytes_sent);
    w.key("all_gather_bytes_received_per_rank").value(r.all_gather.bytes_received);
    w.key("all_gather_bytes_sent_per_rank").value(r.all_gather.bytes_sent);
    w.key("all_to_all_step_ms").value(r.all_to_all.step_seconds * 1e3);
    w.key("all_gather_step_ms").value(r.all_gather.step_seconds * 1e3);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return actorllm::bench::write_json_result(json_path, w.str());
}
