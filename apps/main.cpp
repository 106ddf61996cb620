// The actorllm binary: dispatches to the subcommands registered in apps/cmd_*.cpp.
#include "apps/command_registry.hpp"

#include <actorllm/version.hpp>

#include <cstdio>
#include <exception>
#include <map>

namespace actorllm::app {
std::vector<command_entry>& command_registry() {
  static std::vector<command_entry> registry;
  return registry;
}
}  // namespace actorllm::app

int main(int argc, char** argv) {
  using namespace actorllm::app;
  CLI::App app{"actorllm: serve Hugging Face causal LMs on one device, many devices, or many nodes"};
  app.set_version_flag("--version", std::string{actorllm::version_string});
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& entry : command_registry()) {
    auto* sub = app.add_subcommand(entry.name, entry.description);
    runners[sub] = entry.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "actorllm %s: error: %s\n", sub->get_name().c_str(), e.what());
        return 1;
      }
    }
  }
  return 2;
}
