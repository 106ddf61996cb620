// The control plane's TLS settings (actors/cluster/control_network.hpp): all three files or none, each one readable and
// what it claims to be, the key matching the certificate and the certificate signed by the CA, each failure
// naming the flag, the variable and the file. Certificates come from tests/support/test_pki.hpp.
#include "actorllm/error.hpp"
#include "actors/cluster/control_network.hpp"
#include "support/test_pki.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

using namespace actorllm;
using actors::control_tls;

namespace {

/// The message check() throws, or "" when it accepts.
std::string check_message(const control_tls& tls) {
  try {
    tls.check();
    return "";
  } catch (const actorllm::error& e) {
    CHECK(e.code() == errc::invalid_config);
    return e.what();
  }
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("control TLS: none is off, and the three files of one CA are accepted") {
  CHECK_FALSE(control_tls{}.enabled());
  CHECK(check_message(control_tls{}).empty());
  CHECK(control_tls{}.environment().empty());
  test::test_pki pki;
  const control_tls tls{pki.cert, pki.key, pki.ca};
  CHECK(tls.enabled());
  CHECK(check_message(tls).empty());
  const auto env = tls.environment();
  REQUIRE(env.size() == 3);
  CHECK(env[0] == std::pair<std::string, std::string>{"ACTORLLM_TLS_CERT", pki.cert});
  CHECK(env[1] == std::pair<std::string, std::string>{"ACTORLLM_TLS_KEY", pki.key});
  CHECK(env[2] == std::pair<std::string, std::string>{"ACTORLLM_TLS_CA", pki.ca});
}

TEST_CASE("control TLS: a missing part is named with its flag and variable") {
  test::test_pki pki;
  auto m = check_message({pki.cert, "", pki.ca});
  CHECK(contains(m, "private key"));
  CHECK(contains(m, "--cluster-tls-key"));
  CHECK(contains(m, "ACTORLLM_TLS_KEY"));
  m = check_message({"", pki.key, pki.ca});
  CHECK(contains(m, "--cluster-tls-cert"));
  m = check_message({pki.cert, pki.key, ""});
  CHECK(contains(m, "--cluster-tls-ca"));
}

TEST_CASE("control TLS: unreadable, malformed, mismatched and foreign files are refused by name") {
  test::test_pki pki;
  const std::string missing = (pki.dir / "nope.pem").string();
  auto m = check_message({missing, pki.key, pki.ca});
  CHECK(contains(m, "cannot read"));
  CHECK(contains(m, missing));

  const std::string garbage = (pki.dir / "garbage.pem").string();
  std::ofstream{garbage} << "not a certificate\n";
  m = check_message({garbage, pki.key, pki.ca});
  CHECK(contains(m, "is not a PEM certificate"));
  CHECK(contains(m, garbage));
  m = check_message({pki.cert, garbage, pki.ca});
  CHECK(contains(m, "is not an unencrypted PEM key"));
  m = check_message({pki.cert, pki.key, garbage});
  CHECK(contains(m, "holds no PEM certificate"));

  m = check_message({pki.cert, pki.other_key, pki.ca});
  CHECK(contains(m, "does not belong to the certificate"));
  m = check_message({pki.other_cert, pki.other_key, pki.ca});
  CHECK(contains(m, "is not signed by the CA"));
  CHECK(contains(m, pki.other_cert));
}

TEST_CASE("control TLS: empty settings come from ACTORLLM_TLS_*, given ones win") {
  ::setenv("ACTORLLM_TLS_CERT", "/env/cert.pem", 1);
  ::setenv("ACTORLLM_TLS_KEY", "/env/key.pem", 1);
  ::setenv("ACTORLLM_TLS_CA", "/env/ca.pem", 1);
  const auto tls = control_tls::from_environment({"/flag/cert.pem", "", ""});
  ::unsetenv("ACTORLLM_TLS_CERT");
  ::unsetenv("ACTORLLM_TLS_KEY");
  ::unsetenv("ACTORLLM_TLS_CA");
  CHECK(tls.certificate == "/flag/cert.pem");
  CHECK(tls.key == "/env/key.pem");
  CHECK(tls.ca_file == "/env/ca.pem");
  CHECK_FALSE(control_tls::from_environment().enabled());
}
