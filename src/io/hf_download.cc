#include "io/hf_download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "core/json_limits.h"
#include "core/logging.h"
#include "core/progress.h"
#include "core/version.h"

namespace ferry::io {
namespace {

namespace fs = std::filesystem;

// The revision API's answer lists every file of a repository: a few MB for the largest.
constexpr size_t kMaxApiBytes = size_t{32} << 20;
// Files below this size that are not LFS files get no progress bar or log line.
constexpr uint64_t kQuietBytes = uint64_t{1} << 20;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string Trim(std::string s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && space(s[i])) ++i;
  return s.substr(i);
}

std::string LowerAscii(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool IsTrue(const std::string& v) {
  const std::string l = LowerAscii(Trim(v));
  return l == "1" || l == "true" || l == "yes" || l == "on";
}

bool IsCommitHash(const std::string& r) {
  if (r.size() != 40) return false;
  return std::all_of(r.begin(), r.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool EndsWith(const std::string& s, std::string_view suffix) { return s.ends_with(suffix); }

std::string RepoFolder(const std::string& cache, const std::string& repo_id) {
  std::string folder = "models--" + repo_id;
  folder.replace(folder.find('/'), 1, "--");
  return (fs::path(cache) / folder).string();
}

// A streaming SHA-256 (OpenSSL's EVP).
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { Reset(); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Reset() { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  void Update(std::string_view bytes) { EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()); }
  std::string HexDigest() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_, digest, &n);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < n; ++i) {
      hex += kHex[digest[i] >> 4];
      hex += kHex[digest[i] & 15];
    }
    return hex;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// An exclusive lock on a file (flock), released when destroyed. Another process downloading
// the same blob holds it; the wait is as long as that download.
class FileLock {
 public:
  static Result<std::unique_ptr<FileLock>> Acquire(const std::string& path, const std::string& what) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return Unavailable("cannot open the lock file " + path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      FERRY_LOG_INFO("waiting for another process that is downloading {}", what);
      while (::flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
          const int err = errno;
          ::close(fd);
          return Unavailable("cannot lock " + path + ": " + std::strerror(err));
        }
      }
    }
    return std::unique_ptr<FileLock>(new FileLock(fd));
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

// A local write failure: not worth retrying (the disk is full, or the cache is not writable).
Status WriteError(const std::string& path, int err) {
  const std::string message = "cannot write " + path + ": " + std::strerror(err);
  return err == ENOSPC || err == EDQUOT ? ResourceExhausted(message) : FailedPrecondition(message);
}

// A name for a temporary file beside another, unique across processes and threads.
std::string TempSuffix() {
  static std::atomic<uint64_t> counter{0};
  return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// Writes `text` to `path` through a temporary file and a rename, so readers see the old
// contents or the new, never a part.
Status WriteAtomically(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + TempSuffix();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.good()) return WriteError(tmp.string(), errno);
  }
  fs::rename(tmp, path, ec);
  if (ec) return Unavailable("cannot move " + tmp.string() + " to " + path.string() + ": " + ec.message());
  return Status::Ok();
}

// A file name the Hub lists, checked so it stays inside the snapshot folder.
bool SafeRepoPath(const std::string& p) {
  if (p.empty() || p.size() > 1024 || p.front() == '/' || p.find('\\') != std::string::npos) return false;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    const std::string seg = p.substr(i, j - i);
    if (seg.empty() || seg == "." || seg == "..") return false;
    i = j + 1;
  }
  for (char c : p) {
    if (static_cast<unsigned char>(c) < 0x20) return false;
  }
  return true;
}

// An ETag as a blob name: quotes and a weak marker stripped; only characters that are safe
// in a file name (the Hub's are hex digests).
std::optional<std::string> BlobName(std::string etag) {
  etag = Trim(etag);
  if (etag.starts_with("W/")) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  if (etag.empty() || etag.size() > 128) return std::nullopt;
  for (char c : etag) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return std::nullopt;
  }
  return etag;
}

