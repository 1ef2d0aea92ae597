#include "io/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/hf_download.h"

namespace ferry::io {
namespace {

namespace fs = std::filesystem;

bool ValidPart(const std::string& s) {
  if (s.empty() || s.size() > 96 || s == "." || s == ".." || s.starts_with("--") || s.ends_with("--")) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool ValidRevision(const std::string& r) {
  // Branches and tags ("main", "v1.0", "refs/pr/3"): no "..", no leading '/', printable.
  if (r.empty() || r.size() > 256 || r.front() == '/' || r.find("..") != std::string::npos) return false;
  for (char c : r) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == '\\') return false;
  }
  return true;
}

bool IsCommitHash(const std::string& r) {
  if (r.size() != 40) return false;
  for (char c : r) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// "~/x" as the user's home.
std::string ExpandHome(const std::string& p) {
  if (p.starts_with("~/")) {
    const std::string home = Env("HOME");
    if (!home.empty()) return home + p.substr(1);
  }
  return p;
}

}  // namespace

std::optional<HubModelId> ParseHubModelId(const std::string& spec) {
  HubModelId id;
  std::string repo = spec;
  if (const size_t at = spec.find('@'); at != std::string::npos) {
    repo = spec.substr(0, at);
    id.revision = spec.substr(at + 1);
    if (!ValidRevision(id.revision)) return std::nullopt;
  } else {
    id.revision = "main";
  }
  const size_t slash = repo.find('/');
  if (slash == std::string::npos || repo.find('/', slash + 1) != std::string::npos) return std::nullopt;
  if (!ValidPart(repo.substr(0, slash)) || !ValidPart(repo.substr(slash + 1))) return std::nullopt;
  id.repo_id = repo;
  return id;
}

std::string HubCacheDir() {
  if (std::string v = Env("HF_HUB_CACHE"); !v.empty()) return ExpandHome(v);
  if (std::string v = Env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return ExpandHome(v);
  if (std::string v = Env("HF_HOME"); !v.empty()) return ExpandHome(v) + "/hub";
  if (std::string v = Env("XDG_CACHE_HOME"); !v.empty()) return ExpandHome(v) + "/huggingface/hub";
  return ExpandHome("~/.cache/huggingface/hub");
}

Result<std::string> ResolveHubSnapshot(const HubModelId& id, const std::string& cache_dir) {
  const std::string cache = cache_dir.empty() ? HubCacheDir() : cache_dir;
  std::string folder = "models--" + id.repo_id;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = fs::path(cache) / folder;
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) {
    return NotFound("model '" + id.repo_id + "' is not in the Hugging Face cache (looked for " + repo.string() +
                    "; set HF_HUB_CACHE or HF_HOME to another cache, download it with `huggingface-cli download " +
                    id.repo_id + "`, or give a local path)");
  }
  std::string commit = id.revision;
  if (!IsCommitHash(commit)) {
    const fs::path ref = repo / "refs" / id.revision;
    std::ifstream in(ref);
    if (!in) {
      return NotFound("revision '" + id.revision + "' of '" + id.repo_id + "' is not in the Hugging Face cache (no " +
                      ref.string() + ")");
    }
    std::getline(in, commit);
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) {
      commit.pop_back();
    }
    if (!IsCommitHash(commit)) {
      return DataLoss(ref.string() + " does not hold a commit hash");
    }
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) {
    return NotFound("snapshot " + commit + " of '" + id.repo_id + "' is not in the Hugging Face cache (no " +
                    snapshot.string() + ")");
  }
  return snapshot.string();
}

Result<std::string> ResolveModelPath(const std::string& spec) {
  std::error_code ec;
  if (fs::exists(spec, ec)) return spec;
  const std::optional<HubModelId> id = ParseHubModelId(spec);
  if (!id) return spec;
  return ResolveOrDownloadHubSnapshot(*id, HubOptionsFromEnv());
}

}  // namespace ferry::io
