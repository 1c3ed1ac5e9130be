// sha256 / git-blob sha1 with OpenSSL's EVP interface (see hash.h).
#include "engine/hub/hash.h"

#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/hub/cache.h"
#include "engine/hub/hub.h"

namespace cypris::hub {
namespace {

struct Digest {
  explicit Digest(const EVP_MD* md) : ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx.get(), md, nullptr);
  }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); }
  std::string hex() {
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx.get(), out, &len);
    static const char* kHex = "0123456789abcdef";
    std::string s;
    for (unsigned i = 0; i < len; ++i) {
      s += kHex[out[i] >> 4];
      s += kHex[out[i] & 15];
    }
    return s;
  }
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx;
};

void feed_file(Digest& d, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw HubError(HubErrorKind::Io, fmt::format("cannot read {}", path));
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) d.update(buf.data(), n);
  if (std::ferror(f.get())) throw HubError(HubErrorKind::Io, fmt::format("error reading {}", path));
}

}  // namespace

std::string sha256_hex(const std::string& data) {
  Digest d(EVP_sha256());
  d.update(data.data(), data.size());
  return d.hex();
}

std::string git_blob_sha1_hex(const std::string& data) {
  Digest d(EVP_sha1());
  std::string head = "blob " + std::to_string(data.size());
  d.update(head.data(), head.size() + 1);  // includes the NUL
  d.update(data.data(), data.size());
  return d.hex();
}

std::string sha256_file_hex(const std::string& path) {
  Digest d(EVP_sha256());
  feed_file(d, path);
  return d.hex();
}

std::string git_blob_sha1_file_hex(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) throw HubError(HubErrorKind::Io, fmt::format("cannot read {}: {}", path, ec.message()));
  Digest d(EVP_sha1());
  std::string head = "blob " + std::to_string(size);
  d.update(head.data(), head.size() + 1);
  feed_file(d, path);
  return d.hex();
}

bool file_matches_etag(const std::string& path, const std::string& etag) {
  auto is_hex = [&](size_t n) {
    if (etag.size() != n) return false;
    for (char c : etag) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  };
  if (is_hex(64)) return sha256_file_hex(path) == etag;
  if (is_hex(40)) return git_blob_sha1_file_hex(path) == etag;
  return true;
}

}  // namespace cypris::hub
