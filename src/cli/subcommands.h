// Registration of each `ferry` subcommand. A subcommand's callback runs its command and
// stores the process exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace ferry::cli {

void RegisterGenerate(CLI::App& app, int& exit_code);
void RegisterTokenize(CLI::App& app, int& exit_code);
void RegisterClassify(CLI::App& app, int& exit_code);
void RegisterEmbed(CLI::App& app, int& exit_code);
void RegisterMakeCheckpoint(CLI::App& app, int& exit_code);
void RegisterBench(CLI::App& app, int& exit_code);
void RegisterEval(CLI::App& app, int& exit_code);
void RegisterBuild(CLI::App& app, int& exit_code);
// Adds `coldstart` under the `bench` subcommand.
void RegisterColdstart(CLI::App& bench, int& exit_code);
// Adds `serve` under the `bench` subcommand: the HTTP load generator.
void RegisterBenchServe(CLI::App& bench, int& exit_code);
// `ferry render-chat`: a chat template rendered for one conversation.
void RegisterRenderChat(CLI::App& app, int& exit_code);
// `ferry download`: a model from the Hugging Face Hub into the standard cache.
void RegisterDownload(CLI::App& app, int& exit_code);
// `ferry serve`: the HTTP server.
void RegisterServe(CLI::App& app, int& exit_code);

// Prints "error: <message>" on one line to stderr and returns exit code 1.
int Fail(const Status& status);

}  // namespace ferry::cli
