#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ferry {

namespace {
std::string ErrnoText() { return std::strerror(errno); }
}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
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
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string err = ErrnoText();
      ::close(fd);
      return Internal("cannot mmap '" + path + "': " + err);
    }
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
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
