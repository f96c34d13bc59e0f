// NCCL's C API, simulated across processes on one machine: libaccel-nccl-sim.so. It exports
// the functions of nccl.h and of the CUDA runtime that accel's nccl backend calls, with
// their names, types and semantics (sim/nccl_abi.h), over host memory: the backend runs
// against it exactly as against libnccl (ACCEL_BACKEND=sim loads it in libnccl's place).
//
// - ncclGetUniqueId starts a coordinator thread in the calling process (as NCCL's bootstrap
//   root); the unique id names its Unix socket. Each rank connects, says who it is and how
//   it is configured; the coordinator checks that the ranks agree (world size, topology,
//   memory budget), then hands every rank one shared-memory segment (a memfd) and watches
//   the connections: a rank whose connection closes has exited or died, and every rank
//   waiting for it fails naming it.
// - A stream is a thread executing what was enqueued on it, in order; events mark points of
//   a stream; the default stream is the host (always complete).
// - Collectives move data through the segment: each rank copies its input into its slot,
//   a barrier, then each reduces its share of the elements in rank order (the kernels of the
//   in-process simulator, so the results are bit-identical to it), a barrier, then each
//   copies out. At the first barrier every rank compares every rank's call (the
//   fingerprint): a mismatch fails all of them with the calls named. Send/recv go through
//   one ring buffer per (sender, receiver) pair.
// - Virtual clocks and the cost model (sim/cost.h), a Chrome trace, per-process memory
//   budgets, fault injection, and a report file, as the in-process simulator has; the
//   settings come from the environment (ACCEL_SIM_*; docs/simulator.md, docs/launch.md).
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/files.h"
#include "base/text.h"
#include "runtime/comm/kernels.h"
#include "sim/cost.h"
#include "sim/faults.h"
#include "sim/nccl_abi.h"
#include "sim/trace.h"

#define ACCEL_SIM_EXPORT extern "C" __attribute__((visibility("default")))

using namespace accel::nccl_abi;
namespace comm = accel::comm;
namespace files = accel::files;
namespace text = accel::text;
namespace sim = accel::sim;

namespace {

using Clock = std::chrono::steady_clock;
constexpr char kIdMagic[] = "ACCELSIM1";
constexpr uint64_t kShmMagic = 0x6163636c73696d31ull;  // "accelsim1"
constexpr size_t kNote = 512, kDesc = 192;
constexpr uint64_t kSlotBytes = 16ull << 20;  // per rank: the chunk a collective moves at once
constexpr uint64_t kBoxBytes = 1ull << 20;    // per (sender, receiver) pair

// ---------------------------------------------------------------------------------------
// Small helpers

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void copy_text(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}


// Writes `text` to `path` through a temporary file and a rename (base/files.h): a reader (the
// launcher) never sees half. The first failure is said on stderr (the launcher then reports
// the file missing or stale, and why is here); the report is rewritten at every step.
void write_atomically(const std::string& path, const std::string& text) {
  static std::atomic<bool> said{false};
  if (files::Result r = files::write_atomic(path, text, files::Durability::Replace); !r && !said.exchange(true))
    std::fprintf(stderr, "accel-nccl-sim: %s\n", r.message.c_str());
}

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

comm::DataType dtype_of(ncclDataType_t t) { return static_cast<comm::DataType>(static_cast<int>(t)); }

bool valid_dtype(ncclDataType_t t) { return static_cast<int>(t) >= 0 && static_cast<int>(t) <= 9; }

// ---------------------------------------------------------------------------------------
// The shared segment

struct alignas(64) RankBlock {
  std::atomic<uint64_t> phase;  // barrier phases this rank has reached
  std::atomic<uint32_t> state;  // 0 alive, 1 exited, 2 died, 3 aborted
  uint32_t pid;
  // the collective this rank is in (read by the others between its two first barriers)
  uint64_t seq, count;
  int32_t kind, dtype, op, root;
  double ready;  // its virtual time when the collective could start on this rank
  uint64_t send_addr, recv_addr;  // its buffers in its own address space (direct access)
  uint64_t probe_addr;            // a word the others read at init to test direct access
  std::atomic<uint32_t> direct;   // 0 not yet known, 1 it can read its successor's memory, 2 it cannot
  char now[kDesc];   // what its stream does or last did
  char note[kNote];  // why it is gone, or its last error
};

struct alignas(64) Mailbox {
  std::atomic<uint64_t> written;
  char pad1[56];
  std::atomic<uint64_t> read;
  char pad2[56];
};

struct Header {
  uint64_t magic;
  int32_t n;
  uint64_t slot_bytes, box_bytes;
  alignas(64) std::atomic<uint32_t> bell;  // rung at every change anybody waits for
};

struct Layout {
  size_t blocks, boxes, slots, result, data, total;
  Layout(int n, uint64_t slot, uint64_t box) {
    auto up = [](size_t x) { return (x + 4095) & ~size_t(4095); };
    blocks = up(sizeof(Header));
    boxes = blocks + up(sizeof(RankBlock) * n);
    slots = boxes + up(sizeof(Mailbox) * n * n);
    result = slots + slot * n;
    data = result + slot;
    total = data + box * n * n;
  }
};

// ---------------------------------------------------------------------------------------
// The process: settings, clocks, memory, trace, report (one rank per process)

enum Kind { kAllReduce = 0, kReduceScatter, kAllGather, kBroadcast, kReduce, kSend, kRecv };
const char* kind_name(int k) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "send", "recv"};
  return k >= 0 && k <= kRecv ? names[k] : "?";
}
sim::CollKind coll_kind(int k) {
  switch (k) {
    case kAllReduce: return sim::CollKind::AllReduce;
    case kReduceScatter: return sim::CollKind::ReduceScatter;
    case kAllGather: return sim::CollKind::AllGather;
    case kBroadcast: return sim::CollKind::Broadcast;
    case kReduce: return sim::CollKind::Reduce;
    default: return sim::CollKind::SendRecv;
  }
}

struct Process {
  std::mutex mu;
  bool configured = false;
  std::string config_error;  // a bad ACCEL_SIM_* variable
  std::string topology_name = "8xH100", gpu_mem_text, faults_text, out_dir;
  bool trace = false;
  sim::Topology topo;
  uint64_t capacity = 0, current = 0, peak = 0;
  std::map<void*, uint64_t> allocations;  // cudaMalloc's
  int rank = -1, world = 0;
  double compute_t = 0.0, comm_t = 0.0;
  int64_t steps = 0;
  uint64_t collectives = 0, bytes_sent = 0;
  std::vector<sim::TraceEvent> events;
  std::vector<sim::Fault> faults;
  double delay = 0.0;
  std::string status = "ok", error;
  bool exit_hook = false;

