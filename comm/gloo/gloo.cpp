// The Gloo backend (gloo.h): c10d's ProcessGroupGloo behind the Communicator.
#include "comm/gloo/gloo.h"

#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/c10d/tcp_store.h"
#include "comm/guard.h"
#include "comm/kernels.h"
#include "comm/shm.h"

namespace accel::comm {

namespace {

using C10Work = decltype(std::declval<c10d::ProcessGroupGloo&>().barrier())::element_type;

// An accel Store seen as a c10d Store, so c10d's Gloo rendezvous (its pairs' addresses) runs
// over whichever Store the group was given: a TCPStore across processes, an in-process one in
// tests.
class C10Store final : public c10d::Store {
 public:
  explicit C10Store(std::shared_ptr<::accel::comm::Store> s) : s_(std::move(s)) { timeout_ = s_->timeout(); }
  void set(const std::string& key, const std::vector<uint8_t>& value) override { s_->set(key, value); }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return s_->compare_set(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override { return s_->get(key); }
  int64_t add(const std::string& key, int64_t value) override { return s_->add(key, value); }
  bool deleteKey(const std::string& key) override { return s_->remove(key); }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys)
      if (!s_->check(k)) return false;
    return true;
  }
  int64_t getNumKeys() override { throw CommError(Result::InvalidUsage, "store: the number of keys is not kept"); }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys, s_->timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_->wait(keys, timeout);
  }
  // libtorch 2.x's Store is cloneable (a pure virtual there; libtorch 1.13 has none): a second
  // view of the same accel Store.
  c10::intrusive_ptr<c10d::Store> clone() { return c10::make_intrusive<C10Store>(s_); }

 private:
  std::shared_ptr<::accel::comm::Store> s_;
};

// The first line of an exception's message, without c10's backtrace.
std::string message_of(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& x) {
    std::string m = x.what_without_backtrace();
    return m.substr(0, m.find('\n'));
  } catch (const std::exception& x) {
    std::string m = x.what();
    return m.substr(0, m.find('\n'));
  } catch (...) {
    return "unknown error";
  }
}

// A failed c10d call as a CommError: a timeout, or a peer that is gone.
CommError translate(std::exception_ptr e, const std::string& what) {
  try {
    std::rethrow_exception(e);
  } catch (const CommError& c) {
    return c;
  } catch (...) {
  }
  const std::string m = message_of(e);
  const bool timeout = m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
  return CommError(timeout ? Result::Timeout : Result::RemoteError,
                   "gloo: " + what + ": " + m +
                       (timeout ? " (the configured timeout passed: ACCEL_TIMEOUT or accel_options.timeout_seconds)"
                                : " (a peer process died or closed its connection)"));
}

// A posted c10d operation and what completes it on this process (a copy back, a division, a
// conversion), run once when the operation is waited on or tested complete.
class GlooWork final : public Work {
 public:
  // `before`: an operation this one completes after (a composed one's inner all-reduce)
  GlooWork(c10::intrusive_ptr<C10Work> w, std::function<void()> finish, std::string what,
           std::shared_ptr<Work> before = nullptr)
      : w_(std::move(w)), finish_(std::move(finish)), what_(std::move(what)), before_(std::move(before)) {}
  void wait() override {
    if (!done_) {
      done_ = true;
      try {
        if (before_) before_->wait();
        if (w_) w_->wait();
        if (finish_) finish_();
      } catch (...) {
        failed_ = std::make_exception_ptr(translate(std::current_exception(), what_));
      }
      w_.reset();
      finish_ = nullptr;
      before_.reset();
    }
    if (failed_) std::rethrow_exception(failed_);
  }
  bool test() override {  // never blocks: false until every part has completed
    if (!done_ && ((before_ && !before_->test()) || (w_ && !w_->isCompleted()))) return false;
    wait();
    return true;
  }
  // A collective's c10d Work blocks with a deadline (c10d::Work::wait(timeout) throws when
  // it passes, the operation left running). Send and recv cannot: theirs end the operation
  // with the timeout's error, so they are waited for whole.
  bool wait_for(std::chrono::milliseconds d) override {
    if (!done_ && sliceable_) {
      const auto deadline = std::chrono::steady_clock::now() + d;
      if (before_ && !before_->wait_for(d)) return false;
      if (w_ && !w_->isCompleted()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        try {
          w_->wait(std::max(left, std::chrono::milliseconds(1)));
        } catch (...) {  // the deadline, or the operation's own failure (wait() reports it)
        }
        if (!w_->isCompleted()) return false;
      }
    }
    wait();
    return true;
  }
  void not_sliceable() { sliceable_ = false; }

