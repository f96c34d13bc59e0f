// NCCL's C API, simulated across processes on one machine: libaccel-nccl-sim.so. It exports
// the functions of nccl.h and of the CUDA runtime that accel's nccl backend calls, with
// their names, types and semantics (comm/nccl/nccl_abi.h), over host memory: the backend runs
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
// - A process's simulated device memory (cudaMalloc's) lives in its arena: a memfd that every
//   process of the world maps (it opens the owner's descriptor through /proc), so that a
//   collective whose buffers are all in the arenas reads and writes the peers' buffers
//   directly, with memcpy and the reduction kernels, at memory speed. Other buffers (host
//   memory a program passes) move through the segment, or for large collectives by
//   cross-memory attach (process_vm_readv/writev).
// - Collectives through the segment: each rank copies its input into its slot,
//   a barrier, then each reduces its share of the elements in rank order (the kernels of the
//   in-process simulator, so the results are bit-identical to it), a barrier, then each
//   copies out. At the first barrier every rank compares every rank's call (the
//   fingerprint): a mismatch fails all of them with the calls named. Send/recv go through
//   one ring buffer per (sender, receiver) pair.
// - Virtual clocks and the cost model (sim/cost.h), a Chrome trace, per-process memory
//   budgets, fault injection, and a report file, as the in-process simulator has; the
//   settings come from the environment (ACCEL_SIM_*; docs/simulator.md, docs/launch.md).
//
// The library's files (sim/nccl/), one concern each:
// - internal.h — what they share: the constants, the shared segment's layout (RankBlock,
//   Mailbox, Header, Layout), the process's state (Process), the streams' and events' state,
//   a call (Call), the communicator (ncclComm), the coordinator, and the functions each file
//   offers the others (in accel::simnccl, hidden: only the C API is exported);
// - process.cpp — small helpers, the settings read from ACCEL_SIM_*, the report and trace files;
// - collectives.cpp — what a stream runs: waits, barriers, fingerprints, collectives (through
//   the segment or by direct access to the peers' memory: their arenas, or cross-memory
//   attach), send/recv through the mailboxes;
// - coordinator.cpp — the coordinator (sockets, the segment, watching the ranks), the unique
//   id, a communicator's initialisation, the exit hook;
// - nccl_api.cpp — nccl.h's functions: posting calls on a stream, groups, communicators;
// - cuda.cpp — the CUDA runtime's functions: devices, streams and events, memory (the arena)
//   and its budget;
// - extensions.cpp — the simulator's extensions (accelSim*).
#pragma once

#include <linux/futex.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/text.h"
#include "comm/kernels.h"
#include "sim/cost.h"
#include "sim/faults.h"
#include "sim/settings.h"
#include "comm/nccl/nccl_abi.h"
#include "sim/trace.h"

#define ACCEL_SIM_EXPORT extern "C" __attribute__((visibility("default")))

using namespace accel::nccl_abi;
namespace comm = accel::comm;
namespace text = accel::text;
namespace sim = accel::sim;

// What the files share: named, and hidden (-fvisibility=hidden; sim/nccl_sim.map exports the
// C API alone).
namespace accel::simnccl {

using Clock = std::chrono::steady_clock;
constexpr char kIdMagic[] = "ACCELSIM1";
constexpr uint64_t kShmMagic = 0x6163636c73696d31ull;  // "accelsim1"
constexpr size_t kNote = 512, kDesc = 192;
constexpr uint64_t kSlotBytes = 16ull << 20;  // per rank: the chunk a collective moves at once
constexpr uint64_t kBoxBytes = 1ull << 20;    // per (sender, receiver) pair

// ---------------------------------------------------------------------------------------
// Small helpers

// (process.cpp)
std::string env(const char* name);
void copy_text(char* dst, size_t cap, const std::string& s);
long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts);

inline comm::DataType dtype_of(ncclDataType_t t) { return static_cast<comm::DataType>(static_cast<int>(t)); }

