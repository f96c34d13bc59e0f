// `accel launch`: --master-addr and --master-port: the address resolved, a free port picked
// (--master-port 0), a port in use found before anything starts.
#include "tools/launch/internal.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace accel::launch {

Address resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) throw UsageError("--master-addr " + host + ": " + ::gai_strerror(rc));
  Address a;
  std::memcpy(&a.storage, found->ai_addr, found->ai_addrlen);
  a.length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return a;
}

namespace {

void set_port(Address& a, int port) {
  if (a.storage.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(static_cast<uint16_t>(port));
  else
    reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(static_cast<uint16_t>(port));
}

// Binds a TCP socket to addr:port and closes it. SO_REUSEADDR is set as the rendezvous
// server (c10d's TCPStore) sets it: a port some other socket listens on (or holds without
// SO_REUSEADDR) fails, one left in TIME_WAIT by the previous run does not, as for the server.
// Returns 0 or the errno of the failure; *bound receives the port bound (for port 0).
int try_bind(Address a, int port, int* bound) {
  set_port(a, port);
  int fd = ::socket(a.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int err = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a.storage), a.length) != 0) {
    err = errno;
  } else if (bound) {
    Address got;
    got.length = sizeof got.storage;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&got.storage), &got.length) != 0) {
      err = errno;
    } else {
      *bound = ntohs(got.storage.ss_family == AF_INET6
                         ? reinterpret_cast<sockaddr_in6*>(&got.storage)->sin6_port
                         : reinterpret_cast<sockaddr_in*>(&got.storage)->sin_port);
    }
  }
  ::close(fd);
  return err;
}

}  // namespace

int pick_free_port(const std::string& host) {
  int port = 0;
  int err = try_bind(resolve(host), 0, &port);
  if (err != 0)
    throw UsageError("cannot pick a free port on " + host + " (--master-port 0): " + errno_text(err));
  return port;
}

void check_port_free(const std::string& host, int port) {
  int err = try_bind(resolve(host), port, nullptr);
  if (err == 0) return;
  std::string where = "port " + std::to_string(port) + " on " + host;
  if (err == EADDRINUSE)
    throw UsageError(where +
                     " is in use (another run?); pick another with --master-port or 0 for a free one");
  if (err == EADDRNOTAVAIL) {  // not an address of this machine (NAT, a name for another interface)
    say("warning: cannot check " + where + ": " + host + " is not an address of this machine");
    return;
  }
  throw UsageError("cannot use " + where + ": " + errno_text(err));
}

}  // namespace accel::launch
