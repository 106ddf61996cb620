// A throwaway public-key infrastructure for the control-plane TLS tests: a CA with a node certificate it signed,
// and a second, unrelated CA with a certificate of its own (a node of another cluster). Made with the `openssl`
// command (scripts/setup.sh installs it) in a temp dir. Header-only.
#pragma once

#include "support/test_paths.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorllm::test {

struct test_pki {
  std::filesystem::path dir;
  std::string ca, cert, key;                    ///< the cluster's CA, and a node certificate + key it signed
  std::string other_ca, other_cert, other_key;  ///< another CA and a certificate it signed

  test_pki() : dir{make_temp_dir("pki")} {
    const auto p = [this](const char* name) { return (dir / name).string(); };
    ca = p("ca.pem");
    cert = p("node.pem");
    key = p("node.key");
    other_ca = p("other-ca.pem");
    other_cert = p("other.pem");
    other_key = p("other.key");
    make_ca(ca, p("ca.key"), "actorllm test CA");
    make_signed(cert, key, ca, p("ca.key"), "node");
    make_ca(other_ca, p("other-ca.key"), "another CA");
    make_signed(other_cert, other_key, other_ca, p("other-ca.key"), "stranger");
  }
  ~test_pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  test_pki(const test_pki&) = delete;
  test_pki& operator=(const test_pki&) = delete;

  /// The flags that give a process the cluster's TLS settings.
  std::vector<std::string> flags() const {
    return {"--cluster-tls-cert", cert, "--cluster-tls-key", key, "--cluster-tls-ca", ca};
  }

 private:
  static void run(const std::string& command) {
    const auto r = run_command(command + " 2>&1");
    if (r.status != 0)
      throw std::runtime_error(fmt::format("`{}` failed ({}): {}", command, r.status, r.out));
  }
  static void make_ca(const std::string& pem, const std::string& key_pem, const std::string& name) {
    run(fmt::format("openssl req -x509 -newkey rsa:2048 -nodes -keyout '{}' -out '{}' -days 2 -subj '/CN={}'", key_pem,
                    pem, name));
  }
  void make_signed(const std::string& pem, const std::string& key_pem, const std::string& ca_pem,
                   const std::string& ca_key, const std::string& name) const {
    const std::string csr = (dir / (name + ".csr")).string();
    run(fmt::format("openssl req -newkey rsa:2048 -nodes -keyout '{}' -out '{}' -subj '/CN={}'", key_pem, csr, name));
    run(fmt::format("openssl x509 -req -in '{}' -CA '{}' -CAkey '{}' -CAcreateserial -out '{}' -days 2", csr, ca_pem,
                    ca_key, pem));
  }
};

}  // namespace actorllm::test
