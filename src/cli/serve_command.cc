// ferry serve: argument handling; the server itself is serve::Server.
#include <memory>
#include <string>
#include <vector>

#include "cli/subcommands.h"
#include "core/logging.h"
#include "serve/config.h"
#include "serve/server.h"

namespace ferry::cli {

namespace {

struct ServeOptions {
  std::string config;
  std::vector<std::string> models;
  std::string host;
  int port = -1;
  bool no_auth = false;
  bool no_request_log = false;
  std::string log_level;
};

LogLevel ToCoreLevel(serve::LogLevel l) {
  switch (l) {
    case serve::LogLevel::kTrace:
    case serve::LogLevel::kDebug: return LogLevel::kDebug;
    case serve::LogLevel::kInfo: return LogLevel::kInfo;
    case serve::LogLevel::kWarn: return LogLevel::kWarn;
    case serve::LogLevel::kError: return LogLevel::kError;
  }
  return LogLevel::kInfo;
}

int RunServe(const ServeOptions& o) {
  serve::ServerConfig config;
  if (!o.config.empty()) {
    auto c = serve::LoadServerConfig(o.config);
    if (!c.ok()) return Fail(c.status());
    config = std::move(c).value();
  }
  for (const std::string& m : o.models) {
    Status st = serve::ApplyModelFlag(config, m);
    if (!st.ok()) return Fail(st);
  }
  if (!o.host.empty()) config.listener.host = o.host;
  if (o.port >= 0) config.listener.port = o.port;
  if (o.no_auth) config.auth.mode = serve::AuthMode::kNone;
  if (o.no_request_log) config.log.request_log = false;
  if (!o.log_level.empty()) {
    // Reuse the config parser's spelling rules for the level.
    auto parsed = serve::ParseServerConfig("log:\n  level: " + o.log_level + "\n");
    if (!parsed.ok()) return Fail(InvalidArgument("--log-level must be trace, debug, info, warn or error"));
    config.log.level = parsed.value().log.level;
  }
  if (config.models.empty()) {
    return Fail(InvalidArgument("no models to serve: give --model NAME=PATH or a --config with models"));
  }
  Status valid = config.Validate();
  if (!valid.ok()) return Fail(valid);
  SetLogLevel(ToCoreLevel(config.log.level));
  auto server = serve::Server::Create(config);
  if (!server.ok()) return Fail(server.status());
  serve::ShutdownOnSignals(*server.value());  // before any thread starts
  Status st = server.value()->Start();
  if (!st.ok()) return Fail(st);
  return server.value()->Run();
}

}  // namespace

void RegisterServe(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* sub = app.add_subcommand("serve", "Serve models over HTTP (OpenAI-compatible API)");
  sub->add_option("--config", o->config, "YAML config (see docs/serving-config.md)");
  sub->add_option("--model", o->models, "NAME=PATH: a checkpoint directory or engine file (repeatable)");
  sub->add_option("--host", o->host, "Listen address (default 127.0.0.1)");
  sub->add_option("--port", o->port, "Listen port (default 8000; 0 picks a free one)");
  sub->add_flag("--no-auth", o->no_auth, "Serve without API keys (only on a loopback address)");
  sub->add_flag("--no-request-log", o->no_request_log, "Do not print JSON request logs");
  sub->add_option("--log-level", o->log_level, "trace, debug, info, warn or error");
  sub->callback([o, &exit_code] { exit_code = RunServe(*o); });
}

}  // namespace ferry::cli
