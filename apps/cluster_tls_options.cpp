// The control-plane TLS flags: see cluster_tls_options.hpp.
#include "apps/cluster_tls_options.hpp"

namespace actorllm::app {

void add_cluster_tls_options(CLI::App& sub, std::string& certificate, std::string& key, std::string& ca_file) {
  sub.add_option("--cluster-tls-cert", certificate,
                 "Control-plane TLS: this process's certificate, PEM (default: $ACTORLLM_TLS_CERT). With "
                 "--cluster-tls-key and --cluster-tls-ca, every connection to other actorllm processes is TLS and "
                 "both ends must hold certificates of that CA")
      ->group("Cluster TLS");
  sub.add_option("--cluster-tls-key", key,
                 "Control-plane TLS: the certificate's private key, unencrypted PEM "
                 "(default: $ACTORLLM_TLS_KEY)")
      ->group("Cluster TLS");
  sub.add_option("--cluster-tls-ca", ca_file,
                 "Control-plane TLS: the CA certificate peers must be signed by, PEM (default: $ACTORLLM_TLS_CA)")
      ->group("Cluster TLS");
}

void add_control_message_limit_option(CLI::App& sub, uint64_t& bytes) {
  sub.add_option("--max-control-message-bytes", bytes,
                 "Control plane: the largest message another actorllm process may send this one; a bigger one "
                 "closes its connection (workers started by this process get the same limit)")
      ->check(CLI::Range(min_control_message_bytes, max_control_message_bytes))
      ->capture_default_str()
      ->group("Cluster TLS");
}

}  // namespace actorllm::app
