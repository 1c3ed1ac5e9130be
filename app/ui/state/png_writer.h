// A small PNG writer for --screenshot: 8-bit RGBA, zlib "stored" (uncompressed) deflate blocks, so
// the app needs no image or compression library. Also CRC-32 and Adler-32, exposed for tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cypris {

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n);

// rgba: width*height*4 bytes, top row first. Returns the PNG file bytes.
std::vector<uint8_t> encode_png_rgba(const uint8_t* rgba, int width, int height);
// Writes the PNG; throws cypris::Error naming the path on failure.
void write_png_rgba(const std::string& path, const uint8_t* rgba, int width, int height);

}  // namespace cypris
