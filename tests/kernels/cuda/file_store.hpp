// A rendezvous_store over a directory, for test processes that share nothing else (the custom all-reduce's
// two-process GPU test): set() writes a file and renames it into place (readers never see half a value), get()
// looks for it every millisecond until its deadline.
#pragma once

#include "comm/comm_error.hpp"
#include "comm/rendezvous_store.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace actorllm::test {

class file_store final : public comm::rendezvous_store {
 public:
  explicit file_store(std::filesystem::path dir) : dir_(std::move(dir)) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    const auto final_path = path_of(key);
    const auto tmp = final_path.string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out)
        throw comm::comm_error("file_store: cannot write " + tmp);
    }
    std::filesystem::rename(tmp, final_path);
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto path = path_of(key);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::ifstream in(path, std::ios::binary);
      if (in)
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (std::chrono::steady_clock::now() >= deadline)
        throw comm::comm_error("rendezvous: key '" + key + "' still not set after waiting " +
                               std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling a directory: there is no event to wait on
    }
  }

 private:
  std::filesystem::path path_of(const std::string& key) const {
    std::string name = key;
    for (char& c : name)
      if (c == '/')
        c = '_';
    return dir_ / name;
  }
  std::filesystem::path dir_;
};

}  // namespace actorllm::test
