// The simulated NCCL library (sim/nccl/internal.h): the CUDA runtime's part — devices, streams
// (a thread each) and events, and device memory (the arena) with the process's budget.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/text.h"
#include "sim/nccl/internal.h"

namespace accel::simnccl {

// ---------------------------------------------------------------------------------------
// Streams and events

StreamState::StreamState() {
  worker = std::thread([this] { run(); });
}
void StreamState::enqueue(std::function<bool()> t) {
  {
    std::lock_guard<std::mutex> lk(mu);
    tasks.push_back(std::move(t));
    pending.fetch_add(1, std::memory_order_release);
  }
  cv.notify_one();
}
void StreamState::run() {
  for (;;) {
    std::function<bool()> t;
    // a stream's work comes in bursts (a collective, then its event; the next bucket): look
    // for the next task for 50 us, yielding the core, before sleeping (a wake-up costs tens
    // of microseconds on a loaded machine, the collectives of small buffers about as much)
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (pending.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < spin_until)
      std::this_thread::yield();
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return stop || (!tasks.empty() && !stuck); });
      if (stop) return;
      t = std::move(tasks.front());
      tasks.pop_front();
      pending.fetch_sub(1, std::memory_order_relaxed);
    }
    if (!t()) {
      std::lock_guard<std::mutex> lk(mu);
      stuck = true;
    }
  }
}
void StreamState::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_one();
  if (worker.joinable()) worker.join();
}

}  // namespace accel::simnccl

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
    ev->pass();
    return cudaSuccess;
  }
  ev->done = 0;
  reinterpret_cast<StreamHandle*>(s)->s->enqueue([ev] {
    {
      std::lock_guard<std::mutex> lk(proc().mu);
      ev->vt = proc().comm_t;
    }
    ev->pass();
    return true;
  });
  return cudaSuccess;
}

ACCEL_SIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!e) return cudaErrorInvalidResourceHandle;
  return reinterpret_cast<EventHandle*>(e)->s->done.load() ? cudaSuccess : cudaErrorNotReady;
}

// Sleeps on the event's word until a stream thread passes it, or until `until` when given, where
// polling would take a core from the ranks' stream threads. True once the event has passed.
static bool wait_passed(EventState& ev, const std::chrono::steady_clock::time_point* until) {
  if (ev.done.load()) return true;
  ev.waiters.fetch_add(1);
  while (!ev.done.load()) {
    if (!until) {
      futex(&ev.done, FUTEX_WAIT_PRIVATE, 0, nullptr);  // returns at once unless the word is still 0
      continue;
    }
    const auto left = *until - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    futex(&ev.done, FUTEX_WAIT_PRIVATE, 0, &ts);
  }
  ev.waiters.fetch_sub(1);
  return ev.done.load() != 0;
}

// The host sleeps on the event until it passes or the time runs out.
ACCEL_SIM_EXPORT int accelSimEventWait(cudaEvent_t e, unsigned int microseconds) {
  if (!e) return 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(microseconds);
  return wait_passed(*reinterpret_cast<EventHandle*>(e)->s, &until) ? 1 : 0;
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
    wait_passed(*ev, nullptr);  // another stream's event: this stream's thread sleeps until it passes
    std::lock_guard<std::mutex> lk(proc().mu);
    proc().comm_t = std::max(proc().comm_t, ev->vt);
    return true;
  });
  return cudaSuccess;
}