 private:
  c10::intrusive_ptr<C10Work> w_;
  std::function<void()> finish_;
  std::string what_;
  std::shared_ptr<Work> before_;
  bool done_ = false;
  bool sliceable_ = true;
  std::exception_ptr failed_;
};

// An operation posted inside a group: it starts at group_end.
class GroupedWork final : public Work {
 public:
  std::shared_ptr<Work> inner;
  void wait() override {
    if (!inner) throw CommError(Result::InvalidUsage, "gloo: waiting on an operation of a group before group_end");
    inner->wait();
  }
  bool test() override {
    if (!inner) return false;
    return inner->test();
  }
  bool wait_for(std::chrono::milliseconds d) override {
    if (!inner) throw CommError(Result::InvalidUsage, "gloo: waiting on an operation of a group before group_end");
    return inner->wait_for(d);
  }
};

c10::ScalarType scalar_of(DataType t) {
  switch (t) {
    case DataType::Int8: return at::kChar;
    case DataType::Uint8: return at::kByte;
    case DataType::Int32: case DataType::Uint32: return at::kInt;  // unsigned: the same bits (Sum, Prod only)
    case DataType::Int64: case DataType::Uint64: return at::kLong;
    case DataType::Float16: return at::kHalf;
    case DataType::Float32: return at::kFloat;
    case DataType::Float64: return at::kDouble;
    case DataType::BFloat16: return at::kBFloat16;
  }
  throw CommError(Result::InvalidArgument, "invalid data type");
}

bool is_float(DataType t) {
  return t == DataType::Float16 || t == DataType::Float32 || t == DataType::Float64 || t == DataType::BFloat16;
}

// Borrows `count` elements at `p` as a tensor (no copy).
at::Tensor view(const void* p, size_t count, DataType t) {
  return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(count)}, at::TensorOptions().dtype(scalar_of(t)));
}
at::Tensor bytes(const void* p, size_t count, DataType t) {
  return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(count * dtype_size(t))}, at::TensorOptions().dtype(at::kByte));
}

c10d::ReduceOp c10d_op(RedOp op) {
  switch (op) {
    case RedOp::Prod: return c10d::ReduceOp::PRODUCT;
    case RedOp::Max: return c10d::ReduceOp::MAX;
    case RedOp::Min: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM;  // Sum, and Avg / PreMulSum composed around it
  }
}

