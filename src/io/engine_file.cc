#include "io/engine_file.h"

#include <fcntl.h>
#include <nmmintrin.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/json_limits.h"
#include "core/thread_pool.h"

namespace ferry::io {

namespace {

// Fixed header fields; the fingerprint JSON follows at kFingerprintOffset, NUL-terminated.
struct HeaderFields {
  char magic[8];
  uint32_t format_version;
  uint32_t header_bytes;
  uint64_t manifest_offset;
  uint64_t manifest_bytes;
  uint32_t manifest_crc32c;
  uint32_t fingerprint_bytes;
  uint64_t file_bytes;
};
static_assert(sizeof(HeaderFields) == 48);
constexpr size_t kFingerprintOffset = 64;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace

uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (bytes >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    bytes -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (bytes-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

Result<std::unique_ptr<EngineWriter>> EngineWriter::Create(const std::string& path,
                                                           const EngineFingerprint& fingerprint) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return InvalidArgument("cannot create '" + tmp + "': " + std::strerror(errno));
  std::unique_ptr<EngineWriter> w(new EngineWriter(path, fd));
  w->fingerprint_text_ = fingerprint.ToJson().dump();
  if (w->fingerprint_text_.size() + 1 > kEngineHeaderBytes - kFingerprintOffset) {
    return InvalidArgument("engine fingerprint does not fit in the header");
  }
  return w;
}

EngineWriter::~EngineWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink((path_ + ".tmp").c_str());
}

Status EngineWriter::WriteAt(uint64_t offset, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return DataLoss("writing '" + path_ + ".tmp': " + std::strerror(errno));
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<BlobRef> EngineWriter::AddBlob(const void* data, size_t bytes) {
  BlobRef ref;
  ref.offset = AlignUp(end_, kEngineBlobAlignment);
  ref.bytes = bytes;
  ref.crc32c = Crc32c(data, bytes);
  FERRY_RETURN_IF_ERROR(WriteAt(ref.offset, data, bytes));
  end_ = ref.offset + bytes;
  return ref;
}

Status EngineWriter::Finish(const EngineManifest& manifest) {
  const uint64_t manifest_offset = AlignUp(end_, 64);
  // The check a reader makes: a writer bug must not produce a file that loads wrong.
  const Status extents = manifest.CheckExtents(kEngineHeaderBytes, manifest_offset);
  if (!extents.ok()) return extents.WithContext("writing '" + path_ + "'");
  const std::string text = manifest.ToJson().dump();
  FERRY_RETURN_IF_ERROR(WriteAt(manifest_offset, text.data(), text.size()));
  std::string header(kEngineHeaderBytes, '\0');
  HeaderFields h{};
  std::memcpy(h.magic, kEngineMagic, 8);
  h.format_version = kEngineFormatVersion;
  h.header_bytes = kEngineHeaderBytes;
  h.manifest_offset = manifest_offset;
  h.manifest_bytes = text.size();
  h.manifest_crc32c = Crc32c(text.data(), text.size());
  h.fingerprint_bytes = static_cast<uint32_t>(fingerprint_text_.size());
  h.file_bytes = manifest_offset + text.size();
  std::memcpy(header.data(), &h, sizeof(h));
  std::memcpy(header.data() + kFingerprintOffset, fingerprint_text_.data(), fingerprint_text_.size());
  FERRY_RETURN_IF_ERROR(WriteAt(0, header.data(), header.size()));
  if (::fsync(fd_) != 0) return DataLoss("fsync '" + path_ + ".tmp': " + std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    return Internal("cannot rename '" + path_ + ".tmp' to '" + path_ + "': " + std::strerror(errno));
  }
  finished_ = true;
  return Status::Ok();
}

bool EngineFile::LooksLikeEngine(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[8] = {};
  const bool ok = ::read(fd, magic, 8) == 8 && std::memcmp(magic, kEngineMagic, 8) == 0;
  ::close(fd);
  return ok;
}

Result<std::shared_ptr<EngineFile>> EngineFile::Open(const std::string& path, FileLoad how) {
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path, how));
  const std::string where = "engine file '" + path + "'";
  if (file->size() < kEngineHeaderBytes) {
    return DataLoss(where + " is truncated (" + std::to_string(file->size()) + " bytes, shorter than its header)");
  }
  HeaderFields h;
  std::memcpy(&h, file->data(), sizeof(h));
  if (std::memcmp(h.magic, kEngineMagic, 8) != 0) return InvalidArgument(where + " is not a ferry engine (bad magic)");
  if (h.format_version == 0 || h.format_version > kEngineFormatVersion) {
    return FailedPrecondition(where + " has format version " + std::to_string(h.format_version) +
                              "; this ferry reads versions up to " + std::to_string(kEngineFormatVersion) +
                              " (rebuild the engine or upgrade ferry)");
  }
  if (h.header_bytes != kEngineHeaderBytes) return DataLoss(where + " has a corrupt header (header size)");
  if (h.file_bytes != file->size()) {
    return DataLoss(where + " is truncated or padded: header says " + std::to_string(h.file_bytes) +
                    " bytes, file has " + std::to_string(file->size()));
  }
  if (h.manifest_offset < kEngineHeaderBytes || h.manifest_offset > file->size() ||
      h.manifest_bytes > file->size() - h.manifest_offset) {
    return DataLoss(where + " has a corrupt header (manifest outside the file)");
  }
  if (h.fingerprint_bytes > kEngineHeaderBytes - kFingerprintOffset - 1) {
    return DataLoss(where + " has a corrupt header (fingerprint size)");
  }
  auto engine = std::shared_ptr<EngineFile>(new EngineFile());
  engine->file_ = file;
  engine->format_version_ = h.format_version;
  engine->data_end_ = h.manifest_offset;
  const char* fp = reinterpret_cast<const char*>(file->data()) + kFingerprintOffset;
  auto fingerprint_json = ParseUntrustedJson(std::string_view(fp, h.fingerprint_bytes));
  if (!fingerprint_json.ok()) {
    return DataLoss(where + " has a corrupt fingerprint (" + fingerprint_json.status().message() + ")");
  }
  auto fingerprint = EngineFingerprint::FromJson(*fingerprint_json);
  if (!fingerprint.ok()) return fingerprint.status().WithContext(where + " has a corrupt header");
  engine->fingerprint_ = std::move(fingerprint).value();
  const char* mp = reinterpret_cast<const char*>(file->data()) + h.manifest_offset;
  if (Crc32c(mp, h.manifest_bytes) != h.manifest_crc32c) {
    return DataLoss(where + " is corrupt: manifest checksum mismatch");
  }
  auto manifest = EngineManifest::Parse(std::string_view(mp, h.manifest_bytes));
  if (!manifest.ok()) return manifest.status().WithContext(where + " is corrupt");
  if (manifest->format_version != h.format_version) {
    return DataLoss(where + " is corrupt: its header says format version " + std::to_string(h.format_version) +
                    ", its manifest " + std::to_string(manifest->format_version));
  }
  const Status extents = manifest->CheckExtents(kEngineHeaderBytes, h.manifest_offset);
  if (!extents.ok()) return extents.WithContext(where + " is corrupt");
  engine->manifest_ = std::move(manifest).value();
  return engine;
}

Result<std::string_view> EngineFile::BlobBytes(const BlobRef& ref, const std::string& what, bool verify) const {
  // Open checked every blob of the manifest; this guards a BlobRef from elsewhere.
  if (ref.offset < kEngineHeaderBytes || ref.offset > data_end_ || ref.bytes > data_end_ - ref.offset) {
    return DataLoss("engine file '" + path() + "': blob of '" + what + "' lies outside the data section");
  }
  std::string_view bytes(reinterpret_cast<const char*>(file_->data()) + ref.offset, ref.bytes);
  if (verify && Crc32c(bytes.data(), bytes.size()) != ref.crc32c) {
    return DataLoss("engine file '" + path() + "' is corrupt: checksum mismatch in '" + what + "'");
  }
  return bytes;
}

Result<Tensor> EngineFile::Blob(const StoredTensor& tensor, const std::string& what, bool verify) const {
  const DType dtype = tensor.dtype;
  const Shape& shape = tensor.shape;
  FERRY_ASSIGN_OR_RETURN(std::string_view bytes, BlobBytes(tensor.blob, what, verify));
  for (int64_t d : shape) {
    if (d < 0) return DataLoss("engine file '" + path() + "': negative dimension in '" + what + "'");
  }
  if (static_cast<uint64_t>(NumElements(shape)) * DTypeSize(dtype) != bytes.size()) {
    return DataLoss("engine file '" + path() + "': blob of '" + what + "' has " + std::to_string(bytes.size()) +
                    " bytes, expected " + ShapeToString(shape) + " x " + std::string(DTypeName(dtype)));
  }
  return Tensor::FromBorrowed(const_cast<char*>(bytes.data()), shape, dtype, file_);
}

Status EngineFile::VerifyAll() const {
  const std::vector<NamedBlob> blobs = manifest_.AllBlobs();
  std::atomic<int64_t> bad{-1};
  ParallelFor(static_cast<int64_t>(blobs.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e && bad.load() < 0; ++i) {
      if (!BlobBytes(blobs[i].blob, blobs[i].name, true).ok()) bad = i;
    }
  });
  if (bad.load() >= 0) {
    return DataLoss("engine file '" + path() + "' is corrupt: checksum mismatch in '" + blobs[bad.load()].name + "'");
  }
  return Status::Ok();
}

}  // namespace ferry::io
