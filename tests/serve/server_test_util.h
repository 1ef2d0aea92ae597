// Starting an in-process server for a test: the config parsed, the server created, started
// and ready within `ready_ms`, each step's failure reported as a test failure (null then).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "serve/server.h"

namespace ferry::serve::testing {

inline std::unique_ptr<Server> StartServerFromYaml(const std::string& yaml, int64_t ready_ms = 120000) {
  auto cfg = ParseServerConfig(yaml);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return nullptr;
  auto s = Server::Create(cfg.value());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return nullptr;
  EXPECT_TRUE(s.value()->Start().ok());
  EXPECT_TRUE(s.value()->WaitUntilReady(ready_ms));
  return std::move(s).value();
}

}  // namespace ferry::serve::testing
