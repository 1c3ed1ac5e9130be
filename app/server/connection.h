// Telling whether the client of a request is still connected while the handler waits for the
// engine (httplib 0.11 notices a closed connection only when a write fails, which for a long
// prefill would be minutes after SillyTavern's "stop"). Internal to app/server/; Linux.
#pragma once

#include <httplib.h>

#include <functional>

namespace cypris::server {

// The socket of the request's connection: from the TLS session, else found among this process's
// sockets by the connection's addresses; -1 when not found.
int connection_fd(const httplib::Request& req);

// False once the peer has closed the connection (a peek reads end-of-stream, or on TLS a
// close_notify alert) or the socket failed. ssl: the connection's TLS session, or nullptr.
bool peer_connected(int fd, SSL* ssl = nullptr);

// A probe for the request's connection; always true when the socket cannot be found.
std::function<bool()> connection_probe(const httplib::Request& req);

}  // namespace cypris::server
