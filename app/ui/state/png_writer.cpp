// PNG encoding with stored deflate blocks; see png_writer.h. Format: PNG spec (RFC 2083),
// zlib stream (RFC 1950) holding deflate stored blocks (RFC 1951 section 3.2.4).
#include "app/ui/state/png_writer.h"

#include <array>
#include <filesystem>
#include <fstream>

#include "engine/common/error.h"

namespace cypris {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void put_u32_be(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32_be(out, static_cast<uint32_t>(data.size()));
  size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32_be(out, crc32(out.data() + start, out.size() - start));
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  const auto& t = crc_table();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const uint8_t* data, size_t n) {
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < n; ++i) {
    a = (a + data[i]) % 65521u;
    b = (b + a) % 65521u;
  }
  return (b << 16) | a;
}

std::vector<uint8_t> encode_png_rgba(const uint8_t* rgba, int width, int height) {
  CYPRIS_CHECK(width > 0 && height > 0, "PNG size {}x{} is empty", width, height);
  // Raw scanlines: filter type 0 (None) then the row's pixels.
  const size_t row = static_cast<size_t>(width) * 4;
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgba + row * y, rgba + row * (y + 1));
  }
  // zlib: CMF/FLG for deflate with a 32K window and no preset dictionary ((0x78*256+0x01) % 31 == 0).
  std::vector<uint8_t> z = {0x78, 0x01};
  const size_t kMaxStored = 65535;
  size_t pos = 0;
  do {
    size_t len = std::min(kMaxStored, raw.size() - pos);
    bool last = pos + len == raw.size();
    z.push_back(last ? 1 : 0);  // BFINAL, BTYPE=00 (stored)
    z.push_back(static_cast<uint8_t>(len & 0xFF));
    z.push_back(static_cast<uint8_t>(len >> 8));
    z.push_back(static_cast<uint8_t>(~len & 0xFF));
    z.push_back(static_cast<uint8_t>((~len >> 8) & 0xFF));
    z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos),
             raw.begin() + static_cast<std::ptrdiff_t>(pos + len));
    pos += len;
  } while (pos < raw.size());
  put_u32_be(z, adler32(raw.data(), raw.size()));

  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32_be(ihdr, static_cast<uint32_t>(width));
  put_u32_be(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(), {8, 6, 0, 0, 0});  // 8 bits, RGBA, deflate, adaptive filtering, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}

void write_png_rgba(const std::string& path, const uint8_t* rgba, int width, int height) {
  auto bytes = encode_png_rgba(rgba, width, height);
  std::error_code ec;
  auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  CYPRIS_CHECK(out.good(), "--screenshot: cannot write '{}'", path);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  CYPRIS_CHECK(out.good(), "--screenshot: cannot write '{}'", path);
}

}  // namespace cypris