  // Reads ACCEL_SIM_* once.
  void configure() {
    if (configured) return;
    configured = true;
    try {
      if (!env("ACCEL_SIM_TOPOLOGY").empty()) topology_name = env("ACCEL_SIM_TOPOLOGY");
      topo = sim::topology_preset(topology_name);
      gpu_mem_text = env("ACCEL_SIM_GPU_MEM");
      if (!gpu_mem_text.empty()) capacity = text::parse_bytes(gpu_mem_text, "ACCEL_SIM_GPU_MEM");
      faults_text = env("ACCEL_SIM_FAULTS");
      // faults fire on the first attempt only: a restarted group resumes past them
      const std::string restart = env("ACCEL_RESTART_COUNT");
      if (!faults_text.empty() && (restart.empty() || restart == "0")) faults = sim::parse_faults(faults_text);
      out_dir = env("ACCEL_SIM_OUT");
      trace = env("ACCEL_SIM_TRACE") == "1";
    } catch (const std::exception& e) {
      config_error = e.what();
    }
  }

  double now() const { return std::max(compute_t, comm_t); }

  // The report file (ACCEL_SIM_OUT/rank-R.json); and, with `trace_too`, the trace
  // (trace-R.json), which grows with the run: written at exit or at a fault only.
  void write_files(bool trace_too = true) {
    if (out_dir.empty() || rank < 0) return;
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  "{\"rank\":%d,\"world_size\":%d,\"topology\":\"%s\",\"status\":\"%s\",\"error\":\"%s\","
                  "\"peak_bytes\":%llu,\"capacity_bytes\":%llu,\"virtual_seconds\":%.9f,\"compute_seconds\":%.9f,"
                  "\"comm_seconds\":%.9f,\"steps\":%lld,\"collectives\":%llu,\"bytes_sent\":%llu}\n",
                  rank, world, text::json_escape(topology_name).c_str(), status.c_str(), "%s",
                  static_cast<unsigned long long>(peak), static_cast<unsigned long long>(capacity), now(), compute_t,
                  comm_t, static_cast<long long>(steps), static_cast<unsigned long long>(collectives),
                  static_cast<unsigned long long>(bytes_sent));
    std::string text = buf;
    const auto at = text.find("%s");
    text.replace(at, 2, text::json_escape(error));
    write_atomically(out_dir + "/rank-" + std::to_string(rank) + ".json", text);
    if (!trace || !trace_too) return;
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(3);
    os << "[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << rank << ",\"args\":{\"name\":\"rank " << rank << "\"}},\n"
       << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << rank << ",\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
       << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << rank << ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
    // in time order per lane: the host and the stream thread append in whatever order they ran
    std::vector<sim::TraceEvent> ev = events;
    std::stable_sort(ev.begin(), ev.end(), [](const sim::TraceEvent& x, const sim::TraceEvent& y) {
      return std::tie(x.lane, x.ts, x.dur, x.name) < std::tie(y.lane, y.ts, y.dur, y.name);
    });
    for (const auto& e : ev)
      os << ",\n{\"ph\":\"X\",\"name\":\"" << text::json_escape(e.name) << "\",\"cat\":\"" << (e.lane ? "comm" : "compute")
         << "\",\"pid\":" << rank << ",\"tid\":" << e.lane << ",\"ts\":" << e.ts * 1e6 << ",\"dur\":" << e.dur * 1e6
         << ",\"args\":{" << e.args << "}}";
    os << "]\n";
    write_atomically(out_dir + "/trace-" + std::to_string(rank) + ".json", os.str());
  }

  void record_error(const std::string& e) {
    if (status == "ok") status = "failed";
    if (error.empty()) error = e;
  }
};

Process& proc() {
  static Process* p = new Process();  // never destroyed: threads may outlive static destruction
  return *p;
}

// ---------------------------------------------------------------------------------------
// Streams and events

struct EventState {
  std::atomic<bool> done{true};
  double vt = 0.0;  // the virtual time of the stream at the event
};

struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<bool()>> tasks;  // false: the stream failed and stops (as a faulted GPU)
  bool stop = false, stuck = false;
  std::thread worker;

  StreamState() {
    worker = std::thread([this] { run(); });
  }
  void enqueue(std::function<bool()> t) {
    {
      std::lock_guard<std::mutex> lk(mu);
      tasks.push_back(std::move(t));
    }
    cv.notify_one();
  }
  void run() {
    for (;;) {
      std::function<bool()> t;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || (!tasks.empty() && !stuck); });
        if (stop) return;
        t = std::move(tasks.front());
        tasks.pop_front();
      }
      if (!t()) {
        std::lock_guard<std::mutex> lk(mu);
        stuck = true;
      }
    }
  }
  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_one();
    if (worker.joinable()) worker.join();
  }
};

struct EventHandle {
  std::shared_ptr<EventState> s = std::make_shared<EventState>();
};
struct StreamHandle {
  StreamState* s = new StreamState();
};

// ---------------------------------------------------------------------------------------
// The communicator

struct Call {
  int kind = kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t dtype = ncclFloat32;
  comm::RedOp op = comm::RedOp::Sum;
  double premul = 1.0;
  int root = 0, peer = -1;
  uint64_t seq = 0;  // collectives: 1-based number; p2p: per pair
  std::string describe() const {
    std::ostringstream os;
    os << kind_name(kind);
    if (kind < kSend) os << " #" << seq;
    os << "(count=" << count << ", " << comm::dtype_name(dtype_of(dtype));
    if (kind == kAllReduce || kind == kReduceScatter || kind == kReduce) os << ", " << comm::op_name(op);
    if (kind == kBroadcast || kind == kReduce) os << ", root=" << root;
    if (kind == kSend) os << ", to rank " << peer;
    if (kind == kRecv) os << ", from rank " << peer;
    os << ")";
    return os.str();
  }
};

struct Coordinator;

}  // namespace

struct accel::nccl_abi::ncclComm {
  int rank = 0, n = 0;
  std::atomic<int> async{ncclInProgress};
  std::mutex mu;
  std::string last_error;
  std::atomic<bool> aborted{false}, coordinator_gone{false};
  int sock = -1;
  std::thread init_thread, watcher;
  char* base = nullptr;
  size_t size = 0;
  Header* hdr = nullptr;
  RankBlock* blocks = nullptr;
  Mailbox* boxes = nullptr;
  char* slots = nullptr;
  char* result = nullptr;
  char* box_data = nullptr;
  uint64_t slot_bytes = 0, box_bytes = 0;
  uint64_t phase = 0;     // the barrier phases this rank has passed (the stream's)
  bool direct = false;    // collectives may read and write the peers' buffers (process_vm_readv/writev)
  uint64_t direct_from = 16ull << 20;  // ... those of this many bytes per rank and more
  uint64_t coll_seq = 0;  // collectives posted (host side)
  std::map<int, uint64_t> send_seq, recv_seq;
  std::map<int, std::pair<double, ncclDataType_t>> premul_ops;  // PreMulSum operators
  int next_op = ncclNumOps;
  std::shared_ptr<Coordinator> coordinator;  // on the process that made the unique id

