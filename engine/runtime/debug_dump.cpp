#include "engine/runtime/debug_dump.h"

#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "engine/common/error.h"

namespace cypris {

DebugHook make_npy_dump_hook(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto forward_index = std::make_shared<int>(-1);
  return [dir, forward_index](const std::string& name, const Tensor& t) {
    if (name == "embed") ++*forward_index;  // the first intermediate of every forward pass
    CYPRIS_CHECK(t.dtype == DType::F32 && t.ndim() == 2 && t.device == Device::Cpu,
                 "debug dump: {} must be a 2-D fp32 host tensor", name);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t ld = t.strides.empty() ? cols : t.strides[0];
    const auto path = dir / fmt::format("f{}.{}.npy", std::max(0, *forward_index), name);
    std::ofstream out(path, std::ios::binary);
    CYPRIS_CHECK(out.good(), "debug dump: cannot write {}", path.string());
    // NPY v1.0: magic, version, little-endian header length, dict padded so data is 64-aligned.
    std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows, cols);
    const size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    const uint16_t hlen = static_cast<uint16_t>(header.size());
    out.write("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(hlen & 0xff));
    out.put(static_cast<char>(hlen >> 8));
    out << header;
    for (int64_t r = 0; r < rows; ++r) {
      out.write(reinterpret_cast<const char*>(t.as<float>() + r * ld), static_cast<std::streamsize>(cols * 4));
    }
  };
}

}  // namespace cypris
