// Collectives through shared memory for the processes of one machine (see shm.h).
#include "comm/shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <sstream>
#include <thread>
#include <vector>

#include "base/text.h"
#include "comm/guard.h"
#include "comm/kernels.h"
#include "comm/rendezvous.h"
#include "comm/store.h"

namespace accel::comm {

namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x6d68736c65636361ULL;  // "accelshm"
constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
// How long a process spins for the others before it sleeps on the futex: long enough for a
// peer running on another core to arrive (a step of a chunk takes tens of microseconds),
// short enough to give the core back soon to a peer that needs it to get there.
constexpr auto kSpin = std::chrono::microseconds(50);

enum class Mode { Auto, Off, On };

Mode shm_mode() {
  const char* v = std::getenv("ACCEL_GLOO_SHM");
  if (!v || !*v) return Mode::Auto;
  const std::string s(v);
  if (s == "auto") return Mode::Auto;
  if (s == "0" || s == "off" || s == "false" || s == "no") return Mode::Off;
  if (s == "1" || s == "on" || s == "true" || s == "yes") return Mode::On;
  throw CommError(Result::InvalidArgument, "ACCEL_GLOO_SHM='" + s + "': expected auto, 1 (on) or 0 (off)");
}

// A chunk's fingerprint: what every process must agree on before their buffers are combined.
struct Print {
  uint64_t number = 0;  // the collective's number in this communicator (1-based)
  uint64_t chunk = 0;
  uint64_t count = 0;
  int32_t kind = 0, dtype = 0, op = 0, root = -1;
  bool operator==(const Print& o) const {
    return number == o.number && chunk == o.chunk && count == o.count && kind == o.kind && dtype == o.dtype &&
           op == o.op && root == o.root;
  }
};

std::string describe(const Print& p) {
  return describe_call(static_cast<Collective>(p.kind), p.number, p.count, static_cast<DataType>(p.dtype),
                       static_cast<RedOp>(p.op), p.root, -1);
}

// One process's control block in the segment.
struct alignas(kLine) Control {
  std::atomic<uint64_t> arrived{0};  // the last chunk (sequence number) it copied in
  std::atomic<uint64_t> reduced{0};  // the last chunk whose part it reduced
  std::atomic<int64_t> pid{0};
  Print print[2];  // the fingerprint of its chunk of each parity
};

struct Header {
  uint64_t magic = 0;
  uint64_t size = 0;  // processes
  uint64_t slot_bytes = 0;
  uint64_t total = 0;
  alignas(kLine) std::atomic<uint32_t> epoch{0};  // the futex word: bumped at every announcement
  std::atomic<uint32_t> sleepers{0};
};

size_t controls_offset() { return kPage; }
size_t slots_offset(size_t n) { return (kPage + n * sizeof(Control) + kPage - 1) / kPage * kPage; }
size_t segment_bytes(size_t n, size_t slot) { return slots_offset(n) + 2 * n * slot; }

// Each process's slot: 512 KiB. A chunk's copies and reduction then stay in the cores' caches
// (L2, shared L3): on the 2-vCPU EPYC of docs/benchmarks.md a 16 MiB all-reduce of 2
// processes took 1.9 ms with 512 KiB slots, 3.7 ms with 4 MiB ones (and 9 ms with 128 KiB,
// whose many steps the processes' sleeps dominate).
constexpr size_t kSlotBytes = 512u << 10;

long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

struct Op {
  Collective kind = Collective::Barrier;
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  size_t count = 0;  // elements: all_reduce, reduce, broadcast; per rank: reduce_scatter (recv), all_gather (send)
  DataType t = DataType::Uint8;
  RedOp op = RedOp::Sum;
  double premul = 1.0;
  int root = -1;
  uint64_t number = 0;
  size_t es = 1, per_chunk = 1, chunks = 1;
  size_t chunk = 0;
  int phase = 0;  // 0: to copy in; 1: waiting for every process's chunk; 2: waiting for every part
  uint64_t seq = 0;
  Clock::time_point posted, deadline;
  bool done = false;
  std::exception_ptr error;
  std::string what;  // "all_reduce of 4 float32 (rank 0 of 2)"
};

class ShmCommunicator;

class ShmWork final : public Work {
 public:
  ShmWork(std::shared_ptr<ShmCommunicator> c, std::shared_ptr<Op> op) : c_(std::move(c)), op_(std::move(op)) {}
  void wait() override;
  bool test() override;
  bool wait_for(std::chrono::milliseconds d) override;

