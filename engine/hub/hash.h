// Hashes used to verify downloaded blobs against their ETag: sha256 for LFS files and the git
// blob id sha1("blob <len>\0" + content) for regular files (OpenSSL libcrypto).
#pragma once

#include <cstdint>
#include <string>

namespace cypris::hub {

std::string sha256_hex(const std::string& data);
std::string git_blob_sha1_hex(const std::string& data);
// Streams a file; throws HubError(Io) when it cannot be read.
std::string sha256_file_hex(const std::string& path);
std::string git_blob_sha1_file_hex(const std::string& path);
// True when the file's content matches the etag: 64 hex -> sha256, 40 hex -> git blob sha1.
// Other etag shapes cannot be checked and count as matching (size is still checked by the caller).
bool file_matches_etag(const std::string& path, const std::string& etag);

}  // namespace cypris::hub
