// The structured-output limits as `serve` settings: the four flags and config keys, their defaults (those of
// text::structured::structured_limits), their ranges, and refusals that name the flag or key.
#include "apps/serve_config_file.hpp"
#include "text/structured/structured_limits.hpp"

#include "support/test_paths.hpp"

#include <doctest/doctest.h>

#include <fstream>
#include <string>

using namespace actorllm;
namespace fs = std::filesystem;

namespace {

app::serve_options parse(const std::string& text) {
  const fs::path file = test::make_temp_dir("serve-structured") / "s.toml";
  std::ofstream{file} << text;
  return app::read_serve_config_file(file);
}

}  // namespace

TEST_CASE("structured-output limits: defaults match the engine's, config keys set them, out-of-range is refused") {
  const app::serve_options defaults;
  const text::structured::structured_limits engine;
  CHECK(defaults.max_structured_output_bytes == engine.max_bytes);
  CHECK(defaults.max_structured_output_depth == engine.max_depth);
  CHECK(defaults.max_structured_output_states == engine.max_states);
  CHECK(defaults.structured_output_compile_budget == engine.compile_budget);

  const auto o = parse(
      "[server]\nmax_structured_output_bytes = 1000\nmax_structured_output_depth = 8\n"
      "max_structured_output_states = 300\nstructured_output_compile_budget = 12345\n");
  CHECK(o.max_structured_output_bytes == 1000);
  CHECK(o.max_structured_output_depth == 8);
  CHECK(o.max_structured_output_states == 300);
  CHECK(o.structured_output_compile_budget == 12345);

  for (const char* bad : {"max_structured_output_depth = 1001", "max_structured_output_depth = 0",
                          "max_structured_output_bytes = 0", "structured_output_compile_budget = -1"}) {
    INFO(bad);
    try {
      (void)parse(std::string{"[server]\n"} + bad + "\n");
      FAIL("accepted");
    } catch (const app::config_file_error& e) {
      CHECK(std::string{e.what()}.find(std::string{bad}.substr(0, std::string{bad}.find(' '))) != std::string::npos);
    }
  }
}

TEST_CASE("structured-output limits: serve refuses flags out of range by name and documents them") {
  auto run = [](const std::string& args) {
    return test::run_command(test::actorllm_binary().string() + " serve " + test::model_dir("stories260K").string() +
                             " --port 0 " + args + " 2>&1");
  };
  for (const char* args : {"--max-structured-output-depth 1001", "--max-structured-output-states 0",
                           "--max-structured-output-bytes 0", "--structured-output-compile-budget 0"}) {
    auto r = run(args);
    INFO(args << " -> " << r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find(std::string{args}.substr(0, std::string{args}.find(' '))) != std::string::npos);
  }
  auto help = test::run_command(test::actorllm_binary().string() + " serve --help 2>&1");
  for (const char* flag : {"--max-structured-output-bytes", "--max-structured-output-depth",
                           "--max-structured-output-states", "--structured-output-compile-budget"}) {
    INFO(flag);
    CHECK(help.out.find(flag) != std::string::npos);
  }
}
