// Models downloaded from the Hugging Face Hub into the standard cache (hf_cache.h), in the
// layout huggingface_hub writes, so the two share one cache:
//
//   models--ORG--REPO/blobs/<etag>              file contents, named by the Hub's ETag (the
//                                               SHA-256 of an LFS file, the git hash of others)
//   models--ORG--REPO/blobs/<etag>.incomplete   a download in progress, resumed by Range
//   .locks/models--ORG--REPO/<etag>.lock        flock'ed while one process downloads the blob
//   models--ORG--REPO/snapshots/<commit>/<path> relative symlinks to ../../blobs/<etag>
//   models--ORG--REPO/refs/<revision>           the commit a branch or tag named
//
// Protocol: GET {endpoint}/api/models/{repo}/revision/{revision} gives the commit ("sha") and
// the file list ("siblings"); HEAD {endpoint}/{repo}/resolve/{commit}/{path} gives the ETag
// (X-Linked-Etag for LFS files, with X-Linked-Size and a redirect to the CDN); GET on the
// same URL (or the redirect's target) gives the bytes. LFS files are checked against their
// SHA-256 before they are moved into place.
//
// The token goes, as "Authorization: Bearer", to the endpoint's origin (scheme, host and
// port) only; a redirect anywhere else (the LFS CDN) is followed without it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/hf_cache.h"
#include "io/http_client.h"

namespace ferry::io {

// Everything the downloader reads from the environment, read once by HubOptionsFromEnv.
struct HubOptions {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                 // HF_TOKEN, else the token file; empty: anonymous
  std::string cache_dir;                             // HubCacheDir()
  bool offline = false;                              // HF_HUB_OFFLINE
  HttpOptions http;                                  // read timeout: HF_HUB_DOWNLOAD_TIMEOUT (s)
  int max_attempts = 5;                              // per request, for connection errors, 429 and 5xx
  std::chrono::milliseconds first_backoff{1000};     // doubled after each failed attempt
  bool terminal_progress = false;                    // draw bars (stderr is a terminal)
};

// HF_ENDPOINT; HF_TOKEN (or its older name HUGGING_FACE_HUB_TOKEN), else the file
// HF_TOKEN_PATH, else $HF_HOME/token (~/.cache/huggingface/token); HF_HUB_OFFLINE
// (1/true/yes/on); HF_HUB_DOWNLOAD_TIMEOUT; the cache folder from HubCacheDir().
HubOptions HubOptionsFromEnv();

// What a repository's file list gives ferry to download: the files the model needs (configs,
// tokenizer files, chat templates, sentence-transformers modules, the safetensors index) and
// its safetensors weights. Other weight formats (*.bin, *.pt, *.h5, *.msgpack, *.onnx,
// *.gguf, original/, ...) are left out; a repository with no safetensors weights is
// FailedPrecondition, naming what it has instead. Names that could leave the snapshot
// folder ("..", absolute) are InvalidArgument.
struct ModelFiles {
  std::vector<std::string> files;    // in download order, the index first when there is one
  std::vector<std::string> weights;  // *.safetensors at the top level
  bool has_index = false;            // model.safetensors.index.json: its weight_map picks the shards
};
Result<ModelFiles> SelectModelFiles(const std::string& repo_id, const std::vector<std::string>& siblings);

// Asks the Hub which commit `id` names and downloads what the cache lacks of that snapshot;
// returns the snapshot folder. Always goes to the network (unless offline: then
// FailedPrecondition): this is `ferry download`, and how a cached revision is brought up to
// date. Safe to run in several processes at once.
Result<std::string> DownloadHubSnapshot(const HubModelId& id, const HubOptions& options);

// The snapshot from the cache when it is there with its weights (no network at all), else
// downloaded (or completed) unless offline; offline, a model not in the cache is NotFound
// saying downloads are off, and a cached snapshot is used as it is. A cached snapshot that
// cannot be completed (a tokenizer-only repository, no network) is used as it is.
Result<std::string> ResolveOrDownloadHubSnapshot(const HubModelId& id, const HubOptions& options);

}  // namespace ferry::io
