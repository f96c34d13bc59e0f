// The simulated NCCL library (sim/nccl/internal.h): the coordinator — the sockets, the shared
// segment it hands out, watching the ranks' connections —, the unique id that names it, a
// communicator's initialisation (ncclCommInitRank's work), and what a process does at exit.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/files.h"
#include "base/text.h"
#include "sim/nccl/internal.h"

namespace accel::simnccl {

// ---------------------------------------------------------------------------------------
// The coordinator: in the process that made the unique id

namespace {

bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace

// A line of text, length-prefixed.
bool send_text(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return send_all(fd, &n, 4) && send_all(fd, s.data(), n);
}

namespace {

bool recv_text(int fd, std::string& s) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4) || n > (1u << 20)) return false;
  s.resize(n);
  return recv_all(fd, s.data(), n);
}

}  // namespace

void Coordinator::run(double timeout_s) {
  struct Peer {
    int fd = -1, rank = -1, nranks = 0;
    uint32_t pid = 0;
    std::string config;
    bool bye = false;
  };
  std::vector<Peer> peers;
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  int n = -1;
  auto fail_all = [&](const std::string& why) {
    for (auto& p : peers) {
      send_text(p.fd, "ERR " + why);
      ::close(p.fd);
    }
    finished = true;
  };
  // 1. every rank says hello: "rank nranks pid config"
  while (n < 0 || static_cast<int>(peers.size()) < n) {
    const int64_t left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      std::ostringstream os;
      os << "simulated NCCL: only " << peers.size() << " of " << n << " ranks reached ncclCommInitRank within "
         << timeout_s << " s; missing:";
      for (int r = 0; r < n; ++r) {
        bool in = false;
        for (auto& p : peers) in |= p.rank == r;
        if (!in) os << " " << r;
      }
      return fail_all(os.str());
    }
    pollfd pf{listen_fd, POLLIN, 0};
    if (::poll(&pf, 1, static_cast<int>(std::min<int64_t>(left, 200))) <= 0) continue;
    if (!(pf.revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string hello;
    if (!recv_text(fd, hello)) {
      ::close(fd);
      continue;
    }
    Peer p;
    p.fd = fd;
    std::istringstream is(hello);
    is >> p.rank >> p.nranks >> p.pid;
    std::getline(is, p.config);
    if (n < 0) n = p.nranks;
    for (auto& q : peers)
      if (q.rank == p.rank) {
        peers.push_back(p);
        return fail_all("simulated NCCL: rank " + std::to_string(p.rank) + " joined twice (pids " +
                        std::to_string(q.pid) + " and " + std::to_string(p.pid) + ")");
      }
    peers.push_back(p);
    if (p.nranks != n || p.rank < 0 || p.rank >= n)
      return fail_all("simulated NCCL: rank " + std::to_string(p.rank) + " says the world has " +
                      std::to_string(p.nranks) + " ranks, rank " + std::to_string(peers[0].rank) + " says " +
                      std::to_string(n));
  }
  // in rank order, so that every message names the ranks the same way whoever came first
  std::sort(peers.begin(), peers.end(), [](const Peer& a, const Peer& b) { return a.rank < b.rank; });
  for (auto& p : peers)
    if (p.config != peers[0].config)
      return fail_all("simulated NCCL: the processes disagree on the simulated hardware: rank " +
                      std::to_string(peers[0].rank) + " has" + peers[0].config + ", rank " + std::to_string(p.rank) +
                      " has" + p.config + " (ACCEL_SIM_TOPOLOGY, ACCEL_SIM_GPU_MEM)");
  // 2. the segment
  const Layout L(n, kSlotBytes, kBoxBytes);
  const int mfd = ::memfd_create("accel-sim-nccl", MFD_CLOEXEC);
  if (mfd < 0 || ::ftruncate(mfd, static_cast<off_t>(L.total)) != 0)
    return fail_all(std::string("simulated NCCL: cannot make the shared segment: ") + std::strerror(errno));
  void* m = ::mmap(nullptr, L.blocks + sizeof(RankBlock) * n + 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  if (m == MAP_FAILED) return fail_all(std::string("simulated NCCL: mmap: ") + std::strerror(errno));
  auto* h = new (m) Header{};
  h->magic = kShmMagic;
  h->n = n;
  h->slot_bytes = kSlotBytes;
  h->box_bytes = kBoxBytes;
  auto* blocks = reinterpret_cast<RankBlock*>(static_cast<char*>(m) + L.blocks);
  for (int r = 0; r < n; ++r) new (&blocks[r]) RankBlock{};
  for (auto& p : peers) blocks[p.rank].pid = p.pid;
  for (auto& p : peers) {
    const char tag[4] = {'O', 'K', 0, 0};
    send_text(p.fd, "OK");
    files::send_with_descriptors(p.fd, tag, sizeof tag, &mfd, 1);
  }
  ::close(mfd);
  // 3. watch: a connection that closes without "BYE" is a rank that died
  std::vector<pollfd> pfs;
  for (auto& p : peers) pfs.push_back({p.fd, POLLIN, 0});
  int open = n;
  while (open > 0) {
    if (::poll(pfs.data(), pfs.size(), 500) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < pfs.size(); ++i) {
      if (pfs[i].fd < 0 || !(pfs[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      std::string msg;
      Peer& p = peers[i];
      if (recv_text(p.fd, msg)) {
        if (msg.rfind("BYE", 0) == 0) p.bye = true;
        continue;
      }
      // closed
      uint32_t zero = 0;
      blocks[p.rank].state.compare_exchange_strong(zero, p.bye ? 1u : 2u);
      h->bell.fetch_add(1);
      futex(&h->bell, FUTEX_WAKE, INT32_MAX, nullptr);
      ::close(p.fd);
      pfs[i].fd = -1;
      --open;
    }
  }
  ::munmap(m, L.blocks + sizeof(RankBlock) * n + 4096);
  finished = true;
}

namespace {

double default_timeout() {
  const std::string t = env("ACCEL_TIMEOUT");
  const double v = t.empty() ? 300.0 : std::atof(t.c_str());
  return v > 0 ? v : 300.0;
}

}  // namespace

// Makes the unique id: starts a coordinator listening on an abstract Unix socket.
std::shared_ptr<Coordinator> g_pending;  // made by ncclGetUniqueId, adopted by the rank that hosts it
std::mutex g_pending_mu;

ncclResult_t make_unique_id(ncclUniqueId* id) {
  auto co = std::make_shared<Coordinator>();
  std::random_device rd;
  std::ostringstream name;
  name << "accel-sim-nccl-" << getpid() << "-" << std::hex << rd() << rd();
  co->name = name.str();
  co->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, co->name.data(), co->name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + co->name.size());
  if (co->listen_fd < 0 || ::bind(co->listen_fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::listen(co->listen_fd, 1024) != 0)
    return ncclSystemError;
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  std::memcpy(id->internal + 16, co->name.data(), std::min<size_t>(co->name.size(), 100));
  const double timeout = default_timeout();
  Coordinator* raw = co.get();
  co->thread = std::thread([raw, timeout] { raw->run(timeout); });
  co->thread.detach();  // lives until every rank has gone (the process's exit waits for it)
  std::lock_guard<std::mutex> lk(g_pending_mu);
  g_pending = co;
  return ncclSuccess;
}

namespace {

void at_exit();

// Maps every peer's arena here (each has published it before its `direct` flag), opening the
// descriptor of its owner through /proc/<pid>/fd: the same user's processes may, where
// cross-memory attach may be refused (Yama). A peer whose arena cannot be mapped leaves
// arena_ok false: this rank then says, at every collective, that its buffers are not to be
// reached in the arenas, and the collectives take the other paths. ACCEL_SIM_ARENA=0 maps
// none (the tests' way to cover those paths with cudaMalloc's memory).
void map_arenas(ncclComm* c) {
  const int n = c->n;
  c->arena_map.assign(static_cast<size_t>(n), nullptr);
  c->arena_base.assign(static_cast<size_t>(n), 0);
  c->arena_bytes.assign(static_cast<size_t>(n), 0);
  if (env("ACCEL_SIM_ARENA") == "0") return;
  bool ok = true;
  for (int q = 0; q < n; ++q) {
    const RankBlock& b = c->blocks[q];
    c->arena_base[q] = b.arena_base;
    c->arena_bytes[q] = b.arena_bytes;
    if (q == c->rank) {
      ok = ok && b.arena_fd >= 0;
      continue;
    }
    if (b.arena_fd < 0 || b.arena_bytes == 0) {
      ok = false;
      continue;
    }
    const std::string path = "/proc/" + std::to_string(b.pid) + "/fd/" + std::to_string(b.arena_fd);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      ok = false;
      continue;
    }
    struct stat st {};
    void* m = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == b.arena_bytes  // its arena, still
                  ? ::mmap(nullptr, b.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0)
                  : MAP_FAILED;
    ::close(fd);
    if (m == MAP_FAILED) {
      ok = false;
      continue;
    }
    c->arena_map[q] = static_cast<char*>(m);  // kept for the process's life, as the segment
  }
  c->arena_ok = ok;
}

}  // namespace

// ncclCommInitRank's work (on a thread of its own: the communicator is non-blocking).
void init_comm(ncclComm* c, std::string coord_name) {
  auto& p = proc();
  std::string config;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.configure();
    if (!p.config_error.empty()) return c->set_error(ncclInvalidArgument, "simulated NCCL: " + p.config_error);
    if (p.rank >= 0 && p.rank != c->rank)
      return c->set_error(ncclInvalidUsage, "simulated NCCL: one process is one rank (this one is already rank " +
                                                std::to_string(p.rank) + ")");
    const int gpus = p.topo.nodes * p.topo.gpus_per_node;
    if (c->n > gpus)
      return c->set_error(ncclInvalidArgument, "simulated NCCL: " + std::to_string(c->n) + " ranks exceed the " +
                                                    std::to_string(gpus) + " GPUs of topology '" + p.topology_name +
                                                    "' (ACCEL_SIM_TOPOLOGY)");
    p.rank = c->rank;
    p.world = c->n;
    for (const auto& f : p.faults)
      if (f.rank == c->rank && f.kind == sim::Fault::Kind::Delay) p.delay += f.seconds;
    config = " topology " + p.topology_name + ", device memory " +
             (p.capacity ? text::format_bytes(p.capacity) : std::string("unlimited"));
    if (p.exit_owner == 0) {
      p.exit_owner = ::getpid();
      std::atexit(at_exit);
    }
  }
  c->sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, coord_name.data(), coord_name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + coord_name.size());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (::connect(c->sock, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    if (Clock::now() > deadline || c->aborted.load())
      return c->set_error(ncclSystemError, "simulated NCCL: cannot reach the coordinator '" + coord_name +
                                               "' (the process that made the unique id is gone, or it is on another "
                                               "machine: the simulated processes share one machine)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!send_text(c->sock, std::to_string(c->rank) + " " + std::to_string(c->n) + " " + std::to_string(getpid()) + config))
    return c->set_error(ncclSystemError, "simulated NCCL: the coordinator closed the connection");
  std::string answer;
  if (!recv_text(c->sock, answer))
    return c->set_error(ncclRemoteError, "simulated NCCL: the coordinator closed the connection during initialisation");
  if (answer.rfind("ERR ", 0) == 0) return c->set_error(ncclInvalidUsage, answer.substr(4));
  char tag[4];
  iovec iov{tag, sizeof tag};
  char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  if (::recvmsg(c->sock, &msg, MSG_CMSG_CLOEXEC) <= 0 || !CMSG_FIRSTHDR(&msg))
    return c->set_error(ncclSystemError, "simulated NCCL: no shared segment from the coordinator");
  int mfd = -1;
  std::memcpy(&mfd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
  const off_t size = ::lseek(mfd, 0, SEEK_END);
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
  ::close(mfd);
  if (m == MAP_FAILED) return c->set_error(ncclSystemError, std::string("simulated NCCL: mmap: ") + std::strerror(errno));
  c->base = static_cast<char*>(m);
  c->size = static_cast<size_t>(size);
  c->hdr = reinterpret_cast<Header*>(c->base);
  const Layout L(c->n, c->hdr->slot_bytes, c->hdr->box_bytes);
  c->blocks = reinterpret_cast<RankBlock*>(c->base + L.blocks);
  c->boxes = reinterpret_cast<Mailbox*>(c->base + L.boxes);
  c->slots = c->base + L.slots;
  c->result = c->base + L.result;
  c->box_data = c->base + L.data;
  c->slot_bytes = c->hdr->slot_bytes;
  c->box_bytes = c->hdr->box_bytes;
  // the watcher: the coordinator's connection closing means rank 0's process is gone
  c->watcher = std::thread([c] {
    for (;;) {
      pollfd pf{c->sock, POLLIN, 0};
      const int r = ::poll(&pf, 1, -1);
      if (r < 0 && errno == EINTR) continue;
      char b;
      if (r > 0 && ::recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        c->coordinator_gone = true;
        uint32_t zero = 0;
        if (c->rank != 0) c->blocks[0].state.compare_exchange_strong(zero, 2u);
        c->ring();
        return;
      }
      if (r > 0 && (pf.revents & (POLLERR | POLLNVAL))) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  c->watcher.detach();
  // Direct access to the peers' memory (cross-memory attach) where the system allows it
  // (same user; Yama's ptrace_scope 1 is opened to any process of this user by
  // PR_SET_PTRACER); else collectives stage through the segment. Every rank tests reading
  // its successor; all use direct access only if all can. ACCEL_SIM_DIRECT=0 turns it off,
  // ACCEL_SIM_DIRECT=1 uses it for every collective (the tests' way to cover both paths).
  //
  // This process's arena (its simulated GPU's memory: cudaMalloc's) is published with the
  // probe, for the others to map once every rank has published.
  static const uint64_t probe = 0x70726f6265636d61ull;
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  const ArenaView own = arena_view();
  c->me().arena_fd = own.fd;
  c->me().arena_base = reinterpret_cast<uint64_t>(own.base);
  c->me().arena_bytes = own.bytes;
  c->me().probe_addr = reinterpret_cast<uint64_t>(&probe);
  c->ring();
  const int next = (c->rank + 1) % c->n;
  std::string why;
  if (!wait_until(c, [&] { return c->blocks[next].probe_addr != 0; }, everyone(c->n), why))
    return c->set_error(ncclRemoteError, "simulated NCCL: initialisation: " + why);
  uint64_t got = 0;
  std::string err;
  const std::string mode = env("ACCEL_SIM_DIRECT");  // 0: never; 1: every collective; else from 16 MiB
  if (mode == "1") c->direct_from = 0;
  const bool can = mode != "0" &&
                   peer_copy(c, next, &got, c->blocks[next].probe_addr, sizeof got, false, err) && got == probe;
  c->me().direct = can ? 1u : 2u;
  c->attach_calls = 0;  // the probe's: accelSimDataPaths counts the collectives' calls
  c->ring();
  if (!wait_until(
          c,
          [&] {
            for (int q = 0; q < c->n; ++q)
              if (c->blocks[q].direct.load() == 0) return false;
            return true;
          },
          everyone(c->n), why))
    return c->set_error(ncclRemoteError, "simulated NCCL: initialisation: " + why);
  c->direct = true;
  for (int q = 0; q < c->n; ++q) c->direct = c->direct && c->blocks[q].direct.load() == 1;
  map_arenas(c);
  c->async = ncclSuccess;
}

std::vector<ncclComm*>& live_comms() {
  static auto* v = new std::vector<ncclComm*>();
  return *v;
}
std::mutex g_comms_mu;

namespace {

// At exit: say goodbye (the others then know this rank exited rather than died), write the
// report, and keep the coordinator up until every other rank has gone.
void at_exit() {
  // A child the rank's process forked (a data loader's worker, a helper) that calls exit()
  // runs this hook too: it must not say goodbye on the rank's connection, which it shares,
  // nor shut it down, nor rewrite the rank's report (its locks may be held by threads the
  // fork did not copy). Only the process that registered it speaks for the rank.
  if (::getpid() != proc().exit_owner) return;
  std::vector<ncclComm*> comms;
  {
    std::lock_guard<std::mutex> lk(g_comms_mu);
    comms = live_comms();
  }
  for (ncclComm* c : comms)
    if (c->sock >= 0) send_text(c->sock, "BYE exit");
  {
    std::lock_guard<std::mutex> lk(proc().mu);
    proc().write_files();
  }
  for (ncclComm* c : comms) {
    if (!c->coordinator) continue;
    if (c->sock >= 0) ::shutdown(c->sock, SHUT_WR);
    const auto deadline = Clock::now() + std::chrono::duration<double>(default_timeout());
    while (!c->coordinator->finished.load() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

}  // namespace accel::simnccl
