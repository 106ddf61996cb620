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
std::map<std::string, std::string>& option_aliases() {
  static std::map<std::string, std::string> aliases;
  return aliases;
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
  // "-tp 2" / "-tp=2" -> "--tensor-parallel-size 2" / "--tensor-parallel-size=2" (see option_aliases()).
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {  // CLI11 takes the arguments in reverse order
    std::string arg = argv[i];
    for (const auto& [alias, long_name] : option_aliases())
      if (arg == alias || arg.rfind(alias + "=", 0) == 0)
        arg = long_name + arg.substr(alias.size());
    args.push_back(std::move(arg));
  }
  try {
    app.parse(args);
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
