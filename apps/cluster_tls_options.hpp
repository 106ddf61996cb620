// The control-plane TLS flags that every command talking to other processes takes (serve, node, status, check).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace actorllm::app {

/// Adds --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca to `sub`, stored in the three strings (PEM file
/// paths). Resolve them with actors::control_tls::from_environment (flags win over $ACTORLLM_TLS_*) and check().
void add_cluster_tls_options(CLI::App& sub, std::string& certificate, std::string& key, std::string& ca_file);

}  // namespace actorllm::app
