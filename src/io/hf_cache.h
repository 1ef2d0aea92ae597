// Models named by their Hugging Face Hub id (ORG/REPO, optionally @REVISION), found offline in
// the standard cache that huggingface_hub, transformers and vLLM fill:
//
//   <cache>/models--ORG--REPO/refs/<branch or tag>      (holds the commit hash)
//   <cache>/models--ORG--REPO/snapshots/<commit>/...    (the files, symlinks into blobs/)
//
// <cache> is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. What is not there is
// downloaded by hf_download.h.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace ferry::io {

struct HubModelId {
  std::string repo_id;   // "ORG/REPO"
  std::string revision;  // "main" when not given
};

// "ORG/REPO" or "ORG/REPO@REVISION" as the Hub spells ids (letters, digits, '-', '_', '.';
// neither part "." or ".." nor starting with "--"); nullopt for anything else (a path).
std::optional<HubModelId> ParseHubModelId(const std::string& spec);

// The cache folder the variables above select.
std::string HubCacheDir();

// The snapshot folder of `id` in `cache_dir` (HubCacheDir() when empty): a 40-hex revision is
// a commit's snapshot, any other is looked up in refs/. NotFound says where it looked.
Result<std::string> ResolveHubSnapshot(const HubModelId& id, const std::string& cache_dir = "");

// What every loader calls on a --model argument: an existing path is returned as it is; a Hub
// id is resolved in the cache, and downloaded into it when it is not there (unless
// HF_HUB_OFFLINE is set; see hf_download.h); anything else comes back unchanged (the loader
// reports it).
Result<std::string> ResolveModelPath(const std::string& spec);

}  // namespace ferry::io
