// A host program with actorllm embedded: batch generation, then a token stream consumed from the host's own
// C++20 coroutine. Usage: host_app MODEL_DIR [PROMPT]
#include <actorllm/llm.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

namespace {

// The host's coroutine: co_awaits the stream's deltas as the engine produces them.
actorllm::task<std::string> stream_story(actorllm::LLM& llm, std::string prompt) {
  actorllm::sampling_params params;
  params.temperature = 0;
  params.max_tokens = 24;
  auto stream = llm.stream(prompt, params);
  std::string text;
  int deltas = 0;
  while (auto delta = co_await stream.next()) {
    text += delta->text;
    ++deltas;
  }
  const auto& reason = stream.output().outputs.at(0).finish_reason;
  std::string_view why = reason ? actorllm::to_string(*reason) : std::string_view{"none"};
  std::printf("streamed %d deltas, finish_reason=%.*s\n", deltas, static_cast<int>(why.size()), why.data());
  co_return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [PROMPT]\n", argv[0]);
    return 2;
  }
  try {
    actorllm::engine_config config;
    config.model = argv[1];
    actorllm::LLM llm{config};
    std::string prompt = argc > 2 ? argv[2] : "Once upon a time";

    actorllm::sampling_params params;
    params.temperature = 0;
    params.max_tokens = 24;
    auto outputs = llm.generate({prompt, "Lily and Tom went to the park to"}, params);
    for (const auto& out : outputs)
      std::printf("generate: %s\n", out.outputs.at(0).text.c_str());

    std::string streamed = actorllm::sync_wait(stream_story(llm, prompt));
    std::printf("stream: %s\n", streamed.c_str());
    // Streaming and batch generation run the same engine: greedy text must agree.
    if (streamed != outputs.at(0).outputs.at(0).text) {
      std::fprintf(stderr, "streamed text differs from generate()\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "host_app: %s\n", e.what());
    return 1;
  }
}
