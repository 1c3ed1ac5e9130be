// The screenshot PNG encoder: checksums against published check values, and a decode of the file
// structure (chunks, IHDR, stored deflate blocks) back to the pixels.
#include "app/ui/state/png_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace cypris {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

TEST(PngWriter, ChecksumsMatchPublishedCheckValues) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(check.data()), check.size()), 0xCBF43926u);  // CRC-32/ISO-HDLC
  const std::string iend = "IEND";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(iend.data()), iend.size()), 0xAE426082u);  // every PNG's last CRC
  const std::string wiki = "Wikipedia";
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t*>(wiki.data()), wiki.size()), 0x11E60398u);
}

// Parses the PNG and returns the inflated (stored-block) scanline data.
std::vector<uint8_t> decode_stored(const std::vector<uint8_t>& png, int& w, int& h) {
  const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  EXPECT_EQ(std::memcmp(png.data(), sig, 8), 0);
  size_t pos = 8;
  std::vector<uint8_t> z;
  std::vector<std::string> order;
  while (pos + 12 <= png.size()) {
    uint32_t len = be32(&png[pos]);
    std::string type(png.begin() + pos + 4, png.begin() + pos + 8);
    order.push_back(type);
    const uint8_t* data = &png[pos + 8];
    EXPECT_EQ(be32(data + len), crc32(&png[pos + 4], len + 4)) << type;
    if (type == "IHDR") {
      w = static_cast<int>(be32(data));
      h = static_cast<int>(be32(data + 4));
      EXPECT_EQ(data[8], 8);  // bit depth
      EXPECT_EQ(data[9], 6);  // RGBA
    } else if (type == "IDAT") {
      z.insert(z.end(), data, data + len);
    }
    pos += 12 + len;
  }
  EXPECT_EQ(pos, png.size());
  EXPECT_EQ(order, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  EXPECT_EQ((z[0] * 256 + z[1]) % 31, 0);  // zlib header check
  std::vector<uint8_t> raw;
  size_t p = 2;
  bool last = false;
  while (!last) {
    last = z[p] & 1;
    EXPECT_EQ((z[p] >> 1) & 3, 0);  // stored
    uint16_t len = static_cast<uint16_t>(z[p + 1] | (z[p + 2] << 8));
    uint16_t nlen = static_cast<uint16_t>(z[p + 3] | (z[p + 4] << 8));
    EXPECT_EQ(static_cast<uint16_t>(~len), nlen);
    raw.insert(raw.end(), z.begin() + p + 5, z.begin() + p + 5 + len);
    p += 5 + len;
  }
  EXPECT_EQ(be32(&z[p]), adler32(raw.data(), raw.size()));
  EXPECT_EQ(p + 4, z.size());
  return raw;
}

TEST(PngWriter, SmallImageRoundTrips) {
  // 2x2: red, green / blue, half-transparent white.
  std::vector<uint8_t> px = {255, 0, 0, 255, 0, 255, 0, 255, 0, 0, 255, 255, 255, 255, 255, 128};
  int w = 0, h = 0;
  auto raw = decode_stored(encode_png_rgba(px.data(), 2, 2), w, h);
  EXPECT_EQ(w, 2);
  EXPECT_EQ(h, 2);
  std::vector<uint8_t> expect = {0, 255, 0, 0, 255, 0, 255, 0, 255, 0, 0, 0, 255, 255, 255, 255, 255, 128};
  EXPECT_EQ(raw, expect);
}

TEST(PngWriter, LargeImageSpansSeveralStoredBlocks) {
  const int w = 300, h = 200;  // 240,200 raw bytes: four stored blocks
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  int dw = 0, dh = 0;
  auto raw = decode_stored(encode_png_rgba(px.data(), w, h), dw, dh);
  ASSERT_EQ(raw.size(), static_cast<size_t>(h) * (w * 4 + 1));
  for (int y = 0; y < h; ++y) {
    ASSERT_EQ(raw[y * (w * 4 + 1)], 0);
    ASSERT_EQ(std::memcmp(&raw[y * (w * 4 + 1) + 1], &px[static_cast<size_t>(y) * w * 4], w * 4), 0) << y;
  }
}

TEST(PngWriter, EmptyImageIsAnError) {
  EXPECT_THROW(encode_png_rgba(nullptr, 0, 10), std::exception);
}

}  // namespace
}  // namespace cypris