 private:
  std::shared_ptr<ShmCommunicator> c_;
  std::shared_ptr<Op> op_;
};

class ShmCommunicator final : public Communicator, public std::enable_shared_from_this<ShmCommunicator> {
 public:
  ShmCommunicator(std::shared_ptr<Communicator> inner, Ms timeout, uint8_t* base, size_t bytes)
      : inner_(std::move(inner)), timeout_(timeout), rank_(inner_->rank()), size_(inner_->size()), base_(base),
        bytes_(bytes), hdr_(reinterpret_cast<Header*>(base)),
        ctl_(reinterpret_cast<Control*>(base + controls_offset())), slot_(hdr_->slot_bytes) {
    ctl_[rank_].pid.store(::getpid());
  }
  ~ShmCommunicator() override { ::munmap(base_, bytes_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return inner_->local_rank(); }
  int local_size() const override { return inner_->local_size(); }
  std::string backend() const override { return inner_->backend(); }
  Store* store() override { return inner_->store(); }
  bool reaches(const Device& d) const override { return d.kind == Device::Kind::Host; }
  Device home() const override { return Device{}; }
  bool supports(Collective op, DataType t) const override { return inner_->supports(op, t); }
  bool shared_memory() const override { return true; }

  std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   PreMul premul) override {
    check_op(t, op);
    need(send, recv, count);
    return post(Collective::AllReduce, send, recv, count, t, op, premul.value, -1);
  }
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       PreMul premul) override {
    check_op(t, op);
    need(send, recv, recvcount);
    return post(Collective::ReduceScatter, send, recv, recvcount, t, op, premul.value, -1);
  }
  std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) override {
    check_dtype(t);
    need(send, recv, sendcount);
    return post(Collective::AllGather, send, recv, sendcount, t, RedOp::Sum, 1.0, -1);
  }
  std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) override {
    check_dtype(t);
    check_rank(root, "root");
    need(rank_ == root ? send : recv, recv, count);
    return post(Collective::Broadcast, send, recv, count, t, RedOp::Sum, 1.0, root);
  }
  std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                               PreMul premul) override {
    check_op(t, op);
    check_rank(root, "root");
    need(send, rank_ == root ? recv : send, count);
    return post(Collective::Reduce, send, recv, count, t, op, premul.value, root);
  }
  std::shared_ptr<Work> send(const void* buf, size_t count, DataType t, int peer) override {
    return inner_->send(buf, count, t, peer);
  }
  std::shared_ptr<Work> recv(void* buf, size_t count, DataType t, int peer) override {
    return inner_->recv(buf, count, t, peer);
  }
  void barrier() override {
    if (group_depth_ > 0) throw CommError(Result::InvalidUsage, backend() + ": barrier inside a group");
    post(Collective::Barrier, nullptr, nullptr, 0, DataType::Uint8, RedOp::Sum, 1.0, -1)->wait();
  }
  void group_start() override {
    inner_->group_start();
    ++group_depth_;
  }
  void group_end() override {
    inner_->group_end();  // refuses an end without a start
    --group_depth_;
  }

  // Runs the pending operations, in order, until `op` is done: waiting for the others up to
  // `until` (block), or as far as they can go without waiting (!block). True once `op` is done
  // (then throws its error, if it failed, unless !rethrow).
  bool advance(Op& op, Clock::time_point until, bool block, bool rethrow = true) {
    std::lock_guard<std::mutex> lk(mu_);
    while (!op.done && !pending_.empty()) {
      Op& front = *pending_.front();
      bool finished = false;
      try {
        finished = run(front, until, block);
      } catch (...) {
        fail_all(std::current_exception());
        break;
      }
      if (!finished) break;
      front.done = true;
      pending_.pop_front();
    }
    if (op.done && op.error && rethrow) std::rethrow_exception(op.error);
    return op.done;
  }

  void wait(Op& op) {
    if (advance(op, op.deadline, true)) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (!op.done) {
      const Op& at = pending_.empty() ? op : *pending_.front();  // the operation that waits
      std::ostringstream os;
      os << backend() << ": " << op.what << ": timed out after " << timeout_.count()
         << " ms in shared memory, waiting for";
      const char* sep = " rank ";
      for (int j = 0; j < size_; ++j)
        if (j != rank_ && !there(j, at)) {
          os << sep << j << " (pid " << ctl_[j].pid.load() << ")";
          sep = ", rank ";
        }
      fail_all(std::make_exception_ptr(CommError(Result::Timeout, os.str())));
    }
    if (op.error) std::rethrow_exception(op.error);
  }

 private:
  static void need(const void* a, const void* b, size_t count) {
    if (count > 0 && (a == nullptr || b == nullptr)) throw CommError(Result::InvalidArgument, "gloo: NULL buffer");
  }
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= size_)
      throw CommError(Result::InvalidArgument, backend() + ": " + what + " " + std::to_string(r) +
                                                   " is not a rank of a " + std::to_string(size_) + "-rank world");
  }

  std::shared_ptr<Work> post(Collective k, const void* send, void* recv, size_t count, DataType t, RedOp op,
                             double premul, int root) {
    auto o = std::make_shared<Op>();
    o->kind = k;
    o->send = static_cast<const uint8_t*>(send);
    o->recv = static_cast<uint8_t*>(recv);
    o->count = count;
    o->t = t;
    o->op = op;
    o->premul = premul;
    o->root = root;
    o->es = dtype_size(t);
    const size_t per_slot = slot_ / o->es;
    o->per_chunk = k == Collective::ReduceScatter ? per_slot / static_cast<size_t>(size_) : per_slot;
    o->chunks = count == 0 ? 1 : (count + o->per_chunk - 1) / o->per_chunk;
    o->posted = Clock::now();
    o->deadline = o->posted + timeout_;
    o->what = k == Collective::Barrier ? "barrier" : std::string(collective_name(k)) + " of " + std::to_string(count) + " " + dtype_name(t);
    o->what += " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (broken_) std::rethrow_exception(broken_);
      o->number = ++numbers_;
      pending_.push_back(o);
    }
    // what can start now (copying in), without waiting; inside a group nothing starts before
    // group_end, whose buffers may be filled until then (as NCCL's)
    if (group_depth_ == 0) advance(*o, o->posted, false, false);
    return std::make_shared<ShmWork>(shared_from_this(), o);
  }

  // Every pending operation fails with `e`, and so does every later one.
  void fail_all(std::exception_ptr e) {
    broken_ = e;
    for (auto& p : pending_) {
      p->error = e;
      p->done = true;
    }
    pending_.clear();
  }

  uint8_t* slot(uint64_t seq, int r) const {
    return base_ + slots_offset(static_cast<size_t>(size_)) + ((seq & 1) * static_cast<size_t>(size_) + static_cast<size_t>(r)) * slot_;
  }
  // Whether process j copied in the chunk `op` is at.
  bool there(int j, const Op& op) const { return ctl_[j].arrived.load(std::memory_order_acquire) >= op.seq; }
  bool all_arrived(uint64_t seq) const {
    for (int j = 0; j < size_; ++j)
      if (ctl_[j].arrived.load(std::memory_order_acquire) < seq) return false;
    return true;
  }
  bool all_reduced(uint64_t seq) const {
    for (int j = 0; j < size_; ++j)
      if (ctl_[j].reduced.load(std::memory_order_acquire) < seq) return false;
    return true;
  }
  void announce() {
    hdr_->epoch.fetch_add(1);
    if (hdr_->sleepers.load() > 0) futex(&hdr_->epoch, FUTEX_WAKE, INT_MAX, nullptr);
  }
  // Waits until `ready` or `until`: spins a moment, then sleeps on the segment's futex.
  template <class Ready>
  bool await(Ready ready, Clock::time_point until) {
    if (ready()) return true;
    auto now = Clock::now();
    if (now >= until) return false;
    const auto spin_until = std::min(until, now + kSpin);
    while (Clock::now() < spin_until) {
      for (int i = 0; i < 32; ++i) cpu_relax();
      if (ready()) return true;
    }
    for (;;) {
      const uint32_t e = hdr_->epoch.load();
      hdr_->sleepers.fetch_add(1);
      bool ok = ready();
      if (!ok) {
        now = Clock::now();
        if (now >= until) {
          hdr_->sleepers.fetch_sub(1);
          return false;
        }
        const auto left = std::min<Clock::duration>(until - now, Ms(50));
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
        futex(&hdr_->epoch, FUTEX_WAIT, e, &ts);
      }
      hdr_->sleepers.fetch_sub(1);
      if (ok || ready()) return true;
    }
  }

  // The part [b, e) of a chunk of `len` elements that process j reduces: 1/n each, in whole
  // cache lines.
  std::pair<size_t, size_t> part(const Op& o, size_t len, int j) const {
    const size_t align = std::max<size_t>(1, kLine / o.es);
    const size_t n = static_cast<size_t>(size_);
    const size_t q = ((len + n - 1) / n + align - 1) / align * align;
    const size_t b = std::min(len, static_cast<size_t>(j) * q);
    return {b, std::min(len, b + q)};
  }

  // Runs `o` as far as `until` allows; true once it is complete.
  bool run(Op& o, Clock::time_point until, bool block) {
    const Clock::time_point limit = block ? until : Clock::time_point::min();
    const size_t es = o.es, n = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
    while (o.chunk < o.chunks) {
      const size_t off = o.chunk * o.per_chunk;
      const size_t len = o.count == 0 ? 0 : std::min(o.per_chunk, o.count - off);
      if (o.phase == 0) {  // copy in, and say so
        o.seq = ++seq_;
        uint8_t* mine = slot(o.seq, rank_);
        switch (o.kind) {
          case Collective::AllReduce:
          case Collective::Reduce: {  // the parts the others reduce (this one's own is read from send)
            const auto [b, e] = part(o, len, rank_);
            if (b) std::memcpy(mine, o.send + off * es, b * es);
            if (len > e) std::memcpy(mine + e * es, o.send + (off + e) * es, (len - e) * es);
            break;
          }
          case Collective::AllGather:
            if (len) std::memcpy(mine, o.send + off * es, len * es);
            break;
          case Collective::Broadcast:
            if (rank_ == o.root && len) {
              std::memcpy(mine, o.send + off * es, len * es);
              if (o.send != o.recv) std::memmove(o.recv + off * es, o.send + off * es, len * es);
            }
            break;
          case Collective::ReduceScatter:
            for (size_t j = 0; j < n && len; ++j) std::memcpy(mine + j * len * es, o.send + (j * o.count + off) * es, len * es);
            break;
          default:
            break;
        }
        Print& p = ctl_[rank_].print[o.seq & 1];
        p.number = o.number;
        p.chunk = o.chunk;
        p.count = o.count;
        p.kind = static_cast<int32_t>(o.kind);
        p.dtype = o.kind == Collective::Barrier ? 0 : static_cast<int32_t>(o.t);
        p.op = collective_has_op(o.kind) ? static_cast<int32_t>(o.op) : 0;
        p.root = collective_has_root(o.kind) ? o.root : -1;
        ctl_[rank_].arrived.store(o.seq, std::memory_order_release);
        announce();
        o.phase = 1;
      }
      if (o.phase == 1) {
        if (!await([&] { return all_arrived(o.seq); }, limit)) return false;
        const Print& mine = ctl_[rank_].print[o.seq & 1];
        for (int j = 0; j < size_; ++j)
          if (!(ctl_[j].print[o.seq & 1] == mine)) return mismatch(o, limit);
        const uint8_t* srcs[64];
        std::vector<const uint8_t*> many;
        const uint8_t** src = srcs;
        if (n > 64) {
          many.resize(n);
          src = many.data();
        }
        switch (o.kind) {
          case Collective::AllReduce:
          case Collective::Reduce: {
            // this process's part, in rank order, its own input read where it is: all_reduce
            // writes it into recv and then its slot (for the others), reduce into its slot
            const auto [b, e] = part(o, len, rank_);
            for (size_t j = 0; j < n; ++j) src[j] = j == me ? o.send + off * es : slot(o.seq, static_cast<int>(j));
            uint8_t* dst = o.kind == Collective::AllReduce ? o.recv + off * es : slot(o.seq, rank_);
            if (e > b) {
              ::accel::comm::reduce(dst, reinterpret_cast<const void* const*>(src), size_, b, e, o.t, o.op, o.premul);
              if (o.kind == Collective::AllReduce) std::memcpy(slot(o.seq, rank_) + b * es, dst + b * es, (e - b) * es);
            }
            ctl_[rank_].reduced.store(o.seq, std::memory_order_release);
            announce();
            o.phase = 2;
            break;
          }
          case Collective::Broadcast:
            if (rank_ != o.root && len) std::memcpy(o.recv + off * es, slot(o.seq, o.root), len * es);
            o.phase = 3;
            break;
          case Collective::AllGather:
            for (size_t j = 0; j < n && len; ++j) std::memcpy(o.recv + (j * o.count + off) * es, slot(o.seq, static_cast<int>(j)), len * es);
            o.phase = 3;
            break;
          case Collective::ReduceScatter:
            for (size_t j = 0; j < n; ++j) src[j] = slot(o.seq, static_cast<int>(j)) + me * len * es;
            if (len)
              ::accel::comm::reduce(o.recv + off * es, reinterpret_cast<const void* const*>(src), size_, 0, len, o.t, o.op, o.premul);
            o.phase = 3;
            break;
          default:
            o.phase = 3;
            break;
        }
      }
      if (o.phase == 2) {
        if (!await([&] { return all_reduced(o.seq); }, limit)) return false;
        if (o.kind == Collective::AllReduce || rank_ == o.root)
          for (int j = 0; j < size_; ++j) {
            if (o.kind == Collective::AllReduce && j == rank_) continue;  // in recv already
            const auto [b, e] = part(o, len, j);
            if (e > b) std::memcpy(o.recv + (off + b) * es, slot(o.seq, j) + b * es, (e - b) * es);
          }
        o.phase = 3;
      }
      ++o.chunk;
      o.phase = 0;
    }
    return true;
  }

  // The processes' chunks differ: their buffers are never combined. Under the guard
  // (comm/guard.h), which names the calls of every process within seconds, this process waits
  // as Gloo would; without it, the mismatch fails here.
  bool mismatch(const Op& o, Clock::time_point until) {
    if (comm_check_enabled()) {  // a wait that cannot end: it takes the time it was given
      std::this_thread::sleep_until(until);
      return false;
    }
    std::ostringstream os;
    const Print& mine = ctl_[rank_].print[o.seq & 1];
    os << backend() << ": " << describe(mine) << " (rank " << rank_ << " of " << size_ << "): mismatched collectives at call #"
       << mine.number << ":";
    for (int j = 0; j < size_; ++j) os << " rank " << j << " called " << describe(ctl_[j].print[o.seq & 1]) << ";";
    os << " every rank must make the same calls in the same order";
    throw CommError(Result::InvalidUsage, os.str());
  }

  std::shared_ptr<Communicator> inner_;
  Ms timeout_;
  int rank_, size_;
  uint8_t* base_;
  size_t bytes_;
  Header* hdr_;
  Control* ctl_;
  size_t slot_;
  int group_depth_ = 0;

  std::mutex mu_;  // guards what follows
  std::deque<std::shared_ptr<Op>> pending_;
  uint64_t numbers_ = 0, seq_ = 0;
  std::exception_ptr broken_;
};

