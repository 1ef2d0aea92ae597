// ferry serve: argument handling; the server itself is serve::Server.
#include <memory>
#include <optional>
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
  std::optional<std::string> host;  // set only when the flag is given
  std::optional<int> port;
  std::string host_flag;  // what CLI11 parses into
  int port_flag = 0;
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
  if (o.config.empty() && o.models.empty()) {
    return Fail(InvalidArgument("no models to serve: give --model NAME=PATH or a --config with models"));
  }
  // Flags override the file; the config is validated once, after they are applied.
  serve::ServerConfigOverrides flags;
  flags.models = o.models;
  flags.host = o.host;
  flags.port = o.port;
  flags.no_auth = o.no_auth;
  flags.no_request_log = o.no_request_log;
  if (!o.log_level.empty()) {
    auto level = serve::ParseLogLevel(o.log_level);
    if (!level.ok()) return Fail(level.status().WithContext("--log-level"));
    flags.log_level = level.value();
  }
  auto loaded = o.config.empty() ? serve::ParseServerConfig("", flags) : serve::LoadServerConfig(o.config, flags);
  if (!loaded.ok()) return Fail(loaded.status());
  serve::ServerConfig config = std::move(loaded).value();
  if (config.models.empty()) {
    return Fail(InvalidArgument("no models to serve: give --model NAME=PATH or a --config with models"));
  }
  SetLogLevel(ToCoreLevel(config.log.level));
  auto server = serve::Server::Create(std::move(config));
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
  CLI::Option* host = sub->add_option("--host", o->host_flag, "Listen address (default 127.0.0.1)");
  CLI::Option* port = sub->add_option("--port", o->port_flag, "Listen port (default 8000; 0 picks a free one)");
  sub->add_flag("--no-auth", o->no_auth, "Serve without API keys (only on a loopback address)");
  sub->add_flag("--no-request-log", o->no_request_log, "Do not print JSON request logs");
  sub->add_option("--log-level", o->log_level, "trace, debug, info, warn or error");
  sub->callback([o, host, port, &exit_code] {
    // A flag overrides the config file only when it is given.
    if (host->count() > 0) o->host = o->host_flag;
    if (port->count() > 0) o->port = o->port_flag;
    exit_code = RunServe(*o);
  });
}

}  // namespace ferry::cli
