// The NCCL backend (nccl.h): one NCCL communicator per process behind the Communicator.
#include "comm/nccl/nccl.h"

#include <dlfcn.h>
#include <link.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <thread>
#include <utility>
#include <vector>

#include "base/files.h"
#include "comm/c10d/tcp_store.h"
#include "comm/kernels.h"
#include "comm/nccl/api.h"

#if defined(ACCEL_HAVE_NCCL)
// The simulated library implements comm/nccl/nccl_abi.h's mirror of these headers: check it.
#include "comm/nccl/nccl_abi.h"
namespace mirror = accel::nccl_abi;
static_assert(sizeof(mirror::ncclUniqueId) == sizeof(ncclUniqueId));
static_assert(sizeof(mirror::ncclConfig_t) == sizeof(ncclConfig_t));
static_assert(offsetof(mirror::ncclConfig_t, blocking) == offsetof(ncclConfig_t, blocking));
static_assert(offsetof(mirror::ncclConfig_t, nvlinkCentricSched) == offsetof(ncclConfig_t, nvlinkCentricSched));
static_assert(sizeof(mirror::ncclRedOp_t) == sizeof(ncclRedOp_t) && sizeof(mirror::ncclDataType_t) == sizeof(ncclDataType_t));
static_assert(int(mirror::ncclInProgress) == int(ncclInProgress) && int(mirror::ncclRemoteError) == int(ncclRemoteError));
static_assert(int(mirror::ncclBfloat16) == int(ncclBfloat16) && int(mirror::ncclAvg) == int(ncclAvg));
static_assert(int(mirror::ncclScalarHostImmediate) == int(ncclScalarHostImmediate));
static_assert(int(mirror::cudaErrorNotReady) == int(cudaErrorNotReady) && int(mirror::cudaErrorMemoryAllocation) == int(cudaErrorMemoryAllocation));
static_assert(mirror::kCudaStreamNonBlocking == cudaStreamNonBlocking && mirror::kCudaEventDisableTiming == cudaEventDisableTiming);
#endif

namespace accel::comm {

namespace {

using Clock = std::chrono::steady_clock;

// ncclResult_t's values are Result's (communicator.h mirrors them).
Result result_of(ncclResult_t r) {
  const int v = static_cast<int>(r);
  return v >= 0 && v <= static_cast<int>(Result::InProgress) ? static_cast<Result>(v) : Result::InternalError;
}

void cuda_check(const NcclApi* api, cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw CommError(Result::UnhandledCudaError, "nccl: " + what + ": " + api->cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::Int8: return ncclInt8;
    case DataType::Uint8: return ncclUint8;
    case DataType::Int32: return ncclInt32;
    case DataType::Uint32: return ncclUint32;
    case DataType::Int64: return ncclInt64;
    case DataType::Uint64: return ncclUint64;
    case DataType::Float16: return ncclFloat16;
    case DataType::Float32: return ncclFloat32;
    case DataType::Float64: return ncclFloat64;
    case DataType::BFloat16: return ncclBfloat16;
  }
  throw CommError(Result::InvalidArgument, "nccl: invalid data type " + std::to_string(static_cast<int>(t)));
}

// The communicator's state, shared with its Works (which abort it when they time out).
struct State {
  const NcclApi* api = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0, rank = 0, size = 1;
  std::chrono::milliseconds timeout{0};
  bool aborted = false;
  std::string why_aborted;

  std::string where() const { return " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")"; }

  // Aborts the communicator: NCCL's way out of a failed or hung world. Later calls fail.
  void abort(const std::string& why) {
    if (aborted) return;
    aborted = true;
    why_aborted = why;
    if (comm && api->accelSimNote) api->accelSimNote(comm, why.c_str());  // the other simulated ranks quote it
    if (comm) api->ncclCommAbort(comm);
    comm = nullptr;
  }

  // The simulator's account of where every rank is, for a timeout's message; "" on real NCCL.
  std::string diagnosis() const {
    if (!api->accelSimDiagnose || !comm) return "";
    char buf[4096];
    api->accelSimDiagnose(comm, buf, sizeof buf);
    return buf[0] ? std::string("; the simulated ranks: ") + buf : "";
  }

