#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace ferry {

namespace {
std::string ErrnoText() { return std::strerror(errno); }
}  // namespace

namespace {

// Reads [0, size) of `fd` into `dst` with a few threads, each pread-ing 16-MiB pieces.
Status ReadAll(int fd, uint8_t* dst, size_t size, const std::string& path) {
  constexpr size_t kPiece = size_t{16} << 20;
  const size_t pieces = (size + kPiece - 1) / kPiece;
  const size_t threads = std::min<size_t>({pieces, 4, std::max(1u, std::thread::hardware_concurrency())});
  std::atomic<size_t> next{0};
  std::atomic<int> failed_errno{0};
  auto work = [&] {
    for (size_t i = next++; i < pieces && failed_errno.load() == 0; i = next++) {
      size_t off = i * kPiece;
      const size_t end = std::min(size, off + kPiece);
      while (off < end) {
        const ssize_t n = ::pread(fd, dst + off, end - off, static_cast<off_t>(off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          failed_errno = n < 0 ? errno : EIO;  // 0: the file shrank while being read
          return;
        }
        off += static_cast<size_t>(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failed_errno != 0) return DataLoss("error reading '" + path + "': " + std::strerror(failed_errno.load()));
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path, FileLoad how) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound("cannot open '" + path + "': " + ErrnoText());
    return InvalidArgument("cannot open '" + path + "': " + ErrnoText());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string err = ErrnoText();
    ::close(fd);
    return Internal("cannot stat '" + path + "': " + err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("'" + path + "' is a directory, expected a file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return std::shared_ptr<MappedFile>(new MappedFile(path, nullptr, 0, nullptr, 0));
  }
  if (how == FileLoad::kHugePageCopy) {
    // Over-allocate by one huge page so that the copy starts on a 2-MiB boundary.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t region_bytes = size + kHuge;
    void* region = ::mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
      const std::string err = ErrnoText();
      ::close(fd);
      return ResourceExhausted("cannot allocate " + std::to_string(size) + " bytes for '" + path + "': " + err);
    }
    uint8_t* data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(region) + kHuge - 1) & ~(kHuge - 1));
    ::madvise(data, (size + kHuge - 1) & ~(kHuge - 1), MADV_HUGEPAGE);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    const Status read = ReadAll(fd, data, size, path);
    ::close(fd);
    if (!read.ok()) {
      ::munmap(region, region_bytes);
      return read;
    }
    return std::shared_ptr<MappedFile>(new MappedFile(path, data, size, region, region_bytes));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    const std::string err = ErrnoText();
    ::close(fd);
    return Internal("cannot mmap '" + path + "': " + err);
  }
  ::close(fd);
  return std::shared_ptr<MappedFile>(new MappedFile(path, static_cast<const uint8_t*>(p), size, p, size));
}

MappedFile::~MappedFile() {
  if (region_ != nullptr) ::munmap(region_, region_bytes_);
}

void MappedFile::Prefetch(size_t offset, size_t len) const {
  if (data_ == nullptr || offset >= size_) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t start = offset / page * page;
  len = std::min(len + (offset - start), size_ - start);
  ::madvise(const_cast<uint8_t*>(data_) + start, len, MADV_WILLNEED);
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLoss("error reading '" + path + "'");
  return ss.str();
}

Status WriteStringToFile(const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return InvalidArgument("cannot write '" + tmp + "'");
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out) return DataLoss("error writing '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Internal("cannot rename '" + tmp + "' to '" + path + "'");
  return Status::Ok();
}

}  // namespace ferry