namespace accel::simnccl {

// The process's simulated device memory: a charge over capacity fails as CUDA does.
bool mem_charge(uint64_t bytes, std::string* msg) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.configure();
  if (p.capacity && p.current + bytes > p.capacity) {
    const int gpus = p.topo.gpus_per_node > 0 ? p.topo.gpus_per_node : 1;
    const std::string why =
        sim::cuda_oom_message(bytes, p.rank >= 0 ? p.rank % gpus : 0, p.capacity, p.current, p.rank, p.peak);
    if (msg) *msg = why;
    p.record_error(why);
    std::lock_guard<std::mutex> lc(g_comms_mu);
    for (ncclComm* c : live_comms())
      if (c->blocks) copy_text(c->me().note, kNote, why);
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

// ---------------------------------------------------------------------------------------
// The arena (internal.h): a memfd of `bytes` (sparse: a page exists once written) mapped at
// `base`, handed out in whole pages, first fit, so that a freed allocation's pages can be
// given back with a hole punched in the file.

namespace {

constexpr uint64_t kPage = 4096;

struct Arena {
  std::mutex mu;
  bool tried = false;
  ArenaView view;
  std::map<uint64_t, uint64_t> free;  // offset -> bytes, coalesced
};

Arena& arena() {
  static auto* a = new Arena();  // lives as long as the process (the peers map it)
  return *a;
}

// The range to reserve: the budget twice (room for the pages' rounding and fragmentation),
// at most the machine's memory, which it is when the budget is unlimited.
uint64_t arena_reserve() {
  uint64_t capacity;
  {
    auto& p = proc();
    std::lock_guard<std::mutex> lk(p.mu);
    p.configure();
    capacity = p.capacity;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t machine = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
  // (a preset's budget, 80 GB and more, can exceed this machine: never past its memory)
  uint64_t want = capacity ? (machine ? std::min(2 * capacity, machine) : 2 * capacity) : machine;
  if (want == 0) want = 64ull << 30;
  want = std::max<uint64_t>(want, 64ull << 20);
  return (want + (2ull << 20) - 1) & ~((2ull << 20) - 1);
}

// Makes the arena (under a.mu); the view stays empty when the system refuses.
void arena_make(Arena& a) {
  if (a.tried) return;
  a.tried = true;
  const uint64_t bytes = arena_reserve();
  const int fd = ::memfd_create("accel-sim-gpu-memory", MFD_CLOEXEC);
  if (fd < 0) return;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return;
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (m == MAP_FAILED) {
    ::close(fd);
    return;
  }
  a.view.fd = fd;  // kept open: the peers open it through /proc/<pid>/fd
  a.view.base = static_cast<char*>(m);
  a.view.bytes = bytes;
  a.free[0] = bytes;
}

// `size` bytes from the arena (whole pages), or null when they do not fit in it.
void* arena_alloc(uint64_t size) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  arena_make(a);
  if (!a.view.base) return nullptr;
  const uint64_t need = (std::max<uint64_t>(size, 1) + kPage - 1) & ~(kPage - 1);
  for (auto it = a.free.begin(); it != a.free.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t off = it->first, left = it->second - need;
    a.free.erase(it);
    if (left) a.free[off + need] = left;
    return a.view.base + off;
  }
  return nullptr;
}

// Gives `size` bytes at `p` (from arena_alloc) back: to the free list, and their pages to the
// system (a hole punched in the file, which also unmaps them from the peers).
void arena_free(void* p, uint64_t size) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  uint64_t off = static_cast<uint64_t>(static_cast<char*>(p) - a.view.base);
  uint64_t len = (std::max<uint64_t>(size, 1) + kPage - 1) & ~(kPage - 1);
  ::fallocate(a.view.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off), static_cast<off_t>(len));
  auto next = a.free.lower_bound(off);
  if (next != a.free.end() && next->first == off + len) {  // merge with the free block after
    len += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {  // and with the one before
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  a.free[off] = len;
}

}  // namespace

ArenaView arena_view() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  arena_make(a);
  return a.view;
}

bool arena_holds(const void* p, uint64_t bytes) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  const char* c = static_cast<const char*>(p);
  return a.view.base && c >= a.view.base && bytes <= a.view.bytes &&
         static_cast<uint64_t>(c - a.view.base) <= a.view.bytes - bytes;
}

uint64_t arena_resident() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lk(a.mu);
  struct stat st {};
  if (a.view.fd < 0 || ::fstat(a.view.fd, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace accel::simnccl

ACCEL_SIM_EXPORT cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (!ptr) return cudaErrorInvalidValue;
  if (!mem_charge(size, nullptr)) return cudaErrorMemoryAllocation;
  // from the arena (the peers reach it with memcpy), else from the host's heap (the peers
  // reach it through the segment or by cross-memory attach): the arena is full, or absent
  void* m = arena_alloc(size);
  if (!m && posix_memalign(&m, 256, std::max<size_t>(size, 1)) != 0) {
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
  if (arena_holds(ptr, size))
    arena_free(ptr, size);
  else
    std::free(ptr);
  mem_release(size);
  return cudaSuccess;
}