  void usable(const std::string& what) const {
    if (aborted)
      throw CommError(Result::InvalidUsage, "nccl: " + what + where() + ": the communicator was aborted after " + why_aborted);
  }

  // A failed NCCL call: its code, NCCL's text and last error; the communicator is aborted
  // when the failure is one it cannot go on from (a peer, the system, NCCL itself).
  [[noreturn]] void fail(ncclResult_t r, const std::string& what) {
    std::string msg = "nccl: " + what + where() + ": " + api->ncclGetErrorString(r);
    if (comm) {
      const char* last = api->ncclGetLastError(comm);
      if (last && *last) msg += " (" + std::string(last) + ")";
    }
    const Result res = result_of(r);
    if (res == Result::RemoteError || res == Result::SystemError || res == Result::InternalError ||
        res == Result::UnhandledCudaError)
      abort(msg);
    throw CommError(res, msg);
  }

  // A non-blocking communicator's calls may return ncclInProgress: poll its asynchronous
  // error until the call is done, up to the timeout (then abort).
  void settle(ncclResult_t r, const std::string& what) {
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::microseconds(20);
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        const std::string msg = "nccl: " + what + where() + " did not complete within " +
                                std::to_string(timeout.count()) + " ms" + diagnosis();
        abort(msg);
        throw CommError(Result::Timeout, msg + " (the configured timeout: ACCEL_TIMEOUT or accel_options.timeout_seconds)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
      if (api->ncclCommGetAsyncError(comm, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r != ncclSuccess) fail(r, what);
  }
};

// An operation enqueued on the communicator's stream: complete when the event recorded after
// it has passed. Inside a group the event is recorded at group_end.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<State> s, std::string what) : s_(std::move(s)), api(s_->api), what_(std::move(what)) {}
  ~NcclWork() override {
    if (event_) api->cudaEventDestroy(event_);
  }
  void record() {
    cuda_check(api, api->cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    cuda_check(api, api->cudaEventRecord(event_, s_->stream), "cudaEventRecord");
    posted_ = Clock::now();
  }
  void wait() override {
    // the timeout counts from the post: a wait that comes late (or after comm/guard.h's
    // checks) does not get a second one
    const auto deadline = (event_ ? posted_ : Clock::now()) + s_->timeout;
    // polls, yielding the core between polls for the first 200 us (a sleep lasts at least
    // the timer slack, 50 us: short operations, the simulated NCCL's on a loaded machine
    // among them, were seen that much late), then sleeping from 10 us up to 100 us between
    // polls: a finished operation is seen within 10% of a millisecond-long one (a GPU's
    // event needs no more)
    // The simulated library sleeps the host on the event itself instead (accelSimEventWait):
    // its ranks are processes that share the machine's cores, and a host that polls takes one
    // from the stream threads that do the collective's work; it wakes each millisecond to
    // check the deadline and the communicator's errors as the loop below does.
    if (api->accelSimEventWait && event_) {
      while (!test()) {
        if (Clock::now() > deadline) break;  // said below
        api->accelSimEventWait(event_, 1000);
      }
    }
    const auto spin_until = Clock::now() + std::chrono::microseconds(200);
    while (!test() && Clock::now() < spin_until) std::this_thread::yield();
    auto pause = std::chrono::microseconds(10);
    while (!test()) {
      if (Clock::now() > deadline) {
        const std::string msg = "nccl: " + what_ + s_->where() + " did not complete within " +
                                std::to_string(s_->timeout.count()) + " ms" + s_->diagnosis();
        s_->abort(msg);
        throw CommError(Result::Timeout, msg + " (a peer stuck or gone; the configured timeout: ACCEL_TIMEOUT or "
                                               "accel_options.timeout_seconds)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(100));
    }
  }
  bool test() override {
    if (done_) return true;
    if (!event_) throw CommError(Result::InvalidUsage, "nccl: waiting on an operation of a group before group_end");
    s_->usable(what_);
    const cudaError_t q = api->cudaEventQuery(event_);
    if (q == cudaSuccess) {
      done_ = true;
      // what the compute stream does next comes after the operation
      cuda_check(api, api->cudaStreamWaitEvent(nullptr, event_, 0), "cudaStreamWaitEvent");
      return true;
    }
    if (q != cudaErrorNotReady) cuda_check(api, q, "cudaEventQuery for " + what_);
    ncclResult_t async = ncclSuccess;
    if (api->ncclCommGetAsyncError(s_->comm, &async) != ncclSuccess) async = ncclInternalError;
    if (async != ncclSuccess && async != ncclInProgress) s_->fail(async, what_);
    return false;
  }

 private:
  std::shared_ptr<State> s_;
  const NcclApi* api;
  std::string what_;
  cudaEvent_t event_ = nullptr;
  Clock::time_point posted_{};
  bool done_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<State> s, std::shared_ptr<Store> store, int local_rank, int local_size)
      : s_(std::move(s)), api(s_->api), store_(std::move(store)), local_rank_(local_rank), local_size_(local_size) {
    cuda_check(api, api->cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    cuda_check(api, api->cudaMalloc(&scratch_, sizeof(int32_t)), "cudaMalloc of the barrier's buffer");
  }
  ~NcclCommunicator() override {
    if (!s_->aborted && s_->comm) {
      try {
        s_->settle(api->ncclCommFinalize(s_->comm), "finalize");
        api->ncclCommDestroy(s_->comm);
      } catch (...) {  // finalizing failed and aborted it: nothing left to free
      }
    }
    if (scratch_) api->cudaFree(scratch_);
    if (ready_) api->cudaEventDestroy(ready_);
    if (s_->stream) api->cudaStreamDestroy(s_->stream);
  }

  int rank() const override { return s_->rank; }
  int size() const override { return s_->size; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return api->simulated ? "sim" : "nccl"; }
  Store* store() override { return store_.get(); }
  // the simulated GPUs' memory is the host's
  bool reaches(const Device& d) const override {
    return api->simulated ? d.kind == Device::Kind::Host : d.kind == Device::Kind::Cuda && d.index == s_->device;
  }
  Device home() const override {
    Device d;
    if (!api->simulated) {
      d.kind = Device::Kind::Cuda;
      d.index = s_->device;
    }
    return d;
  }

  std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   PreMul premul) override {
    check_op(t, op);
    return with_op(t, op, premul, "all_reduce", count, [&](ncclRedOp_t o) {
      return api->ncclAllReduce(send, recv, count, nccl_type(t), o, s_->comm, s_->stream);
    });
  }
  std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       PreMul premul) override {
    check_op(t, op);
    return with_op(t, op, premul, "reduce_scatter", recvcount, [&](ncclRedOp_t o) {
      return api->ncclReduceScatter(send, recv, recvcount, nccl_type(t), o, s_->comm, s_->stream);
    });
  }
  std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) override {
    check_dtype(t);
    return launch("all_gather", sendcount, t,
                  [&] { return api->ncclAllGather(send, recv, sendcount, nccl_type(t), s_->comm, s_->stream); });
  }
  std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) override {
    check_dtype(t);
    check_rank(root, "root");
    return launch("broadcast", count, t,
                  [&] { return api->ncclBroadcast(send, recv, count, nccl_type(t), root, s_->comm, s_->stream); });
  }
  std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                               PreMul premul) override {
    check_op(t, op);
    check_rank(root, "root");
    return with_op(t, op, premul, "reduce", count, [&](ncclRedOp_t o) {
      return api->ncclReduce(send, recv, count, nccl_type(t), o, root, s_->comm, s_->stream);
    });
  }
  std::shared_ptr<Work> send(const void* buf, size_t count, DataType t, int peer) override {
    check_dtype(t);
    check_rank(peer, "peer");
    return launch("send to " + std::to_string(peer), count, t,
                  [&] { return api->ncclSend(buf, count, nccl_type(t), peer, s_->comm, s_->stream); });
  }
  std::shared_ptr<Work> recv(void* buf, size_t count, DataType t, int peer) override {
    check_dtype(t);
    check_rank(peer, "peer");
    return launch("recv from " + std::to_string(peer), count, t,
                  [&] { return api->ncclRecv(buf, count, nccl_type(t), peer, s_->comm, s_->stream); });
  }
  void barrier() override {
    if (group_depth_ > 0) throw CommError(Result::InvalidUsage, "nccl: barrier inside a group");
    all_reduce(scratch_, scratch_, 1, DataType::Int32, RedOp::Sum, PreMul{})->wait();
  }
  void group_start() override {
    s_->usable("group_start");
    s_->settle(api->ncclGroupStart(), "group_start");
    ++group_depth_;
  }
  void group_end() override {
    if (group_depth_ == 0) throw CommError(Result::InvalidUsage, "group_end without group_start");
    s_->usable("group_end");
    s_->settle(api->ncclGroupEnd(), "group_end");
    if (--group_depth_ > 0) return;
    auto grouped = std::move(grouped_);
    grouped_.clear();
    for (auto& w : grouped) w->record();
  }