inline bool valid_dtype(ncclDataType_t t) { return static_cast<int>(t) >= 0 && static_cast<int>(t) <= 9; }

// ---------------------------------------------------------------------------------------
// The shared segment

struct alignas(64) RankBlock {
  std::atomic<uint64_t> phase;  // barrier phases this rank has reached
  std::atomic<uint32_t> state;  // 0 alive, 1 exited, 2 died, 3 aborted
  uint32_t pid;
  // The collective this rank is in, posted before the collective's first barrier (phase k)
  // in posted[k % 2] and read by the others after it: a rank may post its next collective
  // (phase k + 1) while a slower one still reads this, never the one after (phase k + 2
  // needs every rank past k + 1).
  struct Posted {
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
    double ready;  // its virtual time when the collective could start on this rank
    uint64_t send_addr, recv_addr;  // its buffers in its own address space (direct access)
    uint32_t arena;                 // 1: the buffers the others touch are in its arena, and it reaches theirs
    uint32_t outputs;               // 1: with arena, its output is in its arena too (shared tickets)
  } posted[2];
  int32_t arena_fd;               // its arena (cuda.cpp), a descriptor the others open through /proc
  uint64_t arena_base, arena_bytes;  // where the arena lies in its address space
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
  // A collective's work shared by the ranks (run_shared): tickets taken and done, counted
  // over the communicator's life (each such collective's tickets follow the last one's).
  alignas(64) std::atomic<uint64_t> taken;
  alignas(64) std::atomic<uint64_t> done;
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
const char* kind_name(int k);
sim::CollKind coll_kind(int k);

struct Process {
  std::mutex mu;
  bool configured = false;
  std::string config_error;  // a bad ACCEL_SIM_* variable
  std::string topology_name = sim::kDefaultTopology, gpu_mem_text, faults_text, out_dir;
  bool trace = false;
  sim::Topology topo;
  sim::AlgorithmFilter algorithms;  // NCCL_ALGO, as NCCL reads it
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
  pid_t exit_owner = 0;     // the process that registered the exit hook (0: none yet)
  int report_fd = -1;       // rank-R.json, kept open once it exists: rewritten in place
  size_t report_bytes = 0;  // its length (a shorter report is padded to it)

  // Reads ACCEL_SIM_* once.
  void configure();

  double now() const { return std::max(compute_t, comm_t); }

  // The report file (ACCEL_SIM_OUT/rank-R.json); and, with `trace_too`, the trace
  // (trace-R.json), which grows with the run: written at exit or at a fault only. Under mu.
  void write_files(bool trace_too = true);
  // The report's text written: the first time through a temporary file and a rename (it
  // appears whole), then in place at offset 0 with one pwrite, padded with spaces to the
  // file's length (JSON ignores them), so that a report at every step costs one system call
  // and no file made or removed. One pwrite of less than a page into the page cache cannot be
  // cut by a kill: the file holds the last report whole (a longer one goes by rename).
  void write_report(const std::string& path, std::string text);

  void record_error(const std::string& e) {
    if (status == "ok") status = "failed";
    if (error.empty()) error = e;
  }
};

Process& proc();  // the one of this process

// ---------------------------------------------------------------------------------------
// Streams and events

struct EventState {
  std::atomic<uint32_t> done{1};     // 1 once passed (a futex word: accelSimEventWait sleeps on it)
  std::atomic<uint32_t> waiters{0};  // hosts asleep on it: passing it wakes them
  double vt = 0.0;                   // the virtual time of the stream at the event
  void pass() {
    done.store(1);
    if (waiters.load() > 0) futex(&done, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr);
  }
};

struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<bool()>> tasks;  // false: the stream failed and stops (as a faulted GPU)
  std::atomic<uint32_t> pending{0};         // tasks.size(), read without the lock
  bool stop = false, stuck = false;
  std::thread worker;