// The address this process's Gloo device listens on: ACCEL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
// name an interface; else the local address of the route to the master (so two machines, or
// two network namespaces, reach each other), loopback for a master on loopback.
std::shared_ptr<::gloo::transport::Device> make_device(const std::string& master) {
  for (const char* var : {"ACCEL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"})
    if (const char* ifname = std::getenv(var); ifname && *ifname) {
      try {
        return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
      } catch (...) {
        throw CommError(Result::InvalidArgument, std::string("gloo: ") + var + "='" + ifname +
                                                     "' is not a usable network interface: " +
                                                     message_of(std::current_exception()));
      }
    }
  std::string local = "127.0.0.1";
  in_addr a{};
  if (!master.empty() && inet_pton(AF_INET, master.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) != 127) {
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd >= 0) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(9);
      to.sin_addr = a;
      sockaddr_in me{};
      socklen_t len = sizeof me;
      char buf[INET_ADDRSTRLEN];
      if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 && inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf))
        local = buf;
      close(fd);
    }
  } else if (!master.empty() && master != "localhost" && inet_pton(AF_INET, master.c_str(), &a) != 1) {
    local = "";  // a host name: let c10d resolve this machine's own name
  }
  try {
    return local.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                         : c10d::ProcessGroupGloo::createDeviceForHostname(local);
  } catch (...) {
    throw CommError(Result::SystemError, "gloo: cannot listen on " + (local.empty() ? "this host's address" : local) + ": " +
                                             message_of(std::current_exception()));
  }
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const GroupConfig& c, std::shared_ptr<Store> store)
      : rank_(c.rank), size_(c.world_size), local_rank_(c.local_rank), local_size_(c.local_world_size),
        store_(std::move(store)) {
    auto opts = c10d::ProcessGroupGloo::Options::create(c.timeout);
    opts->devices.push_back(make_device(c.master_addr));
    opts->threads = 1;  // one worker: operations complete in the order posted (the Work contract)
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("accel/gloo", c10::make_intrusive<C10Store>(store_));
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank_, size_, opts);
    } catch (...) {
      throw translate(std::current_exception(), "connecting rank " + std::to_string(rank_) + " of " + std::to_string(size_));
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return "gloo"; }
  Store* store() override { return store_.get(); }

  std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   PreMul premul) override {
    check_op(t, op);
    need(send, recv, count);
    return run([this, send, recv, count, t, op, premul] { return post_all_reduce(send, recv, count, t, op, premul, "all_reduce"); });
  }

  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       PreMul premul) override {
    check_op(t, op);
    need(send, recv, recvcount);
    return run([this, send, recv, recvcount, t, op, premul]() -> std::shared_ptr<Work> {
      const size_t es = dtype_size(t), n = recvcount * static_cast<size_t>(size_);
      if (recvcount && size_ > 1 && is_float(t) && (op == RedOp::Sum || op == RedOp::Avg))
        return post_exchanged_reduce_scatter(send, recv, recvcount, t, op);
      // Other types and ops: the whole buffer all-reduced in a temporary, this rank's slice kept.
      auto tmp = std::make_shared<std::vector<uint8_t>>(n * es);
      if (n) std::memcpy(tmp->data(), send, n * es);
      auto inner = post_all_reduce(tmp->data(), tmp->data(), n, t, op, premul, "reduce_scatter");
      const size_t off = recvcount * static_cast<size_t>(rank_) * es;
      return std::make_shared<GlooWork>(c10::intrusive_ptr<C10Work>(), [tmp, recv, off, recvcount, es] {
        if (recvcount) std::memmove(recv, tmp->data() + off, recvcount * es);
      }, what("reduce_scatter", recvcount, t), inner);
    });
  }

  std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) override {
    check_dtype(t);
    need(send, recv, sendcount);
    return run([this, send, recv, sendcount, t] { return post_all_gather(send, recv, sendcount, t, "all_gather", nullptr); });
  }

  std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) override {
    check_dtype(t);
    check_rank(root, "root");
    need(rank_ == root ? send : recv, recv, count);
    return run([this, send, recv, count, t, root] {
      if (rank_ == root && send != recv && count) std::memmove(recv, send, count * dtype_size(t));
      std::vector<at::Tensor> ts{bytes(recv, count, t)};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      return post([&] { return pg_->broadcast(ts, o); }, nullptr, what("broadcast", count, t));
    });
  }

  std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                               PreMul premul) override {
    check_op(t, op);
    check_rank(root, "root");
    need(send, rank_ == root ? recv : send, count);
    return run([this, send, recv, count, t, op, root, premul]() -> std::shared_ptr<Work> {
      if (composed(t, op) || op == RedOp::Avg || op == RedOp::PreMulSum) {
        // c10d's reduce has no Avg or PreMulSum and Gloo no bfloat16 or unsigned Max/Min:
        // every process reduces (an all-reduce into a temporary); the root keeps the result.
        const size_t es = dtype_size(t);
        auto tmp = std::make_shared<std::vector<uint8_t>>(count * es);
        auto inner = post_all_reduce(send, tmp->data(), count, t, op, premul, "reduce");
        const bool root_here = rank_ == root;
        return std::make_shared<GlooWork>(c10::intrusive_ptr<C10Work>(), [tmp, recv, count, es, root_here] {
          if (root_here && count) std::memcpy(recv, tmp->data(), count * es);
        }, what("reduce", count, t), inner);
      }
      // Native: in place on the root's recv, on a temporary elsewhere (c10d's reduce may
      // write its scratch into the buffer, and NCCL leaves `send` untouched).
      at::Tensor buf;
      if (rank_ == root) {
        if (send != recv && count) std::memmove(recv, send, count * dtype_size(t));
        buf = view(recv, count, t);
      } else {
        buf = view(send, count, t).clone();
      }
      std::vector<at::Tensor> ts{buf};
      c10d::ReduceOptions o;
      o.rootRank = root;
      o.reduceOp = c10d_op(op);
      return post([&] { return pg_->reduce(ts, o); }, [buf] {}, what("reduce", count, t));
    });
  }

  std::shared_ptr<Work> send(const void* buf, size_t count, DataType t, int peer) override {
    check_dtype(t);
    check_rank(peer, "peer");
    need(buf, buf, count);
    return run([this, buf, count, t, peer] {
      std::vector<at::Tensor> ts{bytes(buf, count, t)};
      return post([&] { return pg_->send(ts, peer, 0); }, nullptr, what("send to " + std::to_string(peer), count, t), true);
    });
  }

  std::shared_ptr<Work> recv(void* buf, size_t count, DataType t, int peer) override {
    check_dtype(t);
    check_rank(peer, "peer");
    need(buf, buf, count);
    return run([this, buf, count, t, peer] {
      std::vector<at::Tensor> ts{bytes(buf, count, t)};
      return post([&] { return pg_->recv(ts, peer, 0); }, nullptr, what("recv from " + std::to_string(peer), count, t), true);
    });
  }

  void barrier() override {
    ACCEL_CHECK(group_depth_ == 0, Status::InvalidState, "gloo: barrier inside a group");
    post([&] { return pg_->barrier(); }, nullptr, "barrier on rank " + std::to_string(rank_) + " of " + std::to_string(size_))
        ->wait();
  }

  void group_start() override { ++group_depth_; }
  void group_end() override {
    if (group_depth_ == 0) throw CommError(Result::InvalidUsage, "group_end without group_start");
    if (--group_depth_ > 0) return;
    auto queued = std::move(queued_);
    queued_.clear();
    for (auto& [start, slot] : queued) slot->inner = start();
  }

 private:
  std::string what(const std::string& op, size_t count, DataType t) const {
    return op + " of " + std::to_string(count) + " " + dtype_name(t) + " (rank " + std::to_string(rank_) + " of " +
           std::to_string(size_) + ")";
  }
  static void need(const void* a, const void* b, size_t count) {
    if (count > 0 && (a == nullptr || b == nullptr)) throw CommError(Result::InvalidArgument, "gloo: NULL buffer");
  }
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= size_)
      throw CommError(Result::InvalidArgument, std::string("gloo: ") + what + " " + std::to_string(r) +
                                                   " is not a rank of a " + std::to_string(size_) + "-rank world");
  }
  // Reductions Gloo cannot do itself on this type: unsigned Max/Min/Avg/PreMulSum.
  static bool composed(DataType t, RedOp op) {
    return (t == DataType::Uint32 || t == DataType::Uint64) && op != RedOp::Sum && op != RedOp::Prod;
  }

  // Outside a group: posts now. Inside: at group_end.
  std::shared_ptr<Work> run(std::function<std::shared_ptr<Work>()> start) {
    if (group_depth_ == 0) return start();
    auto slot = std::make_shared<GroupedWork>();
    queued_.emplace_back(std::move(start), slot);
    return slot;
  }

  template <class F>
  std::shared_ptr<Work> post(F&& f, std::function<void()> finish, const std::string& w, bool p2p = false) {
    c10::intrusive_ptr<C10Work> work;
    try {
      work = f();
    } catch (...) {
      throw translate(std::current_exception(), w);
    }
    auto g = std::make_shared<GlooWork>(std::move(work), std::move(finish), w);
    if (p2p) g->not_sliceable();
    return g;
  }

  std::shared_ptr<Work> post_all_gather(const void* send, void* recv, size_t count, DataType t, const char* op,
                                        std::function<void()> finish) {
    std::vector<at::Tensor> in{bytes(send, count, t)};
    std::vector<std::vector<at::Tensor>> out(1);
    const size_t es = dtype_size(t);
    for (int r = 0; r < size_; ++r) out[0].push_back(bytes(static_cast<uint8_t*>(recv) + r * count * es, count, t));
    return post([&] { return pg_->allgather(out, in); }, std::move(finish), what(op, count, t));
  }

  // Reduce-scatter of floating-point Sum / Avg as NCCL's ring moves it: one all-to-all (every
  // process sends chunk q of its buffer to process q, (n-1)·count elements per process, in one
  // exchange), then this process sums the n chunks it received in rank order. Bfloat16 sums
  // in float32 and rounds once (as the all-reduce's staging); the other types sum in their own
  // (as Gloo's reduction does). With 2 processes the result is the composed all-reduce's bit
  // for bit (one addition; a + b == b + a), from one exchange of half its bytes (the
  // all-reduce makes two).
  std::shared_ptr<Work> post_exchanged_reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t,
                                                      RedOp op) {
    const size_t es = dtype_size(t), n = recvcount * static_cast<size_t>(size_);
    // every process's chunk for this one, rank after rank (uninitialised: all of it is received)
    auto tmp = std::shared_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(n * es, 1)]);
    at::Tensor in = bytes(send, n, t), out = bytes(tmp.get(), n, t);
    std::vector<int64_t> even;  // empty: equal splits
    const int size = size_;
    return post([&] { return pg_->alltoall_base(out, in, even, even); }, [tmp, recv, recvcount, t, op, size] {
      const at::Tensor parts = view(tmp.get(), recvcount * static_cast<size_t>(size), t).view({size, static_cast<int64_t>(recvcount)});
      const bool staged = t == DataType::BFloat16;
      at::Tensor out = view(recv, recvcount, t);
      at::Tensor acc = staged ? parts[0].to(at::kFloat) : out;  // in place in recv unless staged
      if (staged) {
        for (int q = 1; q < size; ++q) acc.add_(parts[q].to(at::kFloat));
      } else {
        at::add_out(acc, parts[0], parts[1]);
        for (int q = 2; q < size; ++q) acc.add_(parts[q]);
      }
      if (op == RedOp::Avg) acc.div_(size);
      if (staged) out.copy_(acc);
    }, what("reduce_scatter", recvcount, t));
  }

  std::shared_ptr<Work> post_all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, PreMul premul,
                                        const char* name) {
    const size_t es = dtype_size(t);
    if (composed(t, op)) {
      // Every rank's input gathered, then reduced here in rank order (kernels.h).
      auto all = std::make_shared<std::vector<uint8_t>>(count * es * size_);
      const int n = size_;
      return post_all_gather(send, all->data(), count, t, name, [all, recv, count, es, t, op, premul, n] {
        std::vector<const void*> srcs;
        for (int r = 0; r < n; ++r) srcs.push_back(all->data() + r * count * es);
        ::accel::comm::reduce(recv, srcs.data(), n, 0, count, t, op, premul.value);
      });
    }
    if (send != recv && count) std::memmove(recv, send, count * es);
    at::Tensor user = view(recv, count, t);
    // bfloat16 goes through float32 (c10d's Gloo has no bfloat16 reduction); the
    // result is rounded once, as the simulator's kernels round theirs.
    at::Tensor buf = t == DataType::BFloat16 ? user.to(at::kFloat) : user;
    if (op == RedOp::PreMulSum) {
      if (is_float(t))
        buf.mul_(premul.value);
      else
        buf.mul_(static_cast<int64_t>(premul.value));
    }
    std::vector<at::Tensor> ts{buf};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d_op(op);
    const int n = size_;
    std::function<void()> finish = [user, buf, op, n] {
      if (op == RedOp::Avg) {
        if (buf.is_floating_point())
          buf.div_(n);
        else
          buf.div_(n, "trunc");
      }
      if (!buf.is_same(user)) user.copy_(buf);
    };
    return post([&] { return pg_->allreduce(ts, o); }, std::move(finish), what(name, count, t));
  }

  int rank_, size_, local_rank_, local_size_;
  std::shared_ptr<Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  int group_depth_ = 0;
  std::vector<std::pair<std::function<std::shared_ptr<Work>()>, std::shared_ptr<GroupedWork>>> queued_;
};

