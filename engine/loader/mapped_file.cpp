// mmap of a whole file, read-only and private (see mapped_file.h).
#include "engine/loader/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/common/error.h"

namespace cypris {

MappedFile::MappedFile(const std::filesystem::path& path) {
  const std::string p = path.string();
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  CYPRIS_CHECK(fd >= 0, "{}: cannot open: {}", p, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    CYPRIS_FAIL("{}: cannot stat: {}", p, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    CYPRIS_FAIL("{}: not a regular file", p);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {  // mmap refuses length 0
    ::close(fd);
    return;
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) {
    size_ = 0;
    CYPRIS_FAIL("{}: mmap failed: {}", p, std::strerror(err));
  }
  map_ = m;
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, size_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace cypris