 protected:
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= s_->size)
      throw CommError(Result::InvalidArgument, std::string("nccl: ") + what + " " + std::to_string(r) +
                                                   " is not a rank of a " + std::to_string(s_->size) + "-rank world");
  }

  // Enqueues `call` on the stream after what the compute stream has enqueued so far.
  template <class F>
  std::shared_ptr<Work> launch(const std::string& op, size_t count, DataType t, F&& call) {
    const std::string what = op + " of " + std::to_string(count) + " " + dtype_name(t);
    s_->usable(what);
    cuda_check(api, api->cudaEventRecord(ready_, nullptr), "cudaEventRecord");
    cuda_check(api, api->cudaStreamWaitEvent(s_->stream, ready_, 0), "cudaStreamWaitEvent");
    s_->settle(call(), what);
    auto w = std::make_shared<NcclWork>(s_, what);
    if (group_depth_ > 0)
      grouped_.push_back(w);  // enqueued by NCCL at group_end
    else
      w->record();
    return w;
  }

  // Reductions: PreMulSum makes NCCL's operator for this call's scalar (in the data type,
  // resident on the host), destroyed once the call returns.
  template <class F>
  std::shared_ptr<Work> with_op(DataType t, RedOp op, PreMul premul, const std::string& name, size_t count, F&& call) {
    if (op != RedOp::PreMulSum)
      return launch(name, count, t, [&] { return call(static_cast<ncclRedOp_t>(static_cast<int>(op))); });
    unsigned char scalar[8] = {};
    switch (t) {
      case DataType::Float16: { const uint16_t h = float_to_half(static_cast<float>(premul.value)); std::memcpy(scalar, &h, 2); break; }
      case DataType::BFloat16: { const uint16_t b = float_to_bf16(static_cast<float>(premul.value)); std::memcpy(scalar, &b, 2); break; }
      case DataType::Float32: { const float f = static_cast<float>(premul.value); std::memcpy(scalar, &f, 4); break; }
      case DataType::Float64: std::memcpy(scalar, &premul.value, 8); break;
      default: {  // integers: the scalar as the type's integer (its low bytes, little-endian)
        const int64_t i = static_cast<int64_t>(premul.value);
        std::memcpy(scalar, &i, dtype_size(t));
      }
    }
    ncclRedOp_t o;
    s_->usable(name);
    s_->settle(api->ncclRedOpCreatePreMulSum(&o, scalar, nccl_type(t), ncclScalarHostImmediate, s_->comm), "premulsum");
    try {
      auto w = launch(name, count, t, [&] { return call(o); });
      api->ncclRedOpDestroy(o, s_->comm);
      return w;
    } catch (...) {
      if (!s_->aborted) api->ncclRedOpDestroy(o, s_->comm);
      throw;
    }
  }

  std::shared_ptr<State> s_;
  const NcclApi* api;
  std::shared_ptr<Store> store_;
  int local_rank_, local_size_;
  cudaEvent_t ready_ = nullptr;
  void* scratch_ = nullptr;
  int group_depth_ = 0;
  std::vector<std::shared_ptr<NcclWork>> grouped_;
};