  void set_error(ncclResult_t r, const std::string& msg) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (last_error.empty()) last_error = msg;
    }
    int expected = ncclSuccess;
    async.compare_exchange_strong(expected, r);
    expected = ncclInProgress;
    async.compare_exchange_strong(expected, r);
    std::lock_guard<std::mutex> lk(proc().mu);
    proc().record_error(msg);
  }
  void ring() {
    if (!hdr) return;
    hdr->bell.fetch_add(1);
    futex(&hdr->bell, FUTEX_WAKE, INT32_MAX, nullptr);
  }
  RankBlock& me() { return blocks[rank]; }
  void set_now(const std::string& s) { copy_text(me().now, kDesc, s); }
};

namespace {

// Why rank q cannot take part any more ("" while it can).
std::string gone(ncclComm* c, int q) {
  const uint32_t st = c->blocks[q].state.load();
  if (st == 0) return "";
  const std::string note = c->blocks[q].note;
  std::string s = "rank " + std::to_string(q);
  if (st == 1) s += " exited (its process ended)";
  if (st == 2) s += " died (its process was killed or crashed)";
  if (st == 3) s += " aborted its communicator";
  if (!note.empty()) s += ": " + note;
  return s;
}

// Waits until pred() holds; false with `why` set when a rank it needs is gone, this
// communicator was aborted or the coordinator is gone.
template <class P>
bool wait_until(ncclComm* c, P&& pred, const std::vector<int>& needs, std::string& why) {
  int spins = 0;
  for (;;) {
    if (pred()) return true;
    if (c->aborted.load()) {
      why = "the communicator was aborted";
      return false;
    }
    for (int q : needs) {
      std::string g = gone(c, q);
      if (!g.empty()) {
        // it may have done its part just before it left (arrived at the barrier, filled the
        // buffer): only what is still missing after that is a failure
        if (pred()) return true;
        why = g;
        return false;
      }
    }
    if (c->coordinator_gone.load()) {
      if (pred()) return true;
      why = "the coordinator (in rank 0's process) is gone: rank 0 exited or was killed";
      return false;
    }
    if (++spins < 64) {
      std::this_thread::yield();
      continue;
    }
    const uint32_t b = c->hdr->bell.load();
    if (pred()) return true;
    timespec ts{0, 20 * 1000 * 1000};
    futex(&c->hdr->bell, FUTEX_WAIT, b, &ts);
  }
}

std::vector<int> everyone(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

// A barrier phase of every rank.
bool barrier(ncclComm* c, std::string& why) {
  const uint64_t k = ++c->phase;
  c->me().phase.store(k);
  c->ring();
  return wait_until(
      c,
      [&] {
        for (int q = 0; q < c->n; ++q)
          if (c->blocks[q].phase.load() < k) return false;
        return true;
      },
      everyone(c->n), why);
}

// The fingerprint: what every rank must agree on for one collective number.
bool same_call(const RankBlock& a, const RankBlock& b) {
  if (a.kind != b.kind || a.count != b.count || a.dtype != b.dtype || a.seq != b.seq) return false;
  if ((a.kind == kAllReduce || a.kind == kReduceScatter || a.kind == kReduce) && a.op != b.op) return false;
  if ((a.kind == kBroadcast || a.kind == kReduce) && a.root != b.root) return false;
  return true;
}

std::string describe_block(const RankBlock& b) {
  Call c;
  c.kind = b.kind;
  c.count = b.count;
  c.dtype = static_cast<ncclDataType_t>(b.dtype);
  c.op = static_cast<comm::RedOp>(b.op);
  c.root = b.root;
  c.seq = b.seq;
  return c.describe();
}

void fail_call(ncclComm* c, ncclResult_t r, const Call& call, const std::string& why) {
  const std::string msg = call.describe() + " on rank " + std::to_string(c->rank) + " of " + std::to_string(c->n) +
                          " failed: " + why;
  c->set_error(r, msg);
  copy_text(c->me().note, kNote, msg);
}

// Charges a finished operation to the virtual clock and the trace.
void account(ncclComm* c, const Call& call, double ready, double start, double seconds, uint64_t bytes,
             uint64_t sent, const std::string& algorithm) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.comm_t = start + seconds;
  p.bytes_sent += sent;
  if (!p.trace) return;
  std::ostringstream args;
  if (call.kind < kSend)
    args << "\"call\":" << call.seq << ",\"bytes\":" << bytes << ",\"algorithm\":\"" << algorithm << "\"";
  else
    args << "\"peer\":" << call.peer << ",\"bytes\":" << bytes;
  if (start > ready + 1e-12) p.events.push_back({c->rank, 1, "wait", ready, start - ready, ""});
  p.events.push_back({c->rank, 1, kind_name(call.kind), start, seconds, args.str()});
}

// Copies between this process and rank q's memory: its own with memcpy, a peer's with one
// cross-memory-attach call (process_vm_readv / process_vm_writev: the kernel copies between
// the address spaces, as NVLink's peer-to-peer copies do between GPUs).
bool peer_copy(ncclComm* c, int q, void* local, uint64_t remote, size_t bytes, bool write, std::string& why) {
  if (bytes == 0) return true;
  if (q == c->rank) {
    if (write)
      std::memmove(reinterpret_cast<void*>(remote), local, bytes);
    else
      std::memmove(local, reinterpret_cast<const void*>(remote), bytes);
    return true;
  }
  const pid_t pid = static_cast<pid_t>(c->blocks[q].pid);
  size_t done = 0;
  while (done < bytes) {
    iovec l{static_cast<char*>(local) + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t k = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      why = gone(c, q);
      if (why.empty())
        why = std::string(write ? "writing to" : "reading from") + " rank " + std::to_string(q) + "'s buffer: " +
              (k < 0 ? std::strerror(errno) : "nothing copied");
      return false;
    }
    done += static_cast<size_t>(k);
  }
  return true;
}

// A collective by direct access: every rank publishes its buffers' addresses, a barrier (the
// fingerprints are compared), then rank r works on its share, reading the peers' inputs and
// writing the peers' outputs itself, in chunks that stay in cache; a barrier, and every output
// is complete. Each input is read once and each output written once (the in-process
// simulator's traffic). Reductions combine the ranks in rank order with the in-process
// simulator's kernels, so the results are the same bits.
bool run_direct(ncclComm* c, const Call& call, double& start, std::string& why, bool& mismatch) {
  const int n = c->n, me = c->rank;
  const comm::DataType t = dtype_of(call.dtype);
  const size_t es = comm::dtype_size(t);
  const size_t total = call.count;
  constexpr size_t kChunk = 128 << 10;  // bytes per rank per step: the ranks' inputs stay in cache
  const size_t per = std::max<size_t>(1, kChunk / es);
  std::vector<std::vector<char>> in(static_cast<size_t>(n));
  std::vector<const void*> srcs(static_cast<size_t>(n));
  std::vector<char> out;
  // rank q's buffers
  auto send_of = [&](int q) { return c->blocks[q].send_addr; };
  auto recv_of = [&](int q) { return c->blocks[q].recv_addr; };
  // reduces elements [lo, hi) of the buffers whose element 0 is at base(q), chunk by chunk,
  // and hands each reduced chunk to emit(offset, data, elements)
  auto reduce_range = [&](size_t lo, size_t hi, const std::function<uint64_t(int)>& base,
                          const std::function<bool(size_t, const char*, size_t)>& emit) {
    for (size_t off = lo; off < hi; off += per) {
      const size_t len = std::min(per, hi - off);
      for (int q = 0; q < n; ++q) {
        in[q].resize(len * es);
        if (!peer_copy(c, q, in[q].data(), base(q) + off * es, len * es, false, why)) return false;
        srcs[q] = in[q].data();
      }
      out.resize(len * es);
      comm::reduce(out.data(), srcs.data(), n, 0, len, t, call.op, call.premul);
      if (!emit(off, out.data(), len)) return false;
    }
    return true;
  };
  if (!barrier(c, why)) return false;
  for (int q = 0; q < n; ++q)
    if (!same_call(c->blocks[q], c->blocks[0])) {
      mismatch = true;
      return false;
    }
  for (int q = 0; q < n; ++q) start = std::max(start, c->blocks[q].ready);
  bool ok = true;
  switch (call.kind) {
    case kAllReduce:
      ok = reduce_range(total * me / n, total * (me + 1) / n, send_of, [&](size_t off, const char* data, size_t len) {
        for (int q = 0; q < n; ++q)
          if (!peer_copy(c, q, const_cast<char*>(data), recv_of(q) + off * es, len * es, true, why)) return false;
        return true;
      });
      break;
    case kReduceScatter:
      ok = reduce_range(0, total, [&](int q) { return send_of(q) + me * total * es; },
                        [&](size_t off, const char* data, size_t len) {
                          std::memcpy(static_cast<char*>(call.recv) + off * es, data, len * es);
                          return true;
                        });
      break;
    case kReduce:
      ok = reduce_range(total * me / n, total * (me + 1) / n, send_of, [&](size_t off, const char* data, size_t len) {
        return peer_copy(c, call.root, const_cast<char*>(data), recv_of(call.root) + off * es, len * es, true, why);
      });
      break;
    case kAllGather:
      for (int q = 0; q < n && ok; ++q) {
        char* dst = static_cast<char*>(call.recv) + q * total * es;
        if (q == me && dst == static_cast<const char*>(call.send)) continue;
        ok = peer_copy(c, q, dst, send_of(q), total * es, false, why);
      }
      break;
    case kBroadcast:
      if (!(me == call.root && call.recv == call.send))
        ok = peer_copy(c, call.root, call.recv, send_of(call.root), total * es, false, why);
      break;
  }
  if (!ok) return false;
  return barrier(c, why);
}

// One collective on the stream.
bool run_collective(ncclComm* c, const Call& call) {
  auto& p = proc();
  const int n = c->n, me = c->rank;
  const size_t es = comm::dtype_size(dtype_of(call.dtype));
  const comm::DataType t = dtype_of(call.dtype);
  double ready;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    ready = p.comm_t + p.delay;
  }
  RankBlock& b = c->me();
  b.seq = call.seq;
  b.count = call.count;
  b.kind = call.kind;
  b.dtype = call.dtype;
  b.op = static_cast<int>(call.op);
  b.root = call.root;
  b.ready = ready;
  b.send_addr = reinterpret_cast<uint64_t>(call.send);
  b.recv_addr = reinterpret_cast<uint64_t>(call.recv);
  c->set_now(call.describe());
  // Direct access moves half the bytes of staging but costs a system call per chunk and
  // peer: measured on 2 cores (docs/benchmarks.md, bench_sim_processes) it wins from 16 MiB.
  const uint64_t call_bytes =
      call.count * comm::dtype_size(dtype_of(call.dtype)) * (call.kind == kReduceScatter ? c->n : 1);
  if (c->direct && call_bytes >= c->direct_from) {
    std::string why;
    double start = ready;
    bool mismatch = false;
    if (!run_direct(c, call, start, why, mismatch)) {
      if (!mismatch) return fail_call(c, ncclRemoteError, call, why), false;
      std::ostringstream os;
      os << "mismatched collectives: ";
      for (int r = 0; r < c->n; ++r) os << (r ? "; " : "") << "rank " << r << " called " << describe_block(c->blocks[r]);
      return fail_call(c, ncclInvalidUsage, call, os.str()), false;
    }
    const size_t es = comm::dtype_size(dtype_of(call.dtype));
    const uint64_t bytes =
        (call.kind == kAllGather || call.kind == kReduceScatter) ? call.count * es * c->n : call.count * es;
    const sim::Estimate est = sim::collective_cost(p.topo, coll_kind(call.kind), bytes, c->n);
    account(c, call, ready, start, est.seconds, bytes, sim::bytes_sent_per_rank(coll_kind(call.kind), bytes, c->n),
            est.algorithm);
    return true;
  }
  // elements per chunk: what fits in a slot (reduce-scatter: one block's share of a slot)
  const size_t total = call.count;
  const size_t per = std::max<size_t>(1, call.kind == kReduceScatter ? c->slot_bytes / (es * n) : c->slot_bytes / es);
  const size_t chunks = total == 0 ? 1 : (total + per - 1) / per;
  std::string why;
  double start = ready;
  std::vector<const void*> srcs(n);
  for (size_t k = 0; k < chunks; ++k) {
    const size_t off = k * per, len = std::min(per, total - std::min(total, off));
    char* mine = c->slots + static_cast<size_t>(me) * c->slot_bytes;
    const char* send = static_cast<const char*>(call.send);
    char* recv = static_cast<char*>(call.recv);
    // stage this rank's part
    switch (call.kind) {
      case kReduceScatter:
        for (int q = 0; q < n; ++q) std::memcpy(mine + q * len * es, send + (q * total + off) * es, len * es);
        break;
      case kBroadcast:
        if (me == call.root) std::memcpy(mine, send + off * es, len * es);
        break;
      default: std::memcpy(mine, send + off * es, len * es);
    }
    if (!barrier(c, why)) return fail_call(c, ncclRemoteError, call, why), false;
    if (k == 0) {
      for (int q = 0; q < n; ++q)
        if (!same_call(c->blocks[q], c->blocks[0])) {
          std::ostringstream os;
          os << "mismatched collectives: ";
          for (int r = 0; r < n; ++r) os << (r ? "; " : "") << "rank " << r << " called " << describe_block(c->blocks[r]);
          // every rank sees the same blocks and fails with the same message
          return fail_call(c, ncclInvalidUsage, call, os.str()), false;
        }
      for (int q = 0; q < n; ++q) start = std::max(start, c->blocks[q].ready);
    }
    auto slot = [&](int q) { return static_cast<const void*>(c->slots + static_cast<size_t>(q) * c->slot_bytes); };
    switch (call.kind) {
      case kAllReduce: {
        for (int q = 0; q < n; ++q) srcs[q] = slot(q);
        const size_t lo = len * me / n, hi = len * (me + 1) / n;
        comm::reduce(c->result, srcs.data(), n, lo, hi, t, call.op, call.premul);
        break;
      }
      case kReduceScatter:
        for (int q = 0; q < n; ++q) srcs[q] = static_cast<const char*>(slot(q)) + me * len * es;
        comm::reduce(recv + off * es, srcs.data(), n, 0, len, t, call.op, call.premul);
        break;
      case kAllGather:
        for (int q = 0; q < n; ++q) {
          char* dst = recv + (q * total + off) * es;
          if (q != me || dst != send + off * es) std::memcpy(dst, slot(q), len * es);
        }
        break;
      case kBroadcast:
        if (recv + off * es != slot(call.root)) std::memcpy(recv + off * es, slot(call.root), len * es);
        break;
      case kReduce:
        if (me == call.root) {
          for (int q = 0; q < n; ++q) srcs[q] = slot(q);
          comm::reduce(recv + off * es, srcs.data(), n, 0, len, t, call.op, call.premul);
        }
        break;
    }
    if (!barrier(c, why)) return fail_call(c, ncclRemoteError, call, why), false;
    if (call.kind == kAllReduce) std::memcpy(recv + off * es, c->result, len * es);
  }
  // the cost model: nccl-tests' size (the all-gather output, the reduce-scatter input)
  const uint64_t bytes = (call.kind == kAllGather || call.kind == kReduceScatter) ? total * es * n : total * es;
  const sim::Estimate est = sim::collective_cost(p.topo, coll_kind(call.kind), bytes, n);
  account(c, call, ready, start, est.seconds, bytes, sim::bytes_sent_per_rank(coll_kind(call.kind), bytes, n),
          est.algorithm);
  return true;
}

