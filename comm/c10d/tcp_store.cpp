// c10d's TCPStore behind the Store interface (tcp_store.h).
#include "comm/c10d/tcp_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <thread>
#include <utility>

#include "comm/communicator.h"

namespace accel::comm {

namespace {

// Runs a c10d call, turning its exceptions into CommError naming what was asked.
template <class F>
auto c10d_call(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    const bool timeout = msg.find("imeout") != std::string::npos || msg.find("imed out") != std::string::npos;
    throw CommError(timeout ? Result::Timeout : Result::RemoteError, "store: " + what + ": " + msg);
  }
}

class TcpStore final : public Store {
 public:
  TcpStore(c10::intrusive_ptr<c10d::TCPStore> s, std::string where) : s_(std::move(s)), where_(std::move(where)) {}

  void set(const std::string& key, const Bytes& value) override {
    c10d_call("set '" + key + "' at " + where_, [&] { s_->set(key, value); });
  }
  Bytes get(const std::string& key) override {
    return c10d_call("get '" + key + "' at " + where_ + " (waited " + std::to_string(timeout().count()) + " ms)",
                     [&] { return s_->get(key); });
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return c10d_call("add to '" + key + "' at " + where_, [&] { return s_->add(key, delta); });
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return c10d_call("compare_set '" + key + "' at " + where_, [&] { return s_->compareSet(key, expected, desired); });
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::string names;
    for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
    c10d_call("wait for " + names + " at " + where_ + " (" + std::to_string(timeout.count()) + " ms)",
              [&] { s_->wait(keys, timeout); });
  }
  bool check(const std::string& key) override {
    return c10d_call("check '" + key + "' at " + where_, [&] { return s_->check({key}); });
  }
  bool remove(const std::string& key) override {
    return c10d_call("remove '" + key + "' at " + where_, [&] { return s_->deleteKey(key); });
  }
  std::chrono::milliseconds timeout() const override { return s_->getTimeout(); }
  void set_timeout(std::chrono::milliseconds timeout) override {
    if (timeout.count() <= 0)
      throw CommError(Result::InvalidArgument, "store: the timeout must be > 0 ms, got " + std::to_string(timeout.count()));
    s_->setTimeout(timeout);
  }

 private:
  c10::intrusive_ptr<c10d::TCPStore> s_;
  std::string where_;
};

// c10d's client sleeps a whole second after a refused connection before it tries again, and
// the processes of a launched world start together, so a client usually comes before
// process 0's server listens. Waits (polling every 10 ms, up to `timeout`) until something
// accepts connections at host:port, so that c10d's own connect succeeds at once.
void wait_for_server(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (true) {
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) == 0) {
      for (addrinfo* a = res; a; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        const bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        close(fd);
        if (ok) {
          freeaddrinfo(res);
          return;
        }
      }
      freeaddrinfo(res);
    }
    if (std::chrono::steady_clock::now() >= deadline) return;  // c10d reports the failure
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

std::shared_ptr<Store> make_tcp_store(const TcpStoreConfig& c, int* bound_port) {
  if (c.port < 0 || c.port > 65535 || (c.port == 0 && !c.is_server))
    throw CommError(Result::InvalidArgument, "store: port " + std::to_string(c.port) +
                                                 " is not a port to connect to (1..65535; 0 only for the server)");
  if (c.world_size < 1) throw CommError(Result::InvalidArgument, "store: world_size must be >= 1");
  if (c.timeout.count() <= 0) throw CommError(Result::InvalidArgument, "store: the timeout must be > 0 ms");
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(c.port);
  o.isServer = c.is_server;
  o.numWorkers = static_cast<std::size_t>(c.world_size);
  o.waitWorkers = false;  // the process group's own rendezvous waits for the others
  // c10d counts the connection's timeout in whole seconds (300 ms would give up at once):
  // connect with at least one second, then every operation waits `timeout`
  o.timeout = std::max<std::chrono::milliseconds>(c.timeout, std::chrono::seconds(1));
  const std::string where = c.host + ":" + std::to_string(c.port);
  if (!c.is_server) wait_for_server(c.host, c.port, c.timeout);
  auto s = c10d_call(std::string(c.is_server ? "start the server on " : "connect to ") + where + " (" +
                         std::to_string(c.timeout.count()) + " ms)",
                     [&] { return c10::make_intrusive<c10d::TCPStore>(c.host, o); });
  s->setTimeout(c.timeout);
  const int port = s->getPort();
  if (bound_port) *bound_port = port;
  return std::make_shared<TcpStore>(std::move(s), c.host + ":" + std::to_string(port));
}

std::shared_ptr<Store> group_store(const GroupConfig& c) {
  if (c.store) return c.store;
  TcpStoreConfig s;
  s.host = c.master_addr;
  s.port = c.master_port;
  s.is_server = c.rank == 0;
  s.world_size = c.world_size;
  s.timeout = c.timeout;
  return make_tcp_store(s);
}

}  // namespace accel::comm