  StreamState();
  void enqueue(std::function<bool()> t);
  void run();
  void shutdown();
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

}  // namespace accel::simnccl

// Seen at the global scope, as the anonymous namespace of the single file they come from was:
// by the communicator below (its members use them) and by the exported functions.
using namespace accel::simnccl;

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
  // The peers' arenas mapped here (null: not reachable, and this rank's own), at the address
  // each has in its owner's process: a buffer there is reached with memcpy (reach()).
  std::vector<char*> arena_map;
  std::vector<uint64_t> arena_base, arena_bytes;
  bool arena_ok = false;  // every peer's arena is mapped (ACCEL_SIM_ARENA=0: never)
  // How the collectives moved their data (accelSimDataPaths): through the peers' arenas,
  // by direct access with cross-memory attach for some peer, staged through the segment;
  // and the cross-memory-attach system calls made.
  std::atomic<uint64_t> by_arena{0}, by_attach{0}, by_staging{0}, attach_calls{0};
  // The shared collectives' tickets (run_shared): in all so far (where the next one's start;
  // the stream's, read by the host too), and those this rank did.
  std::atomic<uint64_t> tickets{0}, tickets_done{0};
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

namespace accel::simnccl {

// collectives.cpp

// Why rank q cannot take part any more ("" while it can).
std::string gone(ncclComm* c, int q);

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

std::vector<int> everyone(int n);

// Copies between this process and rank q's memory: its own with memcpy, a peer's with one
// cross-memory-attach call (process_vm_readv / process_vm_writev: the kernel copies between
// the address spaces, as NVLink's peer-to-peer copies do between GPUs).
bool peer_copy(ncclComm* c, int q, void* local, uint64_t remote, size_t bytes, bool write, std::string& why);

// Rank q's `bytes` at `remote` (an address in q's process) as memory of this process: its own,
// or in q's arena mapped here; null when only cross-memory attach reaches them.
char* reach(ncclComm* c, int q, uint64_t remote, size_t bytes);

// What a group (or a single call) runs on the stream: collectives in order, consecutive
// send/recv together.
bool run_calls(ncclComm* c, const std::vector<Call>& calls);

// coordinator.cpp

// A line of text, length-prefixed.
bool send_text(int fd, const std::string& s);

struct Coordinator {
  int listen_fd = -1;
  std::string name;  // the abstract socket's name
  std::thread thread;
  std::atomic<bool> finished{false};

  void run(double timeout_s);
};

// Makes the unique id: starts a coordinator listening on an abstract Unix socket.
extern std::shared_ptr<Coordinator> g_pending;  // made by ncclGetUniqueId, adopted by the rank that hosts it
extern std::mutex g_pending_mu;
ncclResult_t make_unique_id(ncclUniqueId* id);

// ncclCommInitRank's work (on a thread of its own: the communicator is non-blocking).
void init_comm(ncclComm* c, std::string coord_name);

// The communicators of this process (never shrinks), under g_comms_mu.
std::vector<ncclComm*>& live_comms();
extern std::mutex g_comms_mu;

// cuda.cpp

// The process's simulated device memory: a charge over capacity fails as CUDA does.
bool mem_charge(uint64_t bytes, std::string* msg);
void mem_release(uint64_t bytes);

// The process's arena: the simulated GPU's memory, a memfd that the other processes of the
// world map. One virtual range is reserved (MAP_NORESERVE: the budget's size twice, or the
// machine's memory when unlimited); pages exist once written, and go back to the system when
// freed (a hole punched in the file). cudaMalloc's allocations come from it.
struct ArenaView {
  int fd = -1;
  char* base = nullptr;
  uint64_t bytes = 0;
};
ArenaView arena_view();  // makes it the first time (fd -1 when it cannot be made)
bool arena_holds(const void* p, uint64_t bytes);  // [p, p + bytes) lies in the arena
uint64_t arena_resident();  // bytes of it backed by memory now

}  // namespace accel::simnccl