// Send/recv of one group, progressed together (a pair that sends to each other in one
// group must not deadlock). Each message is framed by its byte count and sender's time.
struct P2p {
  Call call;
  uint64_t done = 0, need = 0;  // payload bytes moved; payload bytes in all
  bool header = false;          // the frame's header moved
  double peer_ready = 0;
};

bool run_p2p(ncclComm* c, std::vector<P2p>& ops) {
  auto& p = proc();
  double ready;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    ready = p.comm_t + p.delay;
  }
  struct Frame {
    uint64_t bytes;
    int32_t dtype;
    int32_t pad;
    double ready;
  };
  const uint64_t cap = c->box_bytes;
  for (auto& o : ops) o.need = o.call.count * comm::dtype_size(dtype_of(o.call.dtype));
  // whether some unfinished operation can move now (data to take, room to put)
  auto can_move = [&] {
    for (auto& o : ops) {
      if (o.header && o.done == o.need) continue;
      const bool sending = o.call.kind == kSend;
      const int src = sending ? c->rank : o.call.peer, dst = sending ? o.call.peer : c->rank;
      Mailbox& box = c->boxes[src * c->n + dst];
      const uint64_t used = box.written.load() - box.read.load();
      const uint64_t need = o.header ? 1 : sizeof(Frame);
      if (sending ? cap - used >= need : used >= need) return true;
    }
    return false;
  };
  for (;;) {
    bool progress = false, all = true;
    for (auto& o : ops) {
      const bool sending = o.call.kind == kSend;
      const int src = sending ? c->rank : o.call.peer, dst = sending ? o.call.peer : c->rank;
      Mailbox& box = c->boxes[src * c->n + dst];
      char* ring = c->box_data + (static_cast<size_t>(src) * c->n + dst) * cap;
      auto put = [&](const char* from, uint64_t bytes) {  // whole bytes only; caller checked space
        uint64_t w = box.written.load();
        for (uint64_t i = 0; i < bytes;) {
          const uint64_t at = (w + i) % cap, k = std::min(bytes - i, cap - at);
          std::memcpy(ring + at, from + i, k);
          i += k;
        }
        box.written.store(w + bytes);
      };
      auto take = [&](char* to, uint64_t bytes) {
        uint64_t r = box.read.load();
        for (uint64_t i = 0; i < bytes;) {
          const uint64_t at = (r + i) % cap, k = std::min(bytes - i, cap - at);
          std::memcpy(to + i, ring + at, k);
          i += k;
        }
        box.read.store(r + bytes);
      };
      if (o.header && o.done == o.need) continue;
      all = false;
      const uint64_t used = box.written.load() - box.read.load();
      if (sending) {
        if (!o.header) {
          if (cap - used < sizeof(Frame)) continue;
          Frame f{o.need, o.call.dtype, 0, ready};
          put(reinterpret_cast<const char*>(&f), sizeof f);
          o.header = progress = true;
        } else {
          const uint64_t k = std::min(o.need - o.done, cap - used);
          if (k == 0) continue;
          put(static_cast<const char*>(o.call.send) + o.done, k);
          o.done += k;
          progress = true;
        }
      } else {
        if (!o.header) {
          if (used < sizeof(Frame)) continue;
          Frame f;
          take(reinterpret_cast<char*>(&f), sizeof f);
          o.header = progress = true;
          o.peer_ready = f.ready;
          if (f.bytes != o.need || f.dtype != o.call.dtype) {
            std::ostringstream os;
            os << "mismatched send/recv: rank " << o.call.peer << " sent " << f.bytes << " bytes of "
               << (valid_dtype(static_cast<ncclDataType_t>(f.dtype)) ? comm::dtype_name(dtype_of(static_cast<ncclDataType_t>(f.dtype))) : "?")
               << ", this rank expects " << o.need << " bytes of " << comm::dtype_name(dtype_of(o.call.dtype));
            fail_call(c, ncclInvalidUsage, o.call, os.str());
            return false;
          }
        } else {
          const uint64_t k = std::min(o.need - o.done, used);
          if (k == 0) continue;
          take(static_cast<char*>(o.call.recv) + o.done, k);
          o.done += k;
          progress = true;
        }
      }
    }
    if (all) break;
    if (progress) {
      c->ring();
      continue;
    }
    // nothing moved: wait until something can (a peer that has gone fails the wait only
    // when what it left in the buffer is not enough)
    std::vector<int> peers;  // of the unfinished operations only
    for (auto& o : ops)
      if (!(o.header && o.done == o.need)) peers.push_back(o.call.peer);
    std::string why;
    if (!wait_until(c, can_move, peers, why)) {
      for (auto& o : ops)
        if (!(o.header && o.done == o.need)) return fail_call(c, ncclRemoteError, o.call, why), false;
    }
  }
  for (auto& o : ops) {
    const uint64_t bytes = o.need;
    const double start = o.call.kind == kRecv ? std::max(ready, o.peer_ready) : ready;
    const double secs = sim::p2p_cost(proc().topo, o.call.kind == kSend ? c->rank : o.call.peer,
                                      o.call.kind == kSend ? o.call.peer : c->rank, bytes);
    account(c, o.call, ready, start, secs, bytes, o.call.kind == kSend ? bytes : 0, "direct");
  }
  return true;
}

