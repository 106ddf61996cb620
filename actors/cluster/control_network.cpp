// The control plane's network: see control_network.hpp.
#include "actors/cluster/control_network.hpp"

#include "actorllm/error.hpp"
#include "actorllm/proto/error.hpp"
#include "actors/cluster/cluster_token.hpp"
#include "actors/cluster/gated_multiplexer.hpp"

#include <caf/sec.hpp>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

namespace actorllm::actors {
namespace {

struct tls_field {
  const char* flag;
  const char* variable;
  const char* what;
};
constexpr tls_field certificate_field{"--cluster-tls-cert", "ACTORLLM_TLS_CERT", "certificate"};
constexpr tls_field key_field{"--cluster-tls-key", "ACTORLLM_TLS_KEY", "private key"};
constexpr tls_field ca_field{"--cluster-tls-ca", "ACTORLLM_TLS_CA", "CA certificate"};

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string{v} : std::string{};
}

[[noreturn]] void fail(std::string message) { throw actorllm::error{errc::invalid_config, std::move(message)}; }

/// OpenSSL's most recent error, for messages (and its queue emptied).
std::string openssl_reason() {
  unsigned long code = 0;
  unsigned long last = 0;
  while ((code = ERR_get_error()) != 0)
    last = code;
  if (last == 0)
    return "no reason given";
  char text[256] = {};
  ERR_error_string_n(last, text, sizeof text);
  return text;
}

void require_readable(const tls_field& f, const std::string& path) {
  std::ifstream in{path};
  if (!in)
    fail(
        fmt::format("TLS {} ({} / ${}): cannot read '{}': {}", f.what, f.flag, f.variable, path, std::strerror(errno)));
}

/// An encrypted key would make OpenSSL prompt on the terminal: refuse it instead.
int no_passphrase(char*, int, int, void*) { return 0; }

}  // namespace

control_tls control_tls::from_environment(control_tls given) {
  if (given.certificate.empty())
    given.certificate = env_or_empty(certificate_field.variable);
  if (given.key.empty())
    given.key = env_or_empty(key_field.variable);
  if (given.ca_file.empty())
    given.ca_file = env_or_empty(ca_field.variable);
  return given;
}

control_tls control_tls::of(const caf::actor_system& sys) {
  const auto& cfg = sys.config();
  return {cfg.openssl_certificate, cfg.openssl_key, cfg.openssl_cafile};
}

void control_tls::check() const {
  if (!enabled())
    return;
  const std::pair<const tls_field*, const std::string*> fields[] = {
      {&certificate_field, &certificate}, {&key_field, &key}, {&ca_field, &ca_file}};
  for (const auto& [f, value] : fields)
    if (value->empty())
      fail(fmt::format("TLS needs a certificate, its key and the CA, but the {} ({} / ${}) is missing", f->what,
                       f->flag, f->variable));
  for (const auto& [f, value] : fields)
    require_readable(*f, *value);

  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx{SSL_CTX_new(TLS_method()), &SSL_CTX_free};
  if (!ctx)
    fail("TLS: OpenSSL cannot create a context: " + openssl_reason());
  SSL_CTX_set_default_passwd_cb(ctx.get(), &no_passphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), certificate.c_str()) != 1)
    fail(fmt::format("TLS certificate ({} / ${}) '{}' is not a PEM certificate: {}", certificate_field.flag,
                     certificate_field.variable, certificate, openssl_reason()));
  std::unique_ptr<BIO, decltype(&BIO_free)> key_file{BIO_new_file(key.c_str(), "r"), &BIO_free};
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> private_key{
      key_file ? PEM_read_bio_PrivateKey(key_file.get(), nullptr, &no_passphrase, nullptr) : nullptr, &EVP_PKEY_free};
  if (!private_key)
    fail(fmt::format("TLS private key ({} / ${}) '{}' is not an unencrypted PEM key: {}", key_field.flag,
                     key_field.variable, key, openssl_reason()));
  if (SSL_CTX_use_PrivateKey(ctx.get(), private_key.get()) != 1 || SSL_CTX_check_private_key(ctx.get()) != 1)
    fail(fmt::format("TLS private key '{}' does not belong to the certificate '{}': {}", key, certificate,
                     openssl_reason()));
  if (SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr) != 1)
    fail(fmt::format("TLS CA certificate ({} / ${}) '{}' holds no PEM certificate: {}", ca_field.flag,
                     ca_field.variable, ca_file, openssl_reason()));
  // Peers check this certificate against the same CA: a mismatch here would only show as failed handshakes.
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> verify{X509_STORE_CTX_new(), &X509_STORE_CTX_free};
  if (!verify || X509_STORE_CTX_init(verify.get(), SSL_CTX_get_cert_store(ctx.get()),
                                     SSL_CTX_get0_certificate(ctx.get()), nullptr) != 1)
    fail("TLS: OpenSSL cannot verify the certificate: " + openssl_reason());
  if (X509_verify_cert(verify.get()) != 1)
    fail(fmt::format("TLS certificate '{}' is not signed by the CA in '{}': {}", certificate, ca_file,
                     X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify.get()))));
}

