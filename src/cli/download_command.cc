// download: a model from the Hugging Face Hub into the standard cache; prints its snapshot folder.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/subcommands.h"
#include "core/logging.h"
#include "io/hf_download.h"

namespace ferry::cli {

namespace {

struct DownloadCliOptions {
  std::string model;      // ORG/REPO[@REVISION]
  std::string cache_dir;  // empty: HF_HUB_CACHE / HF_HOME / ~/.cache/huggingface/hub
};

int RunDownload(const DownloadCliOptions& o) {
  const std::optional<io::HubModelId> id = io::ParseHubModelId(o.model);
  if (!id) return Fail(InvalidArgument("'" + o.model + "' is not a Hub model id (ORG/REPO or ORG/REPO@REVISION)"));
  io::HubOptions options = io::HubOptionsFromEnv();
  if (!o.cache_dir.empty()) options.cache_dir = o.cache_dir;
  SetLogLevel(LogLevel::kInfo);  // a line per file when stderr is not a terminal
  auto snapshot = io::DownloadHubSnapshot(*id, options);
  if (!snapshot.ok()) return Fail(snapshot.status());
  std::printf("%s\n", snapshot->c_str());
  return 0;
}

}  // namespace

void RegisterDownload(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<DownloadCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "download", "Download a model from the Hugging Face Hub into its cache (or bring a cached one up to date)");
  sub->add_option("model", o->model, "ORG/REPO or ORG/REPO@REVISION (a branch, tag or commit)")->required();
  sub->add_option("--cache-dir", o->cache_dir, "Cache folder (default: HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub)");
  sub->footer(
      "Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (else the token file\n"
      "HF_TOKEN_PATH or $HF_HOME/token), HF_HUB_OFFLINE, HF_HUB_DOWNLOAD_TIMEOUT (seconds).\n"
      "Prints the snapshot folder, which --model also accepts.");
  sub->callback([o, &exit_code] { exit_code = RunDownload(*o); });
}

}  // namespace ferry::cli