// What a group (or a single call) runs on the stream: collectives in order, consecutive
// send/recv together.
bool run_calls(ncclComm* c, const std::vector<Call>& calls) {
  if (c->aborted.load()) return false;
  for (size_t i = 0; i < calls.size();) {
    if (calls[i].kind < kSend) {
      if (!run_collective(c, calls[i])) return false;
      ++i;
      continue;
    }
    std::vector<P2p> batch;
    std::string now;
    while (i < calls.size() && calls[i].kind >= kSend) {
      batch.push_back(P2p{calls[i]});
      now += (now.empty() ? "" : ", ") + calls[i].describe();
      ++i;
    }
    c->set_now(now);
    if (!run_p2p(c, batch)) return false;
  }
  c->ring();
  return true;
}

// ---------------------------------------------------------------------------------------
// The coordinator: in the process that made the unique id

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

// A line of text, length-prefixed.
bool send_text(int fd, const std::string& s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  return send_all(fd, &n, 4) && send_all(fd, s.data(), n);
}
bool recv_text(int fd, std::string& s) {
  uint32_t n = 0;
  if (!recv_all(fd, &n, 4) || n > (1u << 20)) return false;
  s.resize(n);
  return recv_all(fd, s.data(), n);
}

struct Coordinator {
  int listen_fd = -1;
  std::string name;  // the abstract socket's name
  std::thread thread;
  std::atomic<bool> finished{false};