// Gloo's transport thread (its TCP device's event loop) throws when a message does not fit
// the operation it arrives for (a peer that posted a collective of another size: "enforce
// fail at gloo/transport/tcp/pair.cc ... op.preamble.length <= op.nbytes"), and nothing
// catches it there: std::terminate, the process ends with SIGABRT. With the fingerprints
// checked (comm/guard.h), that thread is parked instead: the operation never completes, the
// waiting process finds out why from the other processes' calls, and fails with the calls
// named, as its peers do. Other terminations go on as before.
std::terminate_handler previous_terminate = nullptr;

[[noreturn]] void park_gloo_transport() {
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      const std::string m = x.what();
      if (m.find("gloo/transport") != std::string::npos) {
        const std::string line = "accel: gloo's transport thread stopped (" + m.substr(0, m.find('\n')) +
                                 "): the collective in progress cannot complete; the processes' calls are compared\n";
        [[maybe_unused]] const ssize_t w = ::write(2, line.data(), line.size());
        for (;;) ::pause();
      }
    } catch (...) {
    }
  }
  if (previous_terminate) previous_terminate();
  std::abort();
}

}  // namespace

std::shared_ptr<Communicator> make_gloo_communicator(const GroupConfig& c) {
  ACCEL_CHECK(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, Status::InvalidArgument, "gloo: rank ", c.rank,
              " is outside a world of ", c.world_size);
  // Gloo writes to its peers' sockets: a peer that died would end this process with SIGPIPE
  // (seen as exit -13 of a survivor) instead of a communication error. Ignore it, unless the
  // program chose its own disposition (Python, PyTorch's usual host, ignores it already).
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  if (comm_check_enabled()) {
    static std::once_flag once;
    std::call_once(once, [] { previous_terminate = std::set_terminate(park_gloo_transport); });
  }
  std::shared_ptr<Store> store = group_store(c);
  meet(*store, c);
  // Processes of one machine move their collectives through shared memory (comm/shm.h).
  return shared_memory_collectives(std::make_shared<GlooCommunicator>(c, std::move(store)), c.timeout);
}

}  // namespace accel::comm