// The nccl backend on the simulated NCCL: also the simulator's clock (comm::ComputeClock),
// which the runtime charges its estimated compute and optimizer steps to.
class SimNcclCommunicator final : public NcclCommunicator, public ComputeClock {
 public:
  using NcclCommunicator::NcclCommunicator;
  void charge_compute(double seconds, const char* label) override {
    api->accelSimChargeCompute(s_->comm, seconds, label);
  }
  double flops_per_second() const override { return api->accelSimFlopsPerSecond(s_->comm); }
  void on_step(int64_t step) override { api->accelSimOnStep(s_->comm, static_cast<long long>(step)); }
};

std::shared_ptr<Communicator> make(const GroupConfig& c, const NcclApi* api) {
  ACCEL_CHECK(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, Status::InvalidArgument, "nccl: rank ", c.rank,
              " is outside a world of ", c.world_size);
  int devices = 0;
  const cudaError_t e = api->cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    fail(Status::Unsupported, "nccl: this process sees no CUDA device (cudaGetDeviceCount: ",
         e == cudaSuccess ? "0 devices" : api->cudaGetErrorString(e), "); on CPUs use the gloo backend (ACCEL_BACKEND=gloo)");
  const int device = c.device >= 0 ? c.device : c.local_rank % devices;
  ACCEL_CHECK(device < devices, Status::InvalidArgument, "nccl: CUDA device ", device, " does not exist (this process sees ",
              devices, ")");
  if (api->accelSimConfigError) {  // a bad ACCEL_SIM_* setting: fail here, before meeting the others
    char why[1024];
    if (api->accelSimConfigError(why, sizeof why) > 0) fail(Status::InvalidArgument, "nccl: ", why);
  }
  std::shared_ptr<Store> store = group_store(c);
  meet(*store, c);
  auto st = std::make_shared<State>();
  st->api = api;
  st->device = device;
  st->rank = c.rank;
  st->size = c.world_size;
  st->timeout = c.timeout;
  cuda_check(api, api->cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  // process 0 makes the unique id; the others read it from the store
  ncclUniqueId id;
  const std::string key = "accel/nccl/unique_id";
  if (c.rank == 0) {
    const ncclResult_t r = api->ncclGetUniqueId(&id);
    if (r != ncclSuccess) st->fail(r, "ncclGetUniqueId");
    store->set(key, Bytes(id.internal, id.internal + sizeof id.internal));
  } else {
    const Bytes b = store->get(key);
    ACCEL_CHECK(b.size() == sizeof id.internal, Status::Communication, "nccl: the unique id in the store has ", b.size(),
                " bytes, not ", sizeof id.internal);
    std::memcpy(id.internal, b.data(), b.size());
  }
  cuda_check(api, api->cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; settle() polls it against the timeout
  try {
    st->settle(api->ncclCommInitRankConfig(&st->comm, c.world_size, id, c.rank, &config), "ncclCommInitRankConfig");
  } catch (...) {
    if (st->stream) api->cudaStreamDestroy(st->stream);
    st->stream = nullptr;
    throw;
  }
  if (api->simulated) {
    return std::make_shared<SimNcclCommunicator>(std::move(st), std::move(store), c.local_rank, c.local_world_size);
  }
  return std::make_shared<NcclCommunicator>(std::move(st), std::move(store), c.local_rank, c.local_world_size);
}

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(const GroupConfig& c) { return make(c, &real_nccl_api()); }

std::shared_ptr<Communicator> make_sim_nccl_communicator(const GroupConfig& c) { return make(c, &sim_nccl_api()); }

std::string sim_nccl_library() { return sim_nccl_api().library; }

SimMemoryHooks sim_nccl_memory_hooks() {
  const NcclApi& api = sim_nccl_api();
  SimMemoryHooks h;
  h.charge = api.accelSimMemCharge;
  h.release = api.accelSimMemRelease;
  return h;
}

const NcclApi& sim_nccl_api() {
  static std::mutex mu;
  static NcclApi* loaded = nullptr;
  std::lock_guard<std::mutex> lk(mu);
  if (loaded) return *loaded;
  std::vector<std::string> tried;
  const char* given = std::getenv("ACCEL_SIM_NCCL_LIBRARY");
  if (given && *given) {
    tried.push_back(given);
  } else {
    const std::string dir = files::own_directory();
    if (!dir.empty()) tried.push_back(dir + "/libaccel-nccl-sim.so");
    tried.push_back("libaccel-nccl-sim.so");  // the loader's search path
  }
  void* h = nullptr;
  std::string errors;
  for (const auto& path : tried) {
    // RTLD_LOCAL: its nccl* and cuda* names stay out of the process's global scope
    h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      link_map* lm = nullptr;  // the file the loader found, for messages and `accel env`
      tried = {dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name ? lm->l_name : path};
      break;
    }
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : path);
  }
  ACCEL_CHECK(h != nullptr, Status::Unsupported, "backend 'sim': cannot load the simulated NCCL library (", errors,
              "); set ACCEL_SIM_NCCL_LIBRARY to the path of libaccel-nccl-sim.so");
  static NcclApi api;  // filled once, kept for the process's life
  static std::string path;
  path = tried.front();
  NcclApi* a = &api;
  a->library = path.c_str();
  a->simulated = true;
  auto need = [&](auto& slot, const char* name) {
    void* f = dlsym(h, name);
    ACCEL_CHECK(f != nullptr, Status::Unsupported, "backend 'sim': ", tried.front(), " lacks ", name,
                " (a library of another version?)");
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(f);
  };
#define ACCEL_SIM(f) need(a->f, #f);
  ACCEL_NCCL_FUNCTIONS(ACCEL_SIM)
  ACCEL_NCCL_SIM_FUNCTIONS(ACCEL_SIM)
#undef ACCEL_SIM
  loaded = a;
  return *loaded;
}