  void run(double timeout_s) {
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
      char tag[4] = {'O', 'K', 0, 0};
      iovec iov{tag, sizeof tag};
      char ctrl[CMSG_SPACE(sizeof(int))] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof ctrl;
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &mfd, sizeof(int));
      send_text(p.fd, "OK");
      ::sendmsg(p.fd, &msg, MSG_NOSIGNAL);
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
};

double default_timeout() {
  const std::string t = env("ACCEL_TIMEOUT");
  const double v = t.empty() ? 300.0 : std::atof(t.c_str());
  return v > 0 ? v : 300.0;
}

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

void at_exit();

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
    if (!p.exit_hook) {
      p.exit_hook = true;
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
  static const uint64_t probe = 0x70726f6265636d61ull;
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
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
  c->async = ncclSuccess;
}

std::vector<ncclComm*>& live_comms() {
  static auto* v = new std::vector<ncclComm*>();
  return *v;
}
std::mutex g_comms_mu;

// At exit: say goodbye (the others then know this rank exited rather than died), write the
// report, and keep the coordinator up until every other rank has gone.
void at_exit() {
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

// The thread-local group: calls made between ncclGroupStart and ncclGroupEnd.
struct Pending {
  ncclComm* comm;
  StreamState* stream;
  Call call;
};
thread_local int tl_group_depth = 0;
thread_local std::vector<Pending> tl_group;

ncclResult_t post(ncclComm* c, cudaStream_t stream, Call call) {
  if (!c) return ncclInvalidArgument;
  if (c->aborted.load()) return ncclInvalidUsage;
  const int a = c->async.load();
  if (a != ncclSuccess) return static_cast<ncclResult_t>(a == ncclInProgress ? ncclInvalidUsage : a);
  if (!valid_dtype(call.dtype)) return ncclInvalidArgument;
  auto& p = proc();
  if (call.kind < kSend) {
    call.seq = ++c->coll_seq;
    std::lock_guard<std::mutex> lk(p.mu);
    ++p.collectives;
    for (const auto& f : p.faults)
      if (f.rank == c->rank && f.kind == sim::Fault::Kind::KillAtCollective && f.at == static_cast<int64_t>(call.seq)) {
        const std::string why = "killed by fault injection (kill:" + std::to_string(f.rank) + "@collective:" +
                                std::to_string(f.at) + ") posting " + call.describe();
        copy_text(c->me().note, kNote, why);
        p.status = "killed";
        p.error = why;
        p.write_files();
        std::fflush(nullptr);
        ::raise(SIGKILL);
      }
  } else {
    call.seq = call.kind == kSend ? ++c->send_seq[call.peer] : ++c->recv_seq[call.peer];
  }
  StreamState* s = stream ? reinterpret_cast<StreamHandle*>(stream)->s : nullptr;
  if (!s) return ncclInvalidArgument;  // the legacy default stream: the backend never uses it
  if (tl_group_depth > 0) {
    tl_group.push_back({c, s, std::move(call)});
    return ncclSuccess;
  }
  std::vector<Call> calls{std::move(call)};
  s->enqueue([c, calls] { return run_calls(c, calls); });
  return ncclSuccess;
}

// The reduction operator of a call: a built-in one, or a PreMulSum made for this comm.
bool resolve_op(ncclComm* c, ncclRedOp_t op, ncclDataType_t t, Call& call) {
  const int o = static_cast<int>(op);
  if (o >= 0 && o < ncclNumOps) {
    call.op = static_cast<comm::RedOp>(o);
    try {
      comm::check_op(dtype_of(t), call.op);
    } catch (...) {
      return false;
    }
    return true;
  }
  auto it = c->premul_ops.find(o);
  if (it == c->premul_ops.end() || it->second.second != t) return false;
  call.op = comm::RedOp::PreMulSum;
  call.premul = it->second.first;
  return true;
}

ncclResult_t collective(int kind, const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, cudaStream_t stream) {
  if (!c || !valid_dtype(t)) return ncclInvalidArgument;
  if ((kind == kBroadcast || kind == kReduce) && (root < 0 || root >= c->n)) return ncclInvalidArgument;
  Call call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.dtype = t;
  call.root = root;
  if ((kind == kAllReduce || kind == kReduceScatter || kind == kReduce) && !resolve_op(c, op, t, call))
    return ncclInvalidArgument;
  return post(c, stream, std::move(call));
}

// One side of a send/recv: `buf` is read (kSend) or written (kRecv).
ncclResult_t point_to_point(int kind, void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                            cudaStream_t stream) {
  if (!c || peer < 0 || peer >= c->n) return ncclInvalidArgument;
  Call call;
  call.kind = kind;
  if (kind == kSend)
    call.send = buf;
  else
    call.recv = buf;
  call.count = count;
  call.dtype = t;
  call.peer = peer;
  return post(c, stream, std::move(call));
}

}  // namespace

// ---------------------------------------------------------------------------------------
// nccl.h

ACCEL_SIM_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  return make_unique_id(id);
}

ACCEL_SIM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                                     ncclConfig_t* config) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (std::memcmp(id.internal, kIdMagic, sizeof kIdMagic) != 0) return ncclInvalidArgument;
  const bool blocking = !config || config->blocking != 0;
  auto* c = new ncclComm();
  c->rank = rank;
  c->n = nranks;
  const std::string name(id.internal + 16, strnlen(id.internal + 16, 100));
  {
    std::lock_guard<std::mutex> lk(g_pending_mu);
    if (g_pending && g_pending->name == name) c->coordinator = std::move(g_pending);
  }
  {
    std::lock_guard<std::mutex> lk(g_comms_mu);
    live_comms().push_back(c);
  }
  *out = c;
  c->init_thread = std::thread([c, name] { init_comm(c, name); });
  if (blocking) {
    c->init_thread.join();
    return static_cast<ncclResult_t>(c->async.load());
  }
  c->init_thread.detach();
  return ncclInProgress;
}