void ShmWork::wait() { c_->wait(*op_); }
bool ShmWork::test() { return c_->advance(*op_, Clock::now(), false, false); }
bool ShmWork::wait_for(std::chrono::milliseconds d) { return c_->advance(*op_, Clock::now() + d, true); }

std::string errno_text(const std::string& what) { return what + ": " + text::errno_text(errno); }

}  // namespace

std::shared_ptr<Communicator> shared_memory_collectives(std::shared_ptr<Communicator> inner, Ms timeout) {
  const Mode mode = shm_mode();
  if (mode == Mode::Off || !inner || inner->size() <= 1 || !inner->store()) return inner;
  Store& store = *inner->store();
  const int rank = inner->rank(), n = inner->size();
  const std::string key = "accel/shm/segment";

  // One pid space (one machine and pid namespace): what each process said of itself.
  std::string why;
  std::string space0;
  for (int j = 0; j < n && why.empty(); ++j) {
    std::string space;
    try {
      space = joined(store, j)["pidspace"];
    } catch (...) {
    }
    if (space.empty()) why = "rank " + std::to_string(j) + " does not know its pid space (/proc)";
    else if (j == 0) space0 = space;
    else if (space != space0) why = "rank " + std::to_string(j) + " is on another machine or in another pid namespace";
  }

  const size_t nn = static_cast<size_t>(n);
  const size_t slot = kSlotBytes, total = segment_bytes(nn, slot);
  uint8_t* base = nullptr;
  int fd = -1;
  if (rank == 0) {
    if (why.empty()) {
      fd = ::memfd_create("accel-gloo-shm", MFD_CLOEXEC);
      if (fd < 0) why = errno_text("memfd_create");
      else if (::ftruncate(fd, static_cast<off_t>(total)) != 0) why = errno_text("ftruncate of the segment");
      if (why.empty()) {
        void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) why = errno_text("mmap of the segment");
        else base = static_cast<uint8_t*>(p);
      }
      if (base) {
        auto* h = new (base) Header();
        h->magic = kMagic;
        h->size = nn;
        h->slot_bytes = slot;
        h->total = total;
        for (size_t j = 0; j < nn; ++j) new (base + controls_offset() + j * sizeof(Control)) Control();
      }
    }
    const std::string v = why.empty() ? std::to_string(::getpid()) + " " + std::to_string(fd) + " " + std::to_string(total) : "none";
    store.set(key, Bytes(v.begin(), v.end()));
  } else {
    const std::string v = store.get_string(key);
    std::istringstream in(v);
    long pid = 0;
    int their = -1;
    size_t bytes = 0;
    if (v == "none") {
      if (why.empty()) why = "rank 0 could not make the segment";
    } else if (!(in >> pid >> their >> bytes) || bytes != total) {
      why = "rank 0 described the segment as '" + v + "'";
    } else if (why.empty()) {
      const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(their);
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) why = errno_text("open " + path);
      if (why.empty()) {
        void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) why = errno_text("mmap of the segment");
        else base = static_cast<uint8_t*>(p);
      }
      if (base) {
        const auto* h = reinterpret_cast<const Header*>(base);
        if (h->magic != kMagic || h->size != nn || h->slot_bytes != slot) why = "the segment is not this world's";
      }
      if (fd >= 0) ::close(fd);
    }
  }
  // Every process says whether it can; all use the segment, or none does.
  const std::string mine = why.empty() ? "ok" : why;
  store.set("accel/shm/ready/" + std::to_string(rank), Bytes(mine.begin(), mine.end()));
  std::string refusal;
  for (int j = 0; j < n; ++j) {
    const std::string v = store.get_string("accel/shm/ready/" + std::to_string(j));
    if (v != "ok" && refusal.empty()) refusal = "rank " + std::to_string(j) + ": " + v;
  }
  if (rank == 0 && fd >= 0) ::close(fd);  // everyone mapped it (or gave up): the mappings keep it
  if (!refusal.empty()) {
    if (base) ::munmap(base, total);
    if (mode == Mode::On)
      throw CommError(Result::SystemError, "ACCEL_GLOO_SHM=1: the processes cannot share memory (" + refusal +
                                               "); unset it to use Gloo's own transport");
    return inner;
  }
  return std::make_shared<ShmCommunicator>(std::move(inner), timeout, base, total);
}

}  // namespace accel::comm
