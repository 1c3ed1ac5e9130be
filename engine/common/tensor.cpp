#include "engine/common/tensor.h"

#include <cstdlib>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cypris {

std::string Tensor::shape_str() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Buffer::Buffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  if (!data_) throw std::bad_alloc();
}

Buffer::~Buffer() { std::free(data_); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace cypris