ACCEL_SIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, nullptr);
}

ACCEL_SIM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* err) {
  if (!c || !err) return ncclInvalidArgument;
  *err = static_cast<ncclResult_t>(c->async.load());
  return ncclSuccess;
}

ACCEL_SIM_EXPORT const char* ncclGetLastError(ncclComm_t c) {
  static thread_local std::string copy;
  if (!c) return "";
  std::lock_guard<std::mutex> lk(c->mu);
  copy = c->last_error;
  return copy.c_str();
}

ACCEL_SIM_EXPORT const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ACCEL_SIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclSuccess;
  c->aborted = true;
  if (c->blocks) {
    uint32_t zero = 0;
    if (c->me().state.compare_exchange_strong(zero, 3u)) {
      std::lock_guard<std::mutex> lk(c->mu);
      if (!c->last_error.empty() && c->me().note[0] == 0) copy_text(c->me().note, kNote, c->last_error);
    }
    c->ring();
  }
  if (c->sock >= 0) send_text(c->sock, "BYE abort");
  // the communicator is left allocated: the stream threads may still look at it
  return ncclSuccess;
}

ACCEL_SIM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  return ncclSuccess;  // operations are complete once their events have passed
}

ACCEL_SIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclSuccess;
  if (c->sock >= 0) send_text(c->sock, "BYE destroy");
  return ncclSuccess;  // as Abort: kept for the stream threads, released at exit
}

ACCEL_SIM_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t t,
                                                       ncclScalarResidence_t residence, ncclComm_t c) {
  if (!op || !scalar || !c || !valid_dtype(t) || residence != ncclScalarHostImmediate) return ncclInvalidArgument;
  double v = 0;
  switch (t) {
    case ncclFloat16: { uint16_t h; std::memcpy(&h, scalar, 2); v = comm::half_to_float(h); break; }
    case ncclBfloat16: { uint16_t b; std::memcpy(&b, scalar, 2); v = comm::bf16_to_float(b); break; }
    case ncclFloat32: { float f; std::memcpy(&f, scalar, 4); v = f; break; }
    case ncclFloat64: std::memcpy(&v, scalar, 8); break;
    case ncclInt8: { int8_t i; std::memcpy(&i, scalar, 1); v = i; break; }
    case ncclUint8: { uint8_t i; std::memcpy(&i, scalar, 1); v = i; break; }
    case ncclInt32: { int32_t i; std::memcpy(&i, scalar, 4); v = i; break; }
    case ncclUint32: { uint32_t i; std::memcpy(&i, scalar, 4); v = i; break; }
    case ncclInt64: { int64_t i; std::memcpy(&i, scalar, 8); v = static_cast<double>(i); break; }
    case ncclUint64: { uint64_t i; std::memcpy(&i, scalar, 8); v = static_cast<double>(i); break; }
    default: return ncclInvalidArgument;
  }
  const int id = c->next_op++;
  c->premul_ops[id] = {v, t};
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

ACCEL_SIM_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
  if (!c || c->premul_ops.erase(static_cast<int>(op)) == 0) return ncclInvalidArgument;
  return ncclSuccess;
}

ACCEL_SIM_EXPORT ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                            ncclComm_t c, cudaStream_t s) {
  return collective(kAllReduce, send, recv, count, t, op, 0, c, s);
}
ACCEL_SIM_EXPORT ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t,
                                                ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
  return collective(kReduceScatter, send, recv, recvcount, t, op, 0, c, s);
}
ACCEL_SIM_EXPORT ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t c,
                                            cudaStream_t s) {
  return collective(kAllGather, send, recv, sendcount, t, ncclSum, 0, c, s);
}
ACCEL_SIM_EXPORT ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                                            ncclComm_t c, cudaStream_t s) {
  return collective(kBroadcast, send, recv, count, t, ncclSum, root, c, s);
}
ACCEL_SIM_EXPORT ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                         int root, ncclComm_t c, cudaStream_t s) {
  return collective(kReduce, send, recv, count, t, op, root, c, s);
}
ACCEL_SIM_EXPORT ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                                       cudaStream_t s) {
  return point_to_point(kSend, const_cast<void*>(buf), count, t, peer, c, s);
}
ACCEL_SIM_EXPORT ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return point_to_point(kRecv, buf, count, t, peer, c, s);
}

ACCEL_SIM_EXPORT ncclResult_t ncclGroupStart() {
  ++tl_group_depth;
  return ncclSuccess;
}

ACCEL_SIM_EXPORT ncclResult_t ncclGroupEnd() {
  if (tl_group_depth == 0) return ncclInvalidUsage;
  if (--tl_group_depth > 0) return ncclSuccess;
  // one task per (communicator, stream), in the order first used
  std::vector<Pending> group = std::move(tl_group);
  tl_group.clear();
  std::vector<std::pair<std::pair<ncclComm*, StreamState*>, std::vector<Call>>> tasks;
  for (auto& g : group) {
    auto it = std::find_if(tasks.begin(), tasks.end(), [&](auto& t) { return t.first == std::make_pair(g.comm, g.stream); });
    if (it == tasks.end()) {
      tasks.push_back({{g.comm, g.stream}, {}});
      it = tasks.end() - 1;
    }
    it->second.push_back(std::move(g.call));
  }
  for (auto& [key, calls] : tasks) {
    ncclComm* c = key.first;
    key.second->enqueue([c, calls = std::move(calls)] { return run_calls(c, calls); });
  }
  return ncclSuccess;
}

// ---------------------------------------------------------------------------------------
// The CUDA runtime's part: devices, streams, events, memory

ACCEL_SIM_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return cudaErrorInvalidValue;
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.configure();
  *count = p.config_error.empty() ? p.topo.gpus_per_node : 1;
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaSetDevice(int device) {
  int n = 0;
  cudaGetDeviceCount(&n);
  return device >= 0 && device < n ? cudaSuccess : cudaErrorInvalidDevice;
}

ACCEL_SIM_EXPORT const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    default: return "unrecognized error code";
  }
}

ACCEL_SIM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  if (!s) return cudaErrorInvalidValue;
  *s = reinterpret_cast<cudaStream_t>(new StreamHandle());
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return cudaErrorInvalidResourceHandle;
  auto* h = reinterpret_cast<StreamHandle*>(s);
  {
    std::lock_guard<std::mutex> lk(h->s->mu);
    h->s->stop = true;
  }
  h->s->cv.notify_one();
  // a task may still be blocked on an aborted communicator for a moment: the worker leaves
  // by itself, and its small state is kept (reachable) until the process exits
  h->s->worker.detach();
  {
    static std::mutex mu;
    static auto* retired = new std::vector<StreamState*>();
    std::lock_guard<std::mutex> lk(mu);
    retired->push_back(h->s);
  }
  delete h;
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  if (!e) return cudaErrorInvalidValue;
  *e = reinterpret_cast<cudaEvent_t>(new EventHandle());
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  delete reinterpret_cast<EventHandle*>(e);
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> ev = reinterpret_cast<EventHandle*>(e)->s;
  auto& p = proc();
  if (!s) {  // the default stream is the host: what it has enqueued is done
    std::lock_guard<std::mutex> lk(p.mu);
    ev->vt = p.compute_t;
    ev->done = true;
    return cudaSuccess;
  }
  ev->done = false;
  reinterpret_cast<StreamHandle*>(s)->s->enqueue([ev] {
    {
      std::lock_guard<std::mutex> lk(proc().mu);
      ev->vt = proc().comm_t;
    }
    ev->done = true;
    return true;
  });
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  return reinterpret_cast<EventHandle*>(e)->s->done.load() ? cudaSuccess : cudaErrorNotReady;
}

