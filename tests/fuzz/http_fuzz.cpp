// The HTTP fuzzer's campaign loop (see http_fuzz.hpp).
#include "fuzz/http_fuzz.hpp"

#include "fuzz/raw_client.hpp"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace actorllm::fuzz {

std::string campaign_report::summary() const {
  std::string out = fmt::format("http fuzz: seed {:#x}: {} inputs ({:.1f} MB), {} probes, {:.1f} s ({:.0f} inputs/s)",
                                seed, inputs, static_cast<double>(bytes) / 1e6, probes, seconds,
                                seconds > 0 ? static_cast<double>(inputs) / seconds : 0.0);
  out += "; responses by status:";
  for (const auto& [status, n] : statuses)
    out += fmt::format(" {}x{}", status, n);
  out += fmt::format("; {} closed unanswered; {} failure(s)", unanswered, failures.size());
  for (const auto& f : failures)
    out += "\n  FAILURE: " + f;
  return out;
}

/// The seed of the campaign's case number `index`: any case replays alone (fuzz_http --case) without the others.
uint64_t case_seed(uint64_t campaign_seed, uint64_t index) {
  uint64_t z = campaign_seed + (index + 1) * 0x9e3779b97f4a7c15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

campaign_report run_campaign(const campaign_options& options) {
  using steady = std::chrono::steady_clock;
  campaign_report report;
  report.seed = options.seed;
  std::mutex mutex;  // guards report and `stopping`
  std::condition_variable wake;
  bool stopping = false;
  std::atomic<uint64_t> next_index{0};
  const auto start = steady::now();
  auto record_failure = [&](std::string what) {
    std::lock_guard lock{mutex};
    report.failures.push_back(std::move(what));
    if (report.failures.size() >= options.max_failures)
      stopping = true;
    wake.notify_all();
  };

  // Workers play cases back to back, each on its own connection, so slow cases (a client holding its connection
  // open waits for the server's timeout) do not idle the others.
  std::vector<std::thread> workers;
  for (int w = 0; w < options.parallel; ++w)
    workers.emplace_back([&] {
      for (;;) {
        const uint64_t index = next_index++;
        {
          std::lock_guard lock{mutex};
          if (stopping || steady::now() - start >= options.duration ||
              (options.max_inputs != 0 && index >= options.max_inputs)) {
            stopping = true;
            wake.notify_all();
            return;
          }
        }
        const fuzz_case c = generate_case(case_seed(options.seed, index), options.profile);
        const case_outcome r = run_case(options.port, c, options.hang_bound, options.allowed_statuses);
        {
          std::lock_guard lock{mutex};
          ++report.inputs;
          report.bytes += c.bytes().size();
          for (int st : r.statuses)
            ++report.statuses[st];
          if (r.statuses.empty() && r.closed)
            ++report.unanswered;
        }
        if (!r.problem.empty())
          record_failure(fmt::format("case #{}: {}\n  {}", index, r.problem, c.describe()));
      }
    });

  // Meanwhile, every half second: the server still runs and still answers a valid request at once, hostile
  // connections notwithstanding.
  auto last_progress = start;
  for (;;) {
    {
      std::unique_lock lock{mutex};
      if (wake.wait_for(lock, std::chrono::milliseconds{500}, [&] { return stopping; }))
        break;
    }
    ++report.probes;
    const uint64_t played = next_index.load();
    if (options.health) {
      if (std::string wrong = options.health(); !wrong.empty()) {
        record_failure(fmt::format("with about {} cases played: {}", played, wrong));
        break;
      }
    }
    std::string why;
    if (const int status = probe(options.port, options.probe_target, options.hang_bound, why); status != 200) {
      record_failure(fmt::format("with about {} cases played, the probe GET {} got {} ({})", played,
                                 options.probe_target, status, why));
      break;  // the server no longer serves: nothing more to learn
    }
    if (options.progress && steady::now() - last_progress > std::chrono::seconds{10}) {
      last_progress = steady::now();
      std::lock_guard lock{mutex};
      options.progress(fmt::format("http fuzz: {} inputs, {} failure(s), {:.0f} s", report.inputs,
                                   report.failures.size(),
                                   std::chrono::duration<double>(last_progress - start).count()));
    }
  }
  {
    std::lock_guard lock{mutex};
    stopping = true;
  }
  for (auto& t : workers)
    t.join();
  // A last look once every connection is done: what the last cases did must not have broken anything either.
  if (options.health) {
    if (std::string wrong = options.health(); !wrong.empty())
      report.failures.push_back("at the end: " + wrong);
  }
  std::string why;
  if (const int status = probe(options.port, options.probe_target, options.hang_bound, why); status != 200)
    report.failures.push_back(
        fmt::format("at the end, the probe GET {} got {} ({})", options.probe_target, status, why));
  ++report.probes;
  report.seconds = std::chrono::duration<double>(steady::now() - start).count();
  return report;
}

}  // namespace actorllm::fuzz