std::vector<std::pair<std::string, std::string>> control_tls::environment() const {
  if (!enabled())
    return {};
  return {{certificate_field.variable, certificate}, {key_field.variable, key}, {ca_field.variable, ca_file}};
}

void enable_network(caf::actor_system_config& cfg, const control_tls& tls, const std::string& control_key,
                    std::size_t max_message_bytes) {
  check_cluster_token(control_key, "--cluster-token or $ACTORLLM_CLUSTER_TOKEN");
  gate_settings settings;
  settings.key = control_key;
  settings.max_message_bytes = max_message_bytes;
  if (max_message_bytes == 0) {  // a worker: its launcher's limit, passed down
    const std::string given = env_or_empty(control_message_limit_variable);
    settings.max_message_bytes = default_max_control_message_bytes;
    if (!given.empty())
      try {
        settings.max_message_bytes = std::stoull(given);
      } catch (const std::exception&) {
        fail(fmt::format("${} is not a number of bytes: '{}'", control_message_limit_variable, given));
      }
  }
  if (tls.enabled()) {
    settings.tls_certificate = tls.certificate;
    settings.tls_key = tls.key;
    settings.tls_ca_file = tls.ca_file;
    // Where control_tls::of finds them again; CAF's OpenSSL module, which reads these too, is not loaded.
    cfg.openssl_certificate = tls.certificate;
    cfg.openssl_key = tls.key;
    cfg.openssl_cafile = tls.ca_file;
  }
  load_gated_middleman(cfg, settings);
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds{500}});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds{3}});
}

std::string describe_connect_error(caf::actor_system& sys, const caf::error& err) {
  if (err.category() == proto::error_category)
    return proto::message_of(err);
  std::string text = sys.render(err);
  if (err == caf::sec::disconnect_during_handshake)
    text += control_tls::of(sys).enabled()
                ? " (this process uses TLS: does the peer, with a certificate of the same CA?)"
                : " (this process does not use TLS: if the cluster does, give --cluster-tls-cert, --cluster-tls-key "
                  "and --cluster-tls-ca)";
  return text;
}

std::string control_message_limit_of(const caf::actor_system& sys) {
  return std::to_string(control_message_limit(sys));
}

std::string new_control_key() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    fail("control plane: OpenSSL has no randomness for a control key: " + openssl_reason());
  std::string out;
  for (unsigned char b : bytes)
    out += fmt::format("{:02x}", b);
  return out;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost")
    return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

std::string describe_control_transport(const std::string& host, bool tls) {
  if (tls)
    return "control plane over mutual TLS: a peer must present a certificate of the cluster's CA and then prove the "
           "cluster token before any message is read";
  if (is_loopback_host(host))
    return "control plane in plaintext on loopback: a peer must prove the cluster token before any message is read";
  return fmt::format(
      "control plane in plaintext on {}: a peer must prove the cluster token before any message is "
      "read, but the traffic is neither encrypted nor protected from tampering on the way; use --cluster-tls-cert, "
      "--cluster-tls-key and --cluster-tls-ca beyond loopback",
      host);
}

}  // namespace actorllm::actors
