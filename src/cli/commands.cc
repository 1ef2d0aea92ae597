#include "cli/commands.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/subcommands.h"
#include "core/logging.h"
#include "core/version.h"

namespace ferry::cli {

int Main(int argc, char** argv) {
  SetLogLevel(LogLevel::kWarn);
  CLI::App app{"ferry: a transformer inference engine and server"};
  app.set_version_flag("--version", std::string("ferry ") + kVersion, "Print the version and exit");
  app.require_subcommand(1);
  int exit_code = 0;
  RegisterGenerate(app, exit_code);
  RegisterTokenize(app, exit_code);
  RegisterClassify(app, exit_code);
  RegisterEmbed(app, exit_code);
  RegisterMakeCheckpoint(app, exit_code);
  RegisterBench(app, exit_code);
  RegisterEval(app, exit_code);
  RegisterBuild(app, exit_code);
  RegisterServe(app, exit_code);
  RegisterRenderChat(app, exit_code);
  RegisterDownload(app, exit_code);
  try {
    app.parse(argc, argv);  // the chosen subcommand's callback runs here and sets exit_code
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

int Fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

}  // namespace ferry::cli
