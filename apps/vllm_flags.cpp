// vLLM serve flags accepted without effect. Each row says why it has none here; flags with a value that would
// change behaviour (a quantization, a data-parallel size above 1) list the values that are fine.
#include "apps/vllm_flags.hpp"

#include "util/log.hpp"

#include <fmt/format.h>

#include <array>
#include <memory>
#include <stdexcept>

namespace actorllm::app {

namespace {

// clang-format off
constexpr std::array flags{
    vllm_flag{"--trust-remote-code", false, "", "no Python code from the model repository ever runs here"},
    vllm_flag{"--disable-frontend-multiprocessing", false, "", "the HTTP front end always runs in the engine's process"},
    vllm_flag{"--disable-custom-all-reduce", false, "", "the shards' all-reduces run over NCCL or shared memory; the custom all-reduce is not wired into them yet"},
    vllm_flag{"--disable-log-requests", false, "", "requests are not logged one by one (only the access line)"},
    vllm_flag{"--enable-log-requests", false, "", "each request is logged by its access line already"},
    vllm_flag{"--disable-uvicorn-access-log", false, "", "there is no uvicorn; the HTTP server logs one access line per request"},
    vllm_flag{"--disable-fastapi-docs", false, "", "there are no FastAPI docs pages"},
    vllm_flag{"--enable-chunked-prefill", false, "", "prefill is always chunked by --max-num-batched-tokens"},
    vllm_flag{"--disable-async-output-proc", false, "", "output processing is always asynchronous to the model"},
    vllm_flag{"--async-scheduling", false, "", "scheduling already overlaps with the model (pipelined steps)"},
    vllm_flag{"--enable-server-load-tracking", false, "", "GET /load always reports the load"},
    vllm_flag{"--use-tqdm-on-load", false, "", "loading logs its progress as lines"},
    vllm_flag{"--disable-cascade-attn", false, "", "there is no cascade attention to turn off"},
    vllm_flag{"--disable-mm-preprocessor-cache", false, "", "multimodal inputs are not supported"},
    vllm_flag{"--allow-credentials", false, "", "CORS answers never allow credentials"},
    vllm_flag{"--tokenizer-mode", true, "", "the model's tokenizer.json is always read by the one native tokenizer"},
    vllm_flag{"--code-revision", true, "", "no model code is downloaded"},
    vllm_flag{"--swap-space", true, "", "preemption recomputes: no KV cache is swapped to the host"},
    vllm_flag{"--cpu-offload-gb", true, "0", "weights are never offloaded"},
    vllm_flag{"--max-seq-len-to-capture", true, "", "the decode graphs hold block tables of --max-model-len, so every length replays them"},
    vllm_flag{"--max-num-partial-prefills", true, "1", "one prompt is prefilled in chunks at a time per step plan"},
    vllm_flag{"--compilation-config", true, "", "there is no torch.compile"},
    vllm_flag{"--uvicorn-log-level", true, "", "there is no uvicorn; see --log-level"},
    vllm_flag{"--api-server-count", true, "1", "one HTTP server per engine"},
    vllm_flag{"--limit-mm-per-prompt", true, "", "multimodal inputs are not supported"},
    vllm_flag{"--otlp-traces-endpoint", true, "", "no OpenTelemetry traces are exported"},
    vllm_flag{"--collect-detailed-traces", true, "", "no OpenTelemetry traces are exported"},
    vllm_flag{"--allowed-methods", true, "", "CORS allows the methods the routes have"},
    vllm_flag{"--allowed-headers", true, "", "CORS allows the headers a preflight asks for"},
    vllm_flag{"--response-role", true, "assistant", "responses use the role assistant"},
    vllm_flag{"--max-log-len", true, "", "prompts are never logged"},
    vllm_flag{"--config-format", true, "auto,hf", "config.json is read as Hugging Face writes it"},
    vllm_flag{"--model-impl", true, "auto", "the native implementation is the only one"},
    vllm_flag{"--preemption-mode", true, "recompute", "preemption recomputes"},
    vllm_flag{"--worker-extension-cls", true, "", "workers are native processes"},
    vllm_flag{"--guided-decoding-backend", true, "", "structured outputs run on the built-in engine (a token automaton compiled from the regex or JSON schema): there is no backend to pick"},
    vllm_flag{"--structured-outputs-config", true, "", "structured outputs run on the built-in engine: there is no backend to configure"},
    vllm_flag{"--structured-outputs-config.backend", true, "", "structured outputs run on the built-in engine: there is no backend to pick"},
    vllm_flag{"--task", true, "auto,generate", "this engine generates text"},
    vllm_flag{"--runner", true, "auto,generate", "this engine generates text"},
    vllm_flag{"--max-parallel-loading-workers", true, "", "weights are read through mmap"},
    vllm_flag{"--tokenizer-pool-size", true, "", "tokenization runs in the HTTP handlers"},
};

// vLLM's data-parallel deployment flags beyond --data-parallel-size, -size-local and -rank (which are implemented):
// each is an error naming it, except the values listed (vLLM's defaults), which have no effect.
constexpr std::array refused{
    vllm_flag{"--data-parallel-address", true, "", "replicas on other nodes are placed by the cluster executor (--cluster-address), not by a DP master address"},
    vllm_flag{"--data-parallel-rpc-port", true, "", "replicas on other nodes are placed by the cluster executor (--cluster-address), not over a DP RPC port"},
    vllm_flag{"--data-parallel-backend", true, "mp", "replicas run on this engine's executors (--distributed-executor-backend); there is no ray"},
    vllm_flag{"--data-parallel-start-rank", true, "0", "a process serves all its replicas from rank 0, or one replica with --data-parallel-rank"},
    vllm_flag{"--data-parallel-hybrid-lb", false, "", "load balancing is internal (one endpoint for all replicas) or external (--data-parallel-rank, one endpoint per rank)"},
    vllm_flag{"--headless", false, "", "every engine process serves HTTP; worker-only nodes join a cluster with `actorllm node --join`"},
};
// clang-format on

// Whether `value` is one of the comma-separated `accepted` values.
bool accepted_value(std::string_view accepted, const std::string& value) {
  std::string_view rest = accepted;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    if (rest.substr(0, comma) == value)
      return true;
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return false;
}

// Row i of flags, then of refused.
const vllm_flag& row(std::size_t i) { return i < flags.size() ? flags[i] : refused[i - flags.size()]; }
constexpr std::size_t n_rows = flags.size() + refused.size();

}  // namespace

std::span<const vllm_flag> vllm_flags_without_effect() { return flags; }

std::span<const vllm_flag> vllm_flags_refused() { return refused; }

std::shared_ptr<vllm_flag_values> add_vllm_flags(CLI::App& sub) {
  auto v = std::make_shared<vllm_flag_values>();
  v->values.resize(n_rows);
  v->options.resize(n_rows);
  for (std::size_t i = 0; i < n_rows; ++i) {
    const vllm_flag& f = row(i);
    const bool is_refused = i >= flags.size();
    const std::string group = is_refused ? "vLLM flags refused" : "vLLM flags accepted without effect";
    const std::string help = is_refused
                                 ? (f.accepted.empty() ? fmt::format("Refused: {}", f.why)
                                                       : fmt::format("Only {} (no effect): {}", f.accepted, f.why))
                                 : fmt::format("Accepted for vLLM launch lines; no effect: {}", f.why);
    std::string& slot = v->values[i];
    if (f.takes_value)
      v->options[i] = sub.add_option(std::string{f.name}, slot, help)->group(group);
    else
      v->options[i] = sub.add_flag_callback(
                             std::string{f.name}, [&slot] { slot = "true"; }, help)
                          ->group(group);
  }
  return v;
}

void report_vllm_flags(const vllm_flag_values& given) {
  for (std::size_t i = 0; i < n_rows; ++i) {
    const vllm_flag& f = row(i);
    if (given.options[i] == nullptr || given.options[i]->count() == 0)
      continue;
    const std::string& value = given.values[i];
    if (i >= flags.size() && f.accepted.empty())
      throw std::invalid_argument(fmt::format("{}: not supported here ({})", f.name, f.why));
    if (f.takes_value && !f.accepted.empty() && !accepted_value(f.accepted, value))
      throw std::invalid_argument(
          fmt::format("{} {}: not supported here ({}; accepted: {})", f.name, value, f.why, f.accepted));
    if (f.takes_value)
      log::info("serve", "{} {} has no effect here: {}", f.name, value, f.why);
    else
      log::info("serve", "{} has no effect here: {}", f.name, f.why);
  }
}

}  // namespace actorllm::app