std::optional<uint64_t> ParseSize(const std::string& text) {
  const std::string t = Trim(text);
  if (t.empty() || t.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : t) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

bool Retryable(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}
bool RetryableStatus(int status) { return status == 429 || (status >= 500 && status <= 599); }

// The Hub's own explanation of an error answer: X-Error-Message, else {"error": ...}.
std::string HubMessage(const HttpResponse& r) {
  std::string m = r.Header("x-error-message");
  if (m.empty() && !r.body.empty()) {
    auto json = ParseUntrustedJson(r.body, 8);
    if (json.ok() && json->is_object() && json->contains("error") && (*json)["error"].is_string()) {
      m = (*json)["error"].get<std::string>();
    }
  }
  if (m.size() > 300) m = m.substr(0, 300) + "...";
  return m.empty() ? "" : " (the Hub says: " + m + ")";
}

// An error answer as a Status that says what to do about it.
Status HubError(const HttpResponse& r, const std::string& what, const std::string& repo_id, const HubOptions& o) {
  const std::string said = HubMessage(r);
  const std::string code = r.Header("x-error-code");
  const std::string page = o.endpoint + "/" + repo_id;
  const std::string token_hint =
      o.token.empty() ? "no token was sent: set HF_TOKEN (or log in with `huggingface-cli login`)"
                      : "the token was sent; check that it is valid and its account has access";
  switch (r.status) {
    case 401:
      return FailedPrecondition(what + ": 401 Unauthorized" + said + ". The repository '" + repo_id +
                                "' may be private or gated, or may not exist; " + token_hint +
                                ", and accept the model's license at " + page);
    case 403:
      return FailedPrecondition(what + ": 403 Forbidden" + said + ". Access to '" + repo_id +
                                "' is refused (a gated model whose license this account has not accepted?); " +
                                token_hint + ", and accept the license at " + page);
    case 404: {
      std::string which = "the repository, revision or file";
      if (code == "RepoNotFound") which = "the repository '" + repo_id + "'";
      if (code == "RevisionNotFound") which = "the revision";
      if (code == "EntryNotFound") which = "the file";
      return NotFound(what + ": 404 Not Found" + said + ": " + which + " does not exist on " + o.endpoint);
    }
    default:
      return Unavailable(what + ": HTTP " + std::to_string(r.status) + said);
  }
}

// One snapshot's download: the revision API, then each missing blob, then the links and the
// ref. Thread-compatible; other downloaders (threads or processes) may work on the same
// cache at once, the blob locks keep them apart.
class Downloader {
 public:
  Downloader(const HubModelId& id, const HubOptions& options)
      : id_(id),
        o_(options),
        endpoint_(Trim(options.endpoint)),
        client_(options.http),
        repo_dir_(RepoFolder(options.cache_dir.empty() ? HubCacheDir() : options.cache_dir, id.repo_id)) {
    while (endpoint_.ends_with('/')) endpoint_.pop_back();
    endpoint_url_ = ParseUrl(endpoint_);
    if (!o_.token.empty()) authorization_ = "Bearer " + o_.token;
  }

  Result<std::string> Run();

 private:
  struct FileMeta {
    std::string path;
    std::string blob;                    // the ETag as a file name
    std::optional<uint64_t> size;
    bool lfs = false;
    std::string url;                     // where the bytes are (the CDN for LFS files)
  };

  // Sends a request, retrying transport errors, 429 and 5xx. A 2xx body goes to `body`
  // (cleared before each attempt) when given, up to kMaxApiBytes.
  Result<HttpResponse> SendWithRetries(const HttpRequest& request, const std::string& what,
                                       std::string* body = nullptr);
  std::string ResolveUrl(const std::string& path) const {
    return endpoint_ + "/" + id_.repo_id + "/resolve/" + commit_ + "/" + PercentEncode(path, true);
  }
  // The token's header for a request to `url`: only on the endpoint's origin.
  std::string AuthorizationFor(const std::string& url) const {
    Result<Url> u = ParseUrl(url);
    return u.ok() && endpoint_url_.ok() && u->Origin() == endpoint_url_->Origin() ? authorization_ : "";
  }
  Result<FileMeta> Head(const std::string& path);
  // Makes blobs/<meta.blob> exist, downloading (or resuming) it unless it is there.
  Status FetchBlob(const FileMeta& meta, const std::string& label);
  Status DownloadOnce(const FileMeta& meta, const fs::path& partial, Progress* progress, bool& progressed);
  Status Link(const FileMeta& meta);
  void Backoff(int attempt, const HttpResponse* response);

  const HubModelId id_;
  const HubOptions o_;
  std::string endpoint_;
  Result<Url> endpoint_url_ = Url();
  std::string authorization_;
  HttpClient client_;
  const fs::path repo_dir_;
  std::string commit_;
  std::unique_ptr<Progress> progress_;
};

void Downloader::Backoff(int attempt, const HttpResponse* response) {
  auto wait = o_.first_backoff * (1 << std::min(attempt, 6));
  if (response != nullptr) {
    if (auto after = ParseSize(response->Header("retry-after")); after && *after <= 60) {
      wait = std::max<std::chrono::milliseconds>(wait, std::chrono::seconds(*after));
    }
  }
  std::this_thread::sleep_for(wait);
}

Result<HttpResponse> Downloader::SendWithRetries(const HttpRequest& request, const std::string& what,
                                                 std::string* body) {
  const auto sink = [&](std::string_view piece) -> Status {
    if (body->size() + piece.size() > kMaxApiBytes) {
      return Unavailable(what + ": the answer is larger than " + std::to_string(kMaxApiBytes) + " bytes");
    }
    body->append(piece);
    return Status::Ok();
  };
  for (int attempt = 0;; ++attempt) {
    if (body != nullptr) body->clear();
    Result<HttpResponse> r = body != nullptr ? client_.Send(request, sink) : client_.Send(request);
    const bool last = attempt + 1 >= o_.max_attempts;
    if (!r.ok()) {
      if (!Retryable(r.status()) || last) return r.status().WithContext(what);
      FERRY_LOG_WARN("{}: {}; retrying", what, r.status().message());
      Backoff(attempt, nullptr);
      continue;
    }
    if (RetryableStatus(r->status) && !last) {
      FERRY_LOG_WARN("{}: HTTP {}; retrying", what, r->status);
      Backoff(attempt, &*r);
      continue;
    }
    return r;
  }
}

Result<Downloader::FileMeta> Downloader::Head(const std::string& path) {
  FileMeta meta;
  meta.path = path;
  HttpRequest request;
  request.method = "HEAD";
  request.url = ResolveUrl(path);
  request.authorization = authorization_;
  request.headers = {{"Accept-Encoding", "identity"}};
  request.follow_redirects = false;
  const std::string what = "asking " + endpoint_ + " about " + id_.repo_id + "/" + path;
  // Redirects on the Hub's own origin (a renamed repository) are followed with the token;
  // one to another origin is where an LFS file's bytes are, fetched later without it.
  for (int hop = 0;; ++hop) {
    FERRY_ASSIGN_OR_RETURN(HttpResponse r, SendWithRetries(request, what));
    const bool redirect = r.status >= 300 && r.status < 400 && r.HasHeader("location");
    if (!redirect && (r.status < 200 || r.status >= 300)) return HubError(r, what, id_.repo_id, o_);
    const std::string linked = r.Header("x-linked-etag");
    Url here = *ParseUrl(r.url);
    std::optional<Url> next;
    if (redirect) {
      FERRY_ASSIGN_OR_RETURN(Url target, ResolveLocation(here, r.Header("location")));
      next = target;
    }
    const bool same_origin_hop = next && next->Origin() == here.Origin() && linked.empty();
    if (same_origin_hop) {
      if (hop >= o_.http.max_redirects) return Unavailable(what + ": too many redirects");
      request.url = next->ToString();
      continue;
    }
    const std::string etag = linked.empty() ? r.Header("etag") : linked;
    const std::optional<std::string> blob = BlobName(etag);
    if (!blob) {
      return Unavailable(what + ": the answer has no usable ETag ('" + etag.substr(0, 100) +
                         "'); is HF_ENDPOINT a Hugging Face Hub?");
    }
    meta.blob = *blob;
    meta.lfs = !linked.empty();
    meta.size = ParseSize(meta.lfs ? r.Header("x-linked-size") : r.Header("content-length"));
    meta.url = next ? next->ToString() : r.url;
    if (meta.lfs && meta.blob.size() != 64) {
      return Unavailable(what + ": X-Linked-Etag is not a SHA-256 ('" + meta.blob + "')");
    }
    return meta;
  }
}

Status Downloader::DownloadOnce(const FileMeta& meta, const fs::path& partial, Progress* progress,
                                bool& progressed) {
  std::error_code ec;
  uint64_t offset = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
  if (ec || (meta.size && offset > *meta.size)) {
    fs::remove(partial, ec);
    offset = 0;
  }
  Sha256 sha;
  if (offset > 0) {
    // The bytes already there count towards the hash.
    std::ifstream in(partial, std::ios::binary);
    std::vector<char> buf(size_t{1} << 20);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      sha.Update(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
    }
  }
  uint64_t done = offset;
  const uint64_t start_offset = offset;
  // Progress is a longer partial file than before: a server that ignores Range and cuts
  // the transfer at the same place every time must not keep us here for ever.
  struct ProgressCheck {
    const uint64_t& done;
    uint64_t start;
    bool& progressed;
    ~ProgressCheck() { progressed = done > start; }
  } progress_check{done, start_offset, progressed};
  if (progress) progress->Add(offset);
  const bool complete_already = meta.size && offset == *meta.size && offset > 0;
  if (!complete_already) {
    std::FILE* out = std::fopen(partial.c_str(), "ab");
    if (out == nullptr) return WriteError(partial.string(), errno);
    const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(out, &std::fclose);
    HttpRequest request;
    request.url = meta.url;
    request.authorization = AuthorizationFor(meta.url);  // not for the CDN an LFS file redirects to
    request.headers = {{"Accept-Encoding", "identity"}};
    if (offset > 0) request.headers.emplace_back("Range", "bytes=" + std::to_string(offset) + "-");
    const auto on_headers = [&](const HttpResponse& head) -> Status {
      if (offset > 0 && head.status == 200) {
        // The server ignored the range: the whole file comes again, from its first byte.
        FERRY_LOG_INFO("{}: the server ignored the Range request; starting over", meta.path);
        if (::ftruncate(::fileno(out), 0) != 0) return WriteError(partial.string(), errno);
        std::fseek(out, 0, SEEK_SET);
        sha.Reset();
        offset = 0;
        done = 0;
      } else if (offset > 0 && head.status == 206) {
        const std::string range = head.Header("content-range");
        if (!range.starts_with("bytes " + std::to_string(offset) + "-")) {
          return Unavailable(meta.path + ": the server answered the Range request with '" + range.substr(0, 100) + "'");
        }
      }
      return Status::Ok();
    };
    const auto sink = [&](std::string_view piece) -> Status {
      if (std::fwrite(piece.data(), 1, piece.size(), out) != piece.size()) {
        return WriteError(partial.string(), errno);
      }
      sha.Update(piece);
      done += piece.size();
      if (progress) progress->Add(piece.size());
      return Status::Ok();
    };
    Result<HttpResponse> r = client_.Send(request, sink, on_headers);
    if (std::fflush(out) != 0) return WriteError(partial.string(), errno);
    if (!r.ok()) return r.status().WithContext("downloading " + meta.path);
    if (r->status == 416 && offset > 0) {
      // What is there does not fit what the server has: start again from nothing.
      fs::remove(partial, ec);
      return Unavailable("downloading " + meta.path + ": the server refused to resume (416); starting over");
    }
    if (r->status < 200 || r->status >= 300) return HubError(*r, "downloading " + meta.path, id_.repo_id, o_);
  }
  if (meta.size && done != *meta.size) {
    if (done > *meta.size) fs::remove(partial, ec);
    return Unavailable("downloading " + meta.path + ": got " + std::to_string(done) + " bytes of " +
                       std::to_string(*meta.size));
  }
  if (meta.lfs) {
    const std::string got = sha.HexDigest();
    if (got != LowerAscii(meta.blob)) {
      fs::remove(partial, ec);
      return DataLoss("downloading " + id_.repo_id + "/" + meta.path + ": the content's SHA-256 is " + got +
                      ", the Hub says " + meta.blob + "; the partial download was deleted");
    }
  }
  return Status::Ok();
}

Status Downloader::FetchBlob(const FileMeta& meta, const std::string& label) {
  std::error_code ec;
  const fs::path blobs = repo_dir_ / "blobs";
  const fs::path blob = blobs / meta.blob;
  if (fs::exists(blob, ec)) return Status::Ok();
  fs::create_directories(blobs, ec);
  if (ec) return Unavailable("cannot create " + blobs.string() + ": " + ec.message());
  // The lock huggingface_hub takes for the same blob (flock on <cache>/.locks/<repo>/<etag>.lock),
  // so ferry and Python clients filling one cache wait for each other.
  const fs::path locks = repo_dir_.parent_path() / ".locks" / repo_dir_.filename();
  fs::create_directories(locks, ec);
  if (ec) return Unavailable("cannot create " + locks.string() + ": " + ec.message());
  FERRY_ASSIGN_OR_RETURN(auto lock, FileLock::Acquire((locks / (meta.blob + ".lock")).string(),
                                                      id_.repo_id + "/" + meta.path));
  if (fs::exists(blob, ec)) return Status::Ok();  // another process finished it while we waited
  const fs::path partial = blob.string() + ".incomplete";
  // A bar (or a log line) for weights and other large files; small ones go by quietly.
  Progress* progress = meta.lfs || meta.size.value_or(0) >= kQuietBytes ? progress_.get() : nullptr;
  if (progress) progress->Phase(label, meta.size.value_or(0));
  for (int attempt = 0;;) {
    bool progressed = false;
    Status s = DownloadOnce(meta, partial, progress, progressed);
    if (s.ok()) break;
    if (!Retryable(s)) return s;
    // A transfer that moved forward resumes at once; one that did not counts as a failure.
    if (!progressed && ++attempt >= o_.max_attempts) return s;
    FERRY_LOG_WARN("{}; resuming", s.message());
    if (progress) progress->Phase(label, meta.size.value_or(0));
    if (!progressed) Backoff(attempt - 1, nullptr);  // (429's Retry-After is honoured for metadata only)
  }
  if (progress) progress->EndPhase();
  fs::rename(partial, blob, ec);
  if (ec) return Unavailable("cannot move " + partial.string() + " to " + blob.string() + ": " + ec.message());
  return Status::Ok();
}

Status Downloader::Link(const FileMeta& meta) {
  const fs::path link = repo_dir_ / "snapshots" / commit_ / meta.path;
  std::string target = "../../blobs/" + meta.blob;
  for (char c : meta.path) {
    if (c == '/') target = "../" + target;
  }
  std::error_code ec;
  if (fs::is_symlink(link, ec) && fs::read_symlink(link, ec).string() == target) return Status::Ok();
  fs::create_directories(link.parent_path(), ec);
  if (ec) return Unavailable("cannot create " + link.parent_path().string() + ": " + ec.message());
  const fs::path tmp = link.string() + TempSuffix();
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) return Unavailable("cannot create the link " + tmp.string() + ": " + ec.message());
  fs::rename(tmp, link, ec);
  if (ec) return Unavailable("cannot move the link into " + link.string() + ": " + ec.message());
  return Status::Ok();
}