ACCEL_SIM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (!e) return cudaErrorInvalidResourceHandle;
  std::shared_ptr<EventState> ev = reinterpret_cast<EventHandle*>(e)->s;
  auto& p = proc();
  if (!s) {  // the host waits: its clock moves to the event's time (the event has passed)
    std::lock_guard<std::mutex> lk(p.mu);
    if (ev->done.load()) p.compute_t = std::max(p.compute_t, ev->vt);
    return cudaSuccess;
  }
  if (ev->done.load()) {  // recorded on the host: the stream starts no earlier
    const double vt = ev->vt;
    reinterpret_cast<StreamHandle*>(s)->s->enqueue([vt] {
      std::lock_guard<std::mutex> lk(proc().mu);
      proc().comm_t = std::max(proc().comm_t, vt);
      return true;
    });
    return cudaSuccess;
  }
  reinterpret_cast<StreamHandle*>(s)->s->enqueue([ev] {
    while (!ev->done.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::lock_guard<std::mutex> lk(proc().mu);
    proc().comm_t = std::max(proc().comm_t, ev->vt);
    return true;
  });
  return cudaSuccess;
}

namespace {

// The process's simulated device memory: a charge over capacity fails as CUDA does.
bool mem_charge(uint64_t bytes, std::string* msg) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.configure();
  if (p.capacity && p.current + bytes > p.capacity) {
    std::ostringstream os;
    os << "CUDA out of memory (simulated). Tried to allocate " << text::format_bytes(bytes) << " (rank "
       << p.rank << "; " << text::format_bytes(p.capacity) << " total capacity; " << text::format_bytes(p.current)
       << " already allocated; " << text::format_bytes(p.capacity - p.current) << " free; peak "
       << text::format_bytes(p.peak) << ")";
    if (msg) *msg = os.str();
    p.record_error(os.str());
    std::lock_guard<std::mutex> lc(g_comms_mu);
    for (ncclComm* c : live_comms())
      if (c->blocks) copy_text(c->me().note, kNote, os.str());
    return false;
  }
  p.current += bytes;
  p.peak = std::max(p.peak, p.current);
  return true;
}

void mem_release(uint64_t bytes) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.current -= std::min(p.current, bytes);
}

}  // namespace

ACCEL_SIM_EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return cudaErrorInvalidValue;
  if (!mem_charge(size, nullptr)) return cudaErrorMemoryAllocation;
  void* m = nullptr;
  if (posix_memalign(&m, 256, std::max<size_t>(size, 1)) != 0) {
    mem_release(size);
    return cudaErrorMemoryAllocation;
  }
  std::lock_guard<std::mutex> lk(proc().mu);
  proc().allocations[m] = size;
  *ptr = m;
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  uint64_t size = 0;
  {
    std::lock_guard<std::mutex> lk(proc().mu);
    auto it = proc().allocations.find(ptr);
    if (it == proc().allocations.end()) return cudaErrorInvalidValue;
    size = it->second;
    proc().allocations.erase(it);
  }
  std::free(ptr);
  mem_release(size);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------------------
// The simulator's extensions (sim/nccl_abi.h)

ACCEL_SIM_EXPORT int accelSimVersion(void) { return 1; }

ACCEL_SIM_EXPORT void accelSimChargeCompute(ncclComm_t c, double seconds, const char* label) {
  if (!(seconds > 0)) return;
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.trace) p.events.push_back({c ? c->rank : 0, 0, label ? label : "compute", p.compute_t, seconds, ""});
  p.compute_t += seconds;
}

ACCEL_SIM_EXPORT double accelSimFlopsPerSecond(ncclComm_t) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.configure();
  return p.topo.gpu_flops * p.topo.mfu;
}

ACCEL_SIM_EXPORT ncclResult_t accelSimOnStep(ncclComm_t c, long long step) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.steps = std::max<int64_t>(p.steps, step);
  for (const auto& f : p.faults)
    if (c && f.rank == c->rank && f.kind == sim::Fault::Kind::KillAtStep && f.at == step) {
      const std::string why = "killed by fault injection (kill:" + std::to_string(f.rank) + "@step:" +
                              std::to_string(f.at) + ") at optimizer step " + std::to_string(step);
      if (c->blocks) copy_text(c->me().note, kNote, why);
      p.status = "killed";
      p.error = why;
      p.write_files();
      std::fflush(nullptr);
      ::raise(SIGKILL);
    }
  p.write_files(false);  // the report as of this step (a process killed from outside leaves it)
  return ncclSuccess;
}

ACCEL_SIM_EXPORT size_t accelSimDiagnose(ncclComm_t c, char* buf, size_t len) {
  std::ostringstream os;
  if (c && c->blocks) {
    for (int q = 0; q < c->n; ++q) {
      const RankBlock& b = c->blocks[q];
      const std::string g = gone(c, q);
      os << (q ? "; " : "") << "rank " << q << ": ";
      if (!g.empty())
        os << g;
      else
        os << (b.now[0] ? "at " + std::string(b.now) : std::string("no operation yet")) << " (barrier phase "
           << b.phase.load() << ")";
    }
  }
  const std::string s = os.str();
  if (buf && len) copy_text(buf, len, s);
  return s.size();
}

// Why this process's ACCEL_SIM_* settings are bad (empty when they are fine): the backend
// asks before it meets the other processes, so a bad setting fails every process with its own
// message instead of the first one's exit breaking the others' store connections.
ACCEL_SIM_EXPORT size_t accelSimConfigError(char* buf, size_t len) {
  auto& p = proc();
  std::string s;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.configure();
    if (!p.config_error.empty()) s = "simulated NCCL: " + p.config_error;
  }
  if (buf && len) copy_text(buf, len, s);
  return s.size();
}

ACCEL_SIM_EXPORT void accelSimNote(ncclComm_t c, const char* why) {
  if (!c || !why) return;
  {
    std::lock_guard<std::mutex> lk(proc().mu);
    proc().record_error(why);
  }
  if (c->blocks) copy_text(c->me().note, kNote, why);
}

ACCEL_SIM_EXPORT int accelSimMemCharge(unsigned long long bytes, char* msg, size_t len) {
  std::string m;
  if (mem_charge(bytes, &m)) return 0;
  if (msg && len) copy_text(msg, len, m);
  return 1;
}

ACCEL_SIM_EXPORT void accelSimMemRelease(unsigned long long bytes) { mem_release(bytes); }
