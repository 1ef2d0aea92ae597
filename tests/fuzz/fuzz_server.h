// One in-process server on the demo models for the request fuzzers: keys auth with a tenant
// and an admin key, the decoder with a small batch, the classifier.
#pragma once

#include <memory>
#include <string>

#include "fuzz_util.h"
#include "serve/server.h"

namespace ferry::fuzz {

inline constexpr char kTenantKey[] = "sk-fuzz-tenant";
inline constexpr char kAdminKey[] = "sk-fuzz-admin";

inline serve::Server& FuzzServer() {
  static serve::Server* server = [] {
    const std::string yaml =
        "listener: {host: 127.0.0.1, port: 0, header_timeout_ms: 2000,"
        " max_body_bytes: 262144}\n"
        "auth: {mode: keys, admin_keys: [" + std::string(kAdminKey) + "]}\n"
        "tenants:\n  - {name: fuzz, keys: [" + std::string(kTenantKey) + "], requests_per_minute: 1000000000}\n"
        "models:\n"
        "  - name: kjv-decoder\n    path: " + Source("models/demo/kjv-decoder") + "\n    threads: 1\n"
        "    batching: {max_num_seqs: 4, max_num_batched_tokens: 64}\n"
        "  - name: kjv-classifier\n    path: " + Source("models/demo/kjv-classifier") + "\n    threads: 1\n"
        "log: {level: error, request_log: false}\n";
    auto cfg = serve::ParseServerConfig(yaml);
    FUZZ_CHECK(cfg.ok());
    auto s = serve::Server::Create(cfg.value());
    FUZZ_CHECK(s.ok());
    FUZZ_CHECK(s.value()->Start().ok());
    FUZZ_CHECK(s.value()->WaitUntilReady(600000));
    return s.value().release();  // lives as long as the process
  }();
  return *server;
}

}  // namespace ferry::fuzz
