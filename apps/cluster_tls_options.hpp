// The control-plane TLS flags that every command talking to other processes takes (serve, node, status, check), and
// the control plane's message limit (serve, node).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace actorllm::app {

/// Adds --cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca to `sub`, stored in the three strings (PEM file
/// paths). Resolve them with actors::control_tls::from_environment (flags win over $ACTORLLM_TLS_*) and check().
void add_cluster_tls_options(CLI::App& sub, std::string& certificate, std::string& key, std::string& ca_file);

/// Adds --max-control-message-bytes to `sub`, stored in `bytes`: the largest BASP payload a peer of this process's
/// control plane may send (actors/cluster/basp_screen.hpp); a bigger one closes that connection.
void add_control_message_limit_option(CLI::App& sub, uint64_t& bytes);

/// The bounds of --max-control-message-bytes (a BASP payload length is 32 bits).
inline constexpr uint64_t min_control_message_bytes = 4096;
inline constexpr uint64_t max_control_message_bytes = 0xffffffffu;

}  // namespace actorllm::app
