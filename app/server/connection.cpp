#include "app/server/connection.h"

#include "app/server/connection_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace cypris::server {

static bool address_of(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf))) return false;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf))) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

int connection_fd(const httplib::Request& req) {
  // The guard knows the socket of the request on this thread: no search.
  if (current_connection().fd >= 0) return current_connection().fd;
  if (req.ssl) {
    int fd = SSL_get_fd(req.ssl);
    if (fd >= 0) return fd;
  }
  if (req.remote_port < 0 || req.local_port < 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof(peer), ll = sizeof(local);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    std::string paddr, laddr;
    int pport = -1, lport = -1;
    if (!address_of(peer, paddr, pport) || !address_of(local, laddr, lport)) continue;
    if (pport == req.remote_port && lport == req.local_port && paddr == req.remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_connected(int fd, SSL* ssl) {
  if (fd < 0) return true;
  unsigned char c = 0;
  ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  // More bytes from the client: a pipelined request (still there), or a TLS alert such as
  // close_notify, which a client sends only when it closes.
  if (n > 0 && ssl) {
    // TLS 1.3 encrypts alerts too: let OpenSSL look at the record (without consuming data).
    char b;
    const int r = SSL_peek(ssl, &b, 1);
    if (r > 0) return true;
    const int err = SSL_get_error(ssl, r);
    return err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE;
  }
  if (n > 0) return true;
  if (n == 0) return false;  // orderly close
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

std::function<bool()> connection_probe(const httplib::Request& req) {
  const int fd = connection_fd(req);
  SSL* ssl = const_cast<SSL*>(req.ssl);  // used only on this connection's own thread
  return [fd, ssl] { return peer_connected(fd, ssl); };
}

}  // namespace cypris::server
