// The simulated NCCL library (sim/nccl/internal.h): the CUDA runtime's part — devices, streams
// (a thread each) and events, and device memory with the process's budget.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
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
  }
  cv.notify_one();
}
void StreamState::run() {
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

namespace accel::simnccl {

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

}  // namespace accel::simnccl

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