namespace {

// The first of `names` already in the process (dlopen with RTLD_NOLOAD: a CUDA libtorch's
// own libnccl and libcudart, so that one copy of each runs), else the first the loader finds.
// `given` (an environment variable's value) replaces the names. Returns the handle and the
// file, or null with what was tried appended to `errors`.
void* open_first(const char* given, std::vector<std::string> names, std::string& file, std::string& errors) {
  if (given && *given) names = {given};
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& name : names) {
      void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | (pass == 0 ? RTLD_NOLOAD : 0));
      if (h) {
        link_map* lm = nullptr;
        file = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name ? lm->l_name : name;
        return h;
      }
      if (pass == 1) {
        const char* e = dlerror();
        errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name);
      }
    }
  return nullptr;
}

}  // namespace

const NcclApi& real_nccl_api() {
  static std::mutex mu;
  static const NcclApi* loaded = nullptr;
  static std::string failed;  // a load fails once and says the same thereafter
  std::lock_guard<std::mutex> lk(mu);
  if (loaded) return *loaded;
  ACCEL_CHECK(failed.empty(), Status::Unsupported, failed);
  std::string nccl_file, cudart_file, errors;
  void* nccl = open_first(std::getenv("ACCEL_NCCL_LIBRARY"), {"libnccl.so.2", "libnccl.so"}, nccl_file, errors);
  void* cudart = open_first(std::getenv("ACCEL_CUDART_LIBRARY"),
                            {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}, cudart_file, errors);
  std::string why;
  if (!nccl || !cudart)
    why = std::string("nccl: cannot load ") + (!nccl ? "NCCL" : "") + (!nccl && !cudart ? " and " : "") +
          (!cudart ? "the CUDA runtime" : "") + " (" + errors +
          "): install NCCL and the CUDA runtime, or name them with ACCEL_NCCL_LIBRARY and ACCEL_CUDART_LIBRARY; "
          "on CPUs use ACCEL_BACKEND=gloo, or ACCEL_BACKEND=sim for simulated GPUs";
  static NcclApi api;
  static std::string names;
  if (why.empty()) {
    auto need = [&](auto& slot, const char* name) {
      void* h = std::strncmp(name, "cuda", 4) == 0 ? cudart : nccl;
      void* f = dlsym(h, name);
      if (!f && why.empty())
        why = std::string("nccl: ") + (h == nccl ? nccl_file : cudart_file) + " lacks " + name + " (a library too old?)";
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(f);
    };
#define ACCEL_REAL(f) need(api.f, #f);
    ACCEL_NCCL_FUNCTIONS(ACCEL_REAL)
#undef ACCEL_REAL
  }
  if (!why.empty()) {
    failed = why;
    fail(Status::Unsupported, why);
  }
  int version = 0;
  using GetVersion = ncclResult_t (*)(int*);
  if (auto v = reinterpret_cast<GetVersion>(dlsym(nccl, "ncclGetVersion"))) v(&version);
  names = nccl_file + (version > 0 ? " (NCCL " + std::to_string(version / 10000) + "." +
                                         std::to_string(version / 100 % 100) + "." + std::to_string(version % 100) + ")"
                                   : "") +
          "; " + cudart_file;
  api.library = names.c_str();
  api.simulated = false;
  loaded = &api;
  return *loaded;
}

std::string real_nccl_library() { return real_nccl_api().library; }

}  // namespace accel::comm
