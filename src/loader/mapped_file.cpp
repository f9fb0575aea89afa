#include "loader/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/check.h"

namespace vllm {

namespace {
[[noreturn]] void fail_open(const std::string& path, const std::string& why) {
  throw Error(path + ": cannot open: " + why);
}
}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_open(path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_open(path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail_open(path, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail_open(path, std::string("mmap failed: ") + std::strerror(err));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  return file;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Tensor view_bytes(const std::shared_ptr<MappedFile>& file, const uint8_t* data,
                  std::span<const int64_t> shape, DType dtype) {
  // Plain types need their element alignment; every GGUF block starts with 16-bit fields.
  const DTypeInfo& info = dtype_info(dtype);
  const uintptr_t align = info.quantized ? 2 : static_cast<uintptr_t>(info.block_bytes);
  if (reinterpret_cast<uintptr_t>(data) % align == 0) {
    return Tensor::from_blob(const_cast<uint8_t*>(data), shape, dtype, file);
  }
  Tensor t = Tensor::empty(shape, dtype);
  std::memcpy(t.raw(), data, static_cast<size_t>(t.nbytes()));
  return t;
}

}  // namespace vllm