Result<std::string> Downloader::Run() {
  // Which commit the revision names, and the files at that commit.
  const std::string what = "asking " + endpoint_ + " for " + id_.repo_id + "@" + id_.revision;
  HttpRequest info;
  info.url = endpoint_ + "/api/models/" + id_.repo_id + "/revision/" + PercentEncode(id_.revision, false);
  info.authorization = authorization_;
  info.headers = {{"Accept", "application/json"}};
  std::string body;
  FERRY_ASSIGN_OR_RETURN(HttpResponse r, SendWithRetries(info, what, &body));
  if (r.status != 200) return HubError(r, what, id_.repo_id, o_);
  Result<nlohmann::json> parsed = ParseUntrustedJson(body, 16);
  if (!parsed.ok()) return Unavailable(what + ": the answer is not valid JSON: " + parsed.status().message());
  const nlohmann::json& json = *parsed;
  if (!json.is_object() || !json.contains("sha") || !json["sha"].is_string() ||
      !IsCommitHash(json["sha"].get<std::string>())) {
    return Unavailable(what + ": the answer has no commit hash (\"sha\")");
  }
  commit_ = json["sha"].get<std::string>();
  std::vector<std::string> siblings;
  if (json.contains("siblings") && json["siblings"].is_array()) {
    for (const auto& s : json["siblings"]) {
      if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
        siblings.push_back(s["rfilename"].get<std::string>());
      }
    }
  }
  FERRY_ASSIGN_OR_RETURN(ModelFiles wanted, SelectModelFiles(id_.repo_id, siblings));

  const fs::path snapshot = repo_dir_ / "snapshots" / commit_;
  progress_ = std::make_unique<Progress>("downloading " + id_.repo_id, o_.terminal_progress);
  std::vector<FileMeta> metas;
  std::error_code ec;
  std::set<std::string> blobs_seen;

  // The index first: its weight_map says which safetensors files are the weights.
  std::vector<std::string> files = wanted.files;
  std::vector<std::string> weights = wanted.weights;
  if (wanted.has_index) {
    const std::string index_name = "model.safetensors.index.json";
    FERRY_ASSIGN_OR_RETURN(FileMeta index, Head(index_name));
    FERRY_RETURN_IF_ERROR(FetchBlob(index, index_name));
    std::ifstream in(repo_dir_ / "blobs" / index.blob, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    FERRY_ASSIGN_OR_RETURN(nlohmann::json index_json, ParseUntrustedJson(text, 16));
    std::set<std::string> shards;
    if (index_json.is_object() && index_json.contains("weight_map") && index_json["weight_map"].is_object()) {
      for (const auto& [tensor, file] : index_json["weight_map"].items()) {
        if (file.is_string()) shards.insert(file.get<std::string>());
      }
    }
    if (shards.empty()) return DataLoss(id_.repo_id + "/" + index_name + " has no weight_map");
    for (const std::string& shard : shards) {
      if (std::find(weights.begin(), weights.end(), shard) == weights.end()) {
        return DataLoss(id_.repo_id + "/" + index_name + " names " + shard + ", which the repository does not have");
      }
    }
    weights.assign(shards.begin(), shards.end());
    metas.push_back(index);
    files.erase(std::remove(files.begin(), files.end(), index_name), files.end());
  }
  files.insert(files.end(), weights.begin(), weights.end());

  // What the snapshot lacks: a HEAD each for the ETag and size.
  uint64_t total = 0;
  int missing = 0;
  std::vector<FileMeta> to_fetch;
  for (const std::string& path : files) {
    if (fs::exists(snapshot / path, ec)) continue;  // follows the link: its blob is there
    FERRY_ASSIGN_OR_RETURN(FileMeta meta, Head(path));
    if (!fs::exists(repo_dir_ / "blobs" / meta.blob, ec) && blobs_seen.insert(meta.blob).second) {
      total += meta.size.value_or(0);
      ++missing;
    }
    to_fetch.push_back(meta);
  }
  if (missing > 0) {
    FERRY_LOG_INFO("downloading {} file(s), {}, of {} at {} into {}", missing, Progress::FormatBytes(total),
                   id_.repo_id, commit_, repo_dir_.string());
  }
  int n = 0;
  for (const FileMeta& meta : to_fetch) {
    ++n;
    FERRY_RETURN_IF_ERROR(
        FetchBlob(meta, meta.path + " (" + std::to_string(n) + "/" + std::to_string(to_fetch.size()) + ")"));
    metas.push_back(meta);
  }
  progress_.reset();

  // Every blob is in place: now the snapshot's links, then the ref, so that a snapshot
  // folder that exists holds every file (a download cut short leaves only blobs).
  for (const FileMeta& meta : metas) FERRY_RETURN_IF_ERROR(Link(meta));
  fs::create_directories(snapshot, ec);
  if (id_.revision != commit_) {
    FERRY_RETURN_IF_ERROR(WriteAtomically(repo_dir_ / "refs" / id_.revision, commit_));
  }
  return snapshot.string();
}

