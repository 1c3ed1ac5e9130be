// Tensor: a non-owning view {data, dtype, shape, strides, device}. Buffer: owned host memory.
// Shapes are row-major; strides are in elements. Device memory is owned by the backends.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/dtype.h"

namespace cypris {

enum class Device : uint8_t { Cpu, Cuda };

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // elements; empty means contiguous
  Device device = Device::Cpu;
  int device_index = 0;

  Tensor() = default;
  Tensor(void* d, DType t, std::vector<int64_t> s, Device dev = Device::Cpu)
      : data(d), dtype(t), shape(std::move(s)), device(dev) {}

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return dtype_nbytes(dtype, numel()); }
  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t dim(int i) const { return shape[i < 0 ? shape.size() + i : i]; }
  bool contiguous() const { return strides.empty(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  std::string shape_str() const;
};

// Owned, 64-byte aligned host memory.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept : data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cypris