bool IsSentenceTransformersModuleConfig(const std::string& path) {
  // "1_Pooling/config.json", "2_Normalize/config.json": a numbered module's folder.
  const size_t slash = path.find('/');
  if (slash == std::string::npos || path.substr(slash + 1) != "config.json") return false;
  const std::string folder = path.substr(0, slash);
  const size_t underscore = folder.find('_');
  if (underscore == std::string::npos || underscore == 0) return false;
  return std::all_of(folder.begin(), folder.begin() + static_cast<long>(underscore),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// Whether a cached snapshot holds config.json and its weights: every shard its index names,
// or, without an index, some safetensors file.
bool SnapshotHasWeights(const std::string& snapshot) {
  std::error_code ec;
  const fs::path dir(snapshot);
  if (!fs::exists(dir / "config.json", ec)) return false;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    std::ifstream in(index, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Result<nlohmann::json> json = ParseUntrustedJson(text, 16);
    if (!json.ok() || !json->is_object() || !json->contains("weight_map") || !(*json)["weight_map"].is_object()) {
      return false;
    }
    for (const auto& [tensor, file] : (*json)["weight_map"].items()) {
      if (!file.is_string() || !SafeRepoPath(file.get<std::string>()) || !fs::exists(dir / file.get<std::string>(), ec)) {
        return false;
      }
    }
    return true;
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors" && fs::exists(entry.path(), ec)) return true;
  }
  return false;
}

}  // namespace

HubOptions HubOptionsFromEnv() {
  HubOptions o;
  if (std::string v = Trim(Env("HF_ENDPOINT")); !v.empty()) o.endpoint = v;
  o.token = Trim(Env("HF_TOKEN"));
  if (o.token.empty()) o.token = Trim(Env("HUGGING_FACE_HUB_TOKEN"));
  if (o.token.empty()) {
    std::string path = Env("HF_TOKEN_PATH");
    if (path.empty()) {
      std::string home = Env("HF_HOME");
      if (home.empty()) {
        const std::string xdg = Env("XDG_CACHE_HOME");
        home = !xdg.empty() ? xdg + "/huggingface" : Env("HOME") + "/.cache/huggingface";
      }
      if (home.starts_with("~/")) home = Env("HOME") + home.substr(1);
      path = home + "/token";
    }
    std::ifstream in(path);
    if (in) {
      std::string line;
      std::getline(in, line);
      o.token = Trim(line);
    }
  }
  o.offline = IsTrue(Env("HF_HUB_OFFLINE"));
  o.cache_dir = HubCacheDir();
  if (auto timeout = ParseSize(Env("HF_HUB_DOWNLOAD_TIMEOUT")); timeout && *timeout > 0 && *timeout < 3600) {
    o.http.read_timeout = std::chrono::seconds(*timeout);
    o.http.connect_timeout = std::chrono::seconds(*timeout);
  }
  o.http.user_agent = std::string("ferry/") + kVersion;
  o.terminal_progress = Progress::StderrIsTerminal();
  return o;
}

Result<ModelFiles> SelectModelFiles(const std::string& repo_id, const std::vector<std::string>& siblings) {
  // Small files a model may need beside its weights; anything else at the top level that
  // ends in .json, .jinja, .txt or .model is a tokenizer or config file too.
  static const std::set<std::string> kNotNeeded = {"pytorch_model.bin.index.json", "tf_model.h5.index.json",
                                                   "flax_model.msgpack.index.json", "model.onnx.json",
                                                   "adapter_config.json"};
  ModelFiles out;
  std::vector<std::string> other_weights;
  for (const std::string& path : siblings) {
    if (!SafeRepoPath(path)) {
      return InvalidArgument("the Hub lists a file of " + repo_id + " with an unusable name: '" + path.substr(0, 200) + "'");
    }
    const bool top = path.find('/') == std::string::npos;
    const std::string lower = LowerAscii(path);
    if (top && EndsWith(lower, ".safetensors")) {
      out.weights.push_back(path);
    } else if (top && path == "model.safetensors.index.json") {
      out.has_index = true;
    } else if (top && !kNotNeeded.contains(path) && !EndsWith(lower, ".index.json") &&
               (EndsWith(lower, ".json") || EndsWith(lower, ".jinja") || EndsWith(lower, ".txt") ||
                EndsWith(lower, ".model") || EndsWith(lower, ".tiktoken"))) {
      if (lower != "requirements.txt" && lower != "license.txt") out.files.push_back(path);
    } else if (IsSentenceTransformersModuleConfig(path)) {
      out.files.push_back(path);
    } else {
      for (const char* ext : {".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf", ".ot"}) {
        if (EndsWith(lower, ext)) other_weights.push_back(path);
      }
    }
  }
  if (out.weights.empty()) {
    std::string have;
    for (size_t i = 0; i < other_weights.size() && i < 5; ++i) have += (i ? ", " : "") + other_weights[i];
    if (other_weights.size() > 5) have += ", ...";
    return FailedPrecondition(repo_id + " has no safetensors weights" +
                              (have.empty() ? std::string() : " (it has " + have + ")") +
                              "; ferry loads safetensors checkpoints only");
  }
  if (out.has_index) out.files.insert(out.files.begin(), "model.safetensors.index.json");
  return out;
}

Result<std::string> DownloadHubSnapshot(const HubModelId& id, const HubOptions& options) {
  if (options.offline) {
    return FailedPrecondition("HF_HUB_OFFLINE is set, so " + id.repo_id + " is not downloaded");
  }
  Downloader downloader(id, options);
  return downloader.Run();
}

Result<std::string> ResolveOrDownloadHubSnapshot(const HubModelId& id, const HubOptions& options) {
  Result<std::string> cached = ResolveHubSnapshot(id, options.cache_dir);
  if (cached.ok()) {
    if (options.offline || SnapshotHasWeights(*cached)) return cached;
    // A download cut short by another client (which links files as they arrive) or one
    // limited to a few files: complete it, or fall back to what is there.
    Result<std::string> completed = DownloadHubSnapshot(id, options);
    if (completed.ok()) return completed;
    FERRY_LOG_WARN("{} in the Hugging Face cache has no complete set of safetensors weights, and completing it "
                   "failed ({}); using it as it is",
                   *cached, completed.status().message());
    return cached;
  }
  if (cached.status().code() != StatusCode::kNotFound) return cached;
  if (options.offline) {
    return NotFound(cached.status().message() + "; downloads are off (HF_HUB_OFFLINE is set)");
  }
  const std::string cache = options.cache_dir.empty() ? HubCacheDir() : options.cache_dir;
  Result<std::string> downloaded = DownloadHubSnapshot(id, options);
  if (!downloaded.ok()) {
    return downloaded.status().WithContext("model '" + id.repo_id + "' is not in the Hugging Face cache (" +
                                           RepoFolder(cache, id.repo_id) + ") and downloading it from " +
                                           options.endpoint + " failed");
  }
  return downloaded;
}

}  // namespace ferry::io
