// The simulated NCCL library (libaccel-nccl-sim.so, sim/nccl/) through its C API alone,
// as a program written against nccl.h would call it: processes forked by the test, the
// unique id passed over a pipe, every collective with its results checked element by
// element (every data path: staged through the segment, direct access to the peers' memory
// by cross-memory attach, and through the peers' arenas for cudaMalloc's memory, alone and
// mixed with host memory), the arena's budget and its memory given back, send/recv in a group
// beyond the ring buffer's size, blocking and non-blocking creation, invalid arguments, an
// abort seen by a peer, mismatched calls. Torch-free.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/kernels.h"
#include "comm/nccl/nccl_abi.h"

using namespace accel::nccl_abi;

// The functions of nccl.h and the CUDA runtime the library exports (linked directly).
extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t*);
const char* ncclGetLastError(ncclComm_t);
const char* ncclGetErrorString(ncclResult_t);
ncclResult_t ncclCommAbort(ncclComm_t);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t);
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned int);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned int);
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventDestroy(cudaEvent_t);
cudaError_t cudaEventQuery(cudaEvent_t);
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int);
cudaError_t cudaMalloc(void**, size_t);
cudaError_t cudaFree(void*);
const char* cudaGetErrorString(cudaError_t);
size_t accelSimDataPaths(ncclComm_t, unsigned long long*, size_t);
int accelSimEventWait(cudaEvent_t, unsigned int);
}

namespace {

// A failed check in a child: print it and exit 1 (the parent reports the child's output).
#define REQUIRE(cond, ...)                                                  \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "rank %d: %s: ", g_rank, #cond);                 \
      std::fprintf(stderr, __VA_ARGS__);                                    \
      std::fprintf(stderr, "\n");                                           \
      std::_Exit(1);                                                        \
    }                                                                       \
  } while (0)

int g_rank = -1;

// Waits for everything enqueued on `s` (an event after it), or for an asynchronous error.
ncclResult_t sync(ncclComm_t c, cudaStream_t s, double limit_s = 30) {
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, kCudaEventDisableTiming);
  cudaEventRecord(e, s);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  ncclResult_t out = ncclSuccess;
  while (cudaEventQuery(e) == cudaErrorNotReady) {
    ncclCommGetAsyncError(c, &out);
    if (out != ncclSuccess) break;
    if (std::chrono::steady_clock::now() > deadline) {
      out = ncclInternalError;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  cudaEventDestroy(e);
  return out;
}

// Runs body(rank, comm, stream) in n forked processes that share one unique id (rank 0
// makes it and writes it to the others over pipes); returns each child's exit status.
std::vector<int> run(int n, const std::function<void(int, ncclComm_t, cudaStream_t)>& body,
                     const std::vector<std::string>& env = {}, bool blocking = false) {
  std::vector<int> pipes(2 * static_cast<size_t>(n));
  for (int r = 1; r < n; ++r)
    if (pipe(&pipes[2 * r]) != 0) return {};
  std::vector<pid_t> kids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      g_rank = r;
      for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
      ncclUniqueId id;
      if (r == 0) {
        REQUIRE(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
        for (int q = 1; q < n; ++q) REQUIRE(write(pipes[2 * q + 1], &id, sizeof id) == sizeof id, "write id");
      } else {
        REQUIRE(read(pipes[2 * r], &id, sizeof id) == sizeof id, "read id");
      }
      ncclComm_t comm = nullptr;
      if (blocking) {
        REQUIRE(ncclCommInitRank(&comm, n, id, r) == ncclSuccess, "blocking init");
      } else {
        ncclConfig_t cfg{};
        cfg.size = sizeof cfg;
        cfg.magic = kConfigMagic;
        cfg.blocking = 0;
        ncclResult_t res = ncclCommInitRankConfig(&comm, n, id, r, &cfg);
        while (res == ncclInProgress) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          ncclCommGetAsyncError(comm, &res);
        }
        REQUIRE(res == ncclSuccess, "init: %s (%s)", ncclGetErrorString(res), ncclGetLastError(comm));
      }
      cudaStream_t s;
      REQUIRE(cudaStreamCreateWithFlags(&s, kCudaStreamNonBlocking) == cudaSuccess, "stream");
      body(r, comm, s);
      std::fflush(nullptr);
      std::exit(0);
    }
    kids.push_back(pid);
  }
  std::vector<int> status;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    status.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  for (int fd : pipes)
    if (fd > 0) close(fd);
  return status;
}

void expect_all_ok(const std::vector<int>& st) {
  ASSERT_FALSE(st.empty());
  for (size_t r = 0; r < st.size(); ++r) EXPECT_EQ(st[r], 0) << "rank " << r << " (its messages are above)";
}

// Every collective of float32 (sum, max, avg, premulsum), bf16 (sum) and int64 (prod),
// in and out of place, with sizes that cross the chunking of both data paths; fp16 and bf16
// rounded as NCCL's ring rounds them.
void collectives(int r, ncclComm_t c, cudaStream_t s, int n) {
  for (size_t count : {size_t(1), size_t(1000), size_t(3) << 20}) {  // 3M floats: 12 MiB, several chunks
    std::vector<float> x(count), y(count, -1.f);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>((i % 13) + r);
    auto want_sum = [&](size_t i) { return static_cast<float>(n * (i % 13)) + static_cast<float>(n * (n - 1) / 2); };
    REQUIRE(ncclAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "all_reduce");
    REQUIRE(sync(c, s) == ncclSuccess, "all_reduce: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(y[i] == want_sum(i), "all_reduce[%zu] = %g", i, double(y[i]));
    // in place, max
    std::vector<float> z = x;
    REQUIRE(ncclAllReduce(z.data(), z.data(), count, ncclFloat32, ncclMax, c, s) == ncclSuccess, "max");
    REQUIRE(sync(c, s) == ncclSuccess, "max: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(z[i] == static_cast<float>(i % 13 + n - 1), "max[%zu]", i);
    // premulsum by 0.5 (exact in binary)
    float half = 0.5f;
    ncclRedOp_t op;
    REQUIRE(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat32, ncclScalarHostImmediate, c) == ncclSuccess, "premul");
    REQUIRE(ncclAllReduce(x.data(), y.data(), count, ncclFloat32, op, c, s) == ncclSuccess, "premul all_reduce");
    REQUIRE(sync(c, s) == ncclSuccess, "premulsum: %s", ncclGetLastError(c));
    REQUIRE(ncclRedOpDestroy(op, c) == ncclSuccess, "destroy op");
    for (size_t i = 0; i < count; ++i) REQUIRE(y[i] == want_sum(i) / 2, "premulsum[%zu]", i);
    // reduce-scatter (count per rank), all-gather, broadcast, reduce to the last rank
    std::vector<float> big(count * n), part(count, 0.f);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i % 7) * (r + 1));
    REQUIRE(ncclReduceScatter(big.data(), part.data(), count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "rs");
    REQUIRE(sync(c, s) == ncclSuccess, "reduce_scatter: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i)
      REQUIRE(part[i] == static_cast<float>(((r * count + i) % 7) * (n * (n + 1) / 2)), "reduce_scatter[%zu]", i);
    std::vector<float> gathered(count * n, -1.f);
    REQUIRE(ncclAllGather(x.data(), gathered.data(), count, ncclFloat32, c, s) == ncclSuccess, "all_gather");
    REQUIRE(sync(c, s) == ncclSuccess, "all_gather: %s", ncclGetLastError(c));
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; i += 97)
        REQUIRE(gathered[q * count + i] == static_cast<float>((i % 13) + q), "all_gather[%d][%zu]", q, i);
    std::vector<float> b = x;
    REQUIRE(ncclBroadcast(b.data(), b.data(), count, ncclFloat32, 1 % n, c, s) == ncclSuccess, "broadcast");
    REQUIRE(sync(c, s) == ncclSuccess, "broadcast: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(b[i] == static_cast<float>((i % 13) + 1 % n), "broadcast[%zu]", i);
    std::vector<float> red(count, -1.f);
    REQUIRE(ncclReduce(x.data(), red.data(), count, ncclFloat32, ncclSum, n - 1, c, s) == ncclSuccess, "reduce");
    REQUIRE(sync(c, s) == ncclSuccess, "reduce: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(r != n - 1 || red[i] == want_sum(i), "reduce[%zu]", i);
  }
  // NCCL's rounding across processes: fp16 and bf16 values that do not add exactly, summed
  // (a small buffer: the ring) and averaged (a large one over several chunks: avg is never
  // NVLS), and reduce-scattered, give the bits the in-process simulator's kernel gives for
  // NCCL's ring order.
  {
    auto value = [](int q, size_t i) {  // every rank can compute every rank's input
      const uint32_t h = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(q * 40503u + 17u);
      return (static_cast<float>(h % 20011u) / 20011.f - 0.5f) * static_cast<float>(1u << (h % 7u));
    };
    const accel::comm::DataType types[] = {accel::comm::DataType::Float16, accel::comm::DataType::BFloat16};
    for (accel::comm::DataType t : types) {
      const ncclDataType_t nt = t == accel::comm::DataType::Float16 ? ncclFloat16 : ncclBfloat16;
      auto to16 = [&](float v) {
        return t == accel::comm::DataType::Float16 ? accel::comm::float_to_half(v) : accel::comm::float_to_bf16(v);
      };
      for (size_t count : {size_t(1000), size_t(3) << 20}) {
        const bool small = count == 1000;
        const ncclRedOp_t nop = small ? ncclSum : ncclAvg;
        const accel::comm::RedOp op = small ? accel::comm::RedOp::Sum : accel::comm::RedOp::Avg;
        std::vector<std::vector<uint16_t>> in(n, std::vector<uint16_t>(count));
        std::vector<const void*> srcs;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < count; ++i) in[q][i] = to16(value(q, i));
          srcs.push_back(in[q].data());
        }
        accel::comm::NcclOrder ring;
        ring.count = count;
        std::vector<uint16_t> want(count), got(count, 0xffff), once(count);
        accel::comm::reduce_nccl(want.data(), srcs.data(), n, 0, count, t, op, 0.0, ring);
        accel::comm::reduce(once.data(), srcs.data(), n, 0, count, t, op, 0.0);  // fp32, rounded once
        REQUIRE(ncclAllReduce(in[r].data(), got.data(), count, nt, nop, c, s) == ncclSuccess, "16-bit all_reduce");
        REQUIRE(sync(c, s) == ncclSuccess, "16-bit all_reduce: %s", ncclGetLastError(c));
        size_t differ = 0;
        for (size_t i = 0; i < count; ++i) {
          REQUIRE(got[i] == want[i], "%s %s[%zu] = %04x, NCCL's ring gives %04x", accel::comm::dtype_name(t),
                  small ? "sum" : "avg", i, got[i], want[i]);
          differ += want[i] != once[i];
        }
        REQUIRE(differ > count / 20, "only %zu of %zu elements round differently from one fp32 rounding", differ, count);
        // reduce-scatter: rank r's segment ends its chain at r
        if (small) {
          std::vector<std::vector<uint16_t>> big(n, std::vector<uint16_t>(count * n));
          std::vector<const void*> seg;
          for (int q = 0; q < n; ++q) {
            for (size_t i = 0; i < count * n; ++i) big[q][i] = to16(value(q + 7, i));
            seg.push_back(big[q].data() + static_cast<size_t>(r) * count);
          }
          accel::comm::NcclOrder mine;
          mine.owner = r;
          accel::comm::reduce_nccl(want.data(), seg.data(), n, 0, count, t, accel::comm::RedOp::Sum, 0.0, mine);
          REQUIRE(ncclReduceScatter(big[r].data(), got.data(), count, nt, ncclSum, c, s) == ncclSuccess, "16-bit rs");
          REQUIRE(sync(c, s) == ncclSuccess, "16-bit reduce_scatter: %s", ncclGetLastError(c));
          for (size_t i = 0; i < count; ++i)
            REQUIRE(got[i] == want[i], "%s reduce_scatter[%zu] = %04x, NCCL's ring gives %04x",
                    accel::comm::dtype_name(t), i, got[i], want[i]);
        }
      }
    }
  }
  // bf16 sum, int64 product, in device memory from cudaMalloc
  std::vector<uint16_t> h(4096);
  for (size_t i = 0; i < h.size(); ++i) h[i] = accel::comm::float_to_bf16(static_cast<float>(i % 5));
  REQUIRE(ncclAllReduce(h.data(), h.data(), h.size(), ncclBfloat16, ncclSum, c, s) == ncclSuccess, "bf16");
  REQUIRE(sync(c, s) == ncclSuccess, "bf16: %s", ncclGetLastError(c));
  for (size_t i = 0; i < h.size(); ++i)
    REQUIRE(accel::comm::bf16_to_float(h[i]) == static_cast<float>(n * (i % 5)), "bf16[%zu]", i);
  int64_t* d = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 16 * sizeof(int64_t)) == cudaSuccess, "cudaMalloc");
  for (int i = 0; i < 16; ++i) d[i] = r + 2;
  REQUIRE(ncclAllReduce(d, d, 16, ncclInt64, ncclProd, c, s) == ncclSuccess, "int64");
  REQUIRE(sync(c, s) == ncclSuccess, "int64: %s", ncclGetLastError(c));
  int64_t want = 1;
  for (int q = 0; q < n; ++q) want *= q + 2;
  for (int i = 0; i < 16; ++i) REQUIRE(d[i] == want, "int64 prod[%d] = %lld", i, static_cast<long long>(d[i]));
  REQUIRE(cudaFree(d) == cudaSuccess, "cudaFree");
}

// How the communicator's collectives moved their data (accelSimDataPaths).
struct Paths {
  unsigned long long arena = 0, attach = 0, staged = 0, attach_calls = 0, resident = 0, tickets_mine = 0,
                     tickets = 0;
};
Paths paths(ncclComm_t c) {
  unsigned long long v[7] = {};
  REQUIRE(accelSimDataPaths(c, v, 7) == 7, "accelSimDataPaths");
  return Paths{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
}

// `count` elements of T from the simulated cudaMalloc (the arena), freed with the object.
template <class T>
struct Device {
  T* p = nullptr;
  size_t count;
  explicit Device(size_t n, T fill = T()) : count(n) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess, "cudaMalloc of %zu", n);
    for (size_t i = 0; i < n; ++i) p[i] = fill;
  }
  ~Device() { REQUIRE(cudaFree(p) == cudaSuccess, "cudaFree"); }
  T& operator[](size_t i) { return p[i]; }
};

// Every collective of float32 on buffers that rank r takes from the simulated cudaMalloc when
// `device(r)`, else from the host's heap; sizes across the direct path's chunks (128 KiB) and
// the segment's slots (16 MiB), in and out of place. Returns the collectives it made.
int mixed_collectives(int r, ncclComm_t c, cudaStream_t s, int n, const std::function<bool(int)>& device) {
  int calls = 0;
  for (size_t count : {size_t(1), size_t(100000), size_t(5) << 20}) {  // 5M floats: 20 MiB
    // a buffer of `k` floats, rank r's kind of memory
    auto buffer = [&](size_t k, float fill) {
      std::shared_ptr<float> b;
      if (device(r)) {
        auto* d = new Device<float>(k, fill);
        b = std::shared_ptr<float>(d->p, [d](float*) { delete d; });
      } else {
        b = std::shared_ptr<float>(new float[k], std::default_delete<float[]>());
        std::fill(b.get(), b.get() + k, fill);
      }
      return b;
    };
    auto x = buffer(count, 0.f), y = buffer(count, -1.f);
    for (size_t i = 0; i < count; ++i) x.get()[i] = static_cast<float>((i % 13) + r);
    auto want_sum = [&](size_t i) { return static_cast<float>(n * (i % 13)) + static_cast<float>(n * (n - 1) / 2); };
    REQUIRE(ncclAllReduce(x.get(), y.get(), count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "all_reduce");
    REQUIRE(sync(c, s) == ncclSuccess, "all_reduce: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(y.get()[i] == want_sum(i), "all_reduce[%zu] = %g", i, double(y.get()[i]));
    // in place
    REQUIRE(ncclAllReduce(x.get(), x.get(), count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "in place");
    REQUIRE(sync(c, s) == ncclSuccess, "in place: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(x.get()[i] == want_sum(i), "in place[%zu]", i);
    calls += 2;
    // reduce-scatter, in place: each rank's part of its own input
    auto big = buffer(count * n, 0.f);
    for (size_t i = 0; i < count * n; ++i) big.get()[i] = static_cast<float>((i % 7) * (r + 1));
    float* part = big.get() + r * count;
    REQUIRE(ncclReduceScatter(big.get(), part, count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "rs");
    REQUIRE(sync(c, s) == ncclSuccess, "reduce_scatter: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i)
      REQUIRE(part[i] == static_cast<float>(((r * count + i) % 7) * (n * (n + 1) / 2)), "reduce_scatter[%zu]", i);
    // all-gather, in place: each rank's input is its part of the output
    auto gathered = buffer(count * n, -1.f);
    for (size_t i = 0; i < count; ++i) gathered.get()[r * count + i] = static_cast<float>((i % 11) + r);
    REQUIRE(ncclAllGather(gathered.get() + r * count, gathered.get(), count, ncclFloat32, c, s) == ncclSuccess, "ag");
    REQUIRE(sync(c, s) == ncclSuccess, "all_gather: %s", ncclGetLastError(c));
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i)
        REQUIRE(gathered.get()[q * count + i] == static_cast<float>((i % 11) + q), "all_gather[%d][%zu]", q, i);
    // broadcast from the last rank, out of place; reduce (max) to rank 0
    auto b = buffer(count, -1.f);
    for (size_t i = 0; i < count; ++i) x.get()[i] = static_cast<float>((i % 5) + r);
    REQUIRE(ncclBroadcast(x.get(), b.get(), count, ncclFloat32, n - 1, c, s) == ncclSuccess, "broadcast");
    REQUIRE(sync(c, s) == ncclSuccess, "broadcast: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(b.get()[i] == static_cast<float>((i % 5) + n - 1), "broadcast[%zu]", i);
    REQUIRE(ncclReduce(x.get(), b.get(), count, ncclFloat32, ncclMax, 0, c, s) == ncclSuccess, "reduce");
    REQUIRE(sync(c, s) == ncclSuccess, "reduce: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i)
      REQUIRE(r != 0 || b.get()[i] == static_cast<float>((i % 5) + n - 1), "reduce[%zu]", i);
    calls += 4;
  }
  return calls;
}

// cudaMalloc's memory is the arena: every collective on it reads and writes the peers' buffers
// with memcpy, not one cross-memory-attach system call, whatever the size, with or without
// cross-memory attach allowed.
TEST(SimNccl, CollectivesOnCudaMallocMemoryGoThroughTheArenas) {
  for (const char* direct : {"ACCEL_SIM_DIRECT=0", "ACCEL_SIM_DIRECT=1"}) {
    SCOPED_TRACE(direct);
    expect_all_ok(run(
        3,
        [](int r, ncclComm_t c, cudaStream_t s) {
          const int calls = mixed_collectives(r, c, s, 3, [](int) { return true; });
          const Paths p = paths(c);
          REQUIRE(p.arena == static_cast<unsigned long long>(calls) && p.attach == 0 && p.staged == 0 &&
                      p.attach_calls == 0,
                  "%d collectives: %llu through the arenas, %llu by attach, %llu staged, %llu attach calls", calls,
                  p.arena, p.attach, p.staged, p.attach_calls);
        },
        {direct}));
  }
}

// A collective on cudaMalloc's memory is done by whichever ranks run (shared tickets, 128 KiB
// of every rank's buffers, or of one rank's block, each): 4 processes on this machine's cores,
// fp16 and bf16 sums and averages, fp16 reduces and reduce-scatters, in and out of place, over
// counts that cross the tickets and the ring's chunks unevenly, give on every rank the bits of
// NCCL's ring order (the in-process simulator's kernel); all-gathers and broadcasts every
// block; and every ticket is done exactly once.
TEST(SimNccl, TheRanksShareTheWorkOfACollectiveInTheArenas) {
  constexpr int kRanks = 4;
  expect_all_ok(run(kRanks, [](int r, ncclComm_t c, cudaStream_t s) {
    const int n = kRanks;
    auto value = [](int q, size_t i) {  // every rank can compute every rank's input
      const uint32_t h = static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(q * 40503u + 29u);
      return (static_cast<float>(h % 20011u) / 20011.f - 0.5f) * static_cast<float>(1u << (h % 7u));
    };
    unsigned long long want_tickets = 0, calls = 0;
    const size_t per = (128 << 10) / 2;  // elements of a ticket (16-bit types)
    for (const bool f16 : {true, false}) {
      const accel::comm::DataType t = f16 ? accel::comm::DataType::Float16 : accel::comm::DataType::BFloat16;
      const ncclDataType_t nt = f16 ? ncclFloat16 : ncclBfloat16;
      auto to16 = [&](float v) { return f16 ? accel::comm::float_to_half(v) : accel::comm::float_to_bf16(v); };
      for (const size_t count : {size_t(777), per * 5 + 12345}) {
        std::vector<std::vector<uint16_t>> in(n, std::vector<uint16_t>(count));
        std::vector<const void*> srcs;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < count; ++i) in[q][i] = to16(value(q, i));
          srcs.push_back(in[q].data());
        }
        for (const bool avg : {false, true}) {
          for (const bool in_place : {false, true}) {
            accel::comm::NcclOrder ring;
            ring.count = count;
            std::vector<uint16_t> want(count);
            const accel::comm::RedOp op = avg ? accel::comm::RedOp::Avg : accel::comm::RedOp::Sum;
            accel::comm::reduce_nccl(want.data(), srcs.data(), n, 0, count, t, op, 0.0, ring);
            Device<uint16_t> x(count), y(count, 0xffff);
            std::copy(in[r].begin(), in[r].end(), x.p);
            uint16_t* out = in_place ? x.p : y.p;
            REQUIRE(ncclAllReduce(x.p, out, count, nt, avg ? ncclAvg : ncclSum, c, s) == ncclSuccess, "all_reduce");
            REQUIRE(sync(c, s) == ncclSuccess, "all_reduce: %s", ncclGetLastError(c));
            for (size_t i = 0; i < count; ++i)
              REQUIRE(out[i] == want[i], "%s %s of %zu (%s)[%zu] = %04x, NCCL's ring gives %04x",
                      accel::comm::dtype_name(t), avg ? "avg" : "sum", count, in_place ? "in place" : "out of place",
                      i, out[i], want[i]);
            want_tickets += (count + per - 1) / per;
            ++calls;
          }
        }
        if (!f16) continue;
        // reduce to rank 2: the chain that ends at the root
        accel::comm::NcclOrder chain;
        chain.count = count;
        chain.owner = 2;
        std::vector<uint16_t> want(count);
        accel::comm::reduce_nccl(want.data(), srcs.data(), n, 0, count, t, accel::comm::RedOp::Sum, 0.0, chain);
        Device<uint16_t> x(count), y(count, 0xffff);
        std::copy(in[r].begin(), in[r].end(), x.p);
        REQUIRE(ncclReduce(x.p, y.p, count, nt, ncclSum, 2, c, s) == ncclSuccess, "reduce");
        REQUIRE(sync(c, s) == ncclSuccess, "reduce: %s", ncclGetLastError(c));
        for (size_t i = 0; i < count && r == 2; ++i)
          REQUIRE(y[i] == want[i], "fp16 reduce of %zu [%zu] = %04x, NCCL's chain gives %04x", count, i, y[i], want[i]);
        want_tickets += (count + per - 1) / per;
        ++calls;
      }
    }
    // reduce-scatter (each rank's block ends its chain at that rank), all-gather and broadcast,
    // in place and out of place: a ticket is a chunk of one rank's block
    {
      const size_t count = per * 2 + 77, chunks = (count + per - 1) / per;
      std::vector<std::vector<uint16_t>> big(n, std::vector<uint16_t>(count * n));
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < count * n; ++i) big[q][i] = accel::comm::float_to_half(value(q + 11, i));
      for (const bool in_place : {false, true}) {
        std::vector<const void*> seg;
        for (int q = 0; q < n; ++q) seg.push_back(big[q].data() + static_cast<size_t>(r) * count);
        accel::comm::NcclOrder mine;
        mine.count = count;
        mine.owner = r;
        std::vector<uint16_t> want(count);
        accel::comm::reduce_nccl(want.data(), seg.data(), n, 0, count, accel::comm::DataType::Float16,
                                 accel::comm::RedOp::Sum, 0.0, mine);
        Device<uint16_t> x(count * n), y(count, 0xffff);
        std::copy(big[r].begin(), big[r].end(), x.p);
        uint16_t* out = in_place ? x.p + static_cast<size_t>(r) * count : y.p;
        REQUIRE(ncclReduceScatter(x.p, out, count, ncclFloat16, ncclSum, c, s) == ncclSuccess, "reduce_scatter");
        REQUIRE(sync(c, s) == ncclSuccess, "reduce_scatter: %s", ncclGetLastError(c));
        for (size_t i = 0; i < count; ++i)
          REQUIRE(out[i] == want[i], "fp16 reduce_scatter (%s)[%zu] = %04x, NCCL's ring gives %04x",
                  in_place ? "in place" : "out of place", i, out[i], want[i]);
        Device<uint16_t> g(count * n, 0xffff), mine_in(count);
        std::copy(big[r].begin(), big[r].begin() + static_cast<std::ptrdiff_t>(count), in_place ? g.p + r * count : mine_in.p);
        REQUIRE(ncclAllGather(in_place ? g.p + r * count : mine_in.p, g.p, count, ncclFloat16, c, s) == ncclSuccess,
                "all_gather");
        REQUIRE(sync(c, s) == ncclSuccess, "all_gather: %s", ncclGetLastError(c));
        for (int q = 0; q < n; ++q)
          REQUIRE(std::equal(big[q].begin(), big[q].begin() + static_cast<std::ptrdiff_t>(count), g.p + q * count),
                  "all_gather (%s): block %d", in_place ? "in place" : "out of place", q);
        Device<uint16_t> b(count, 0xffff);
        std::copy(big[r].begin(), big[r].begin() + static_cast<std::ptrdiff_t>(count), x.p);
        REQUIRE(ncclBroadcast(x.p, in_place ? x.p : b.p, count, ncclFloat16, 1, c, s) == ncclSuccess, "broadcast");
        REQUIRE(sync(c, s) == ncclSuccess, "broadcast: %s", ncclGetLastError(c));
        REQUIRE(std::equal(big[1].begin(), big[1].begin() + static_cast<std::ptrdiff_t>(count), in_place ? x.p : b.p),
                "broadcast (%s)", in_place ? "in place" : "out of place");
        want_tickets += 2 * chunks * n + chunks;
        calls += 3;
      }
    }
    const Paths p = paths(c);
    REQUIRE(p.arena == calls && p.staged == 0 && p.attach == 0, "%llu collectives: %llu through the arenas, %llu staged",
            calls, p.arena, p.staged);
    REQUIRE(p.tickets == want_tickets, "%llu tickets in all, %llu expected", p.tickets, want_tickets);
    // each ticket done once: the ranks' counts add up (summed through host memory: staged)
    unsigned long long mine = p.tickets_mine, sum = 0;
    REQUIRE(ncclAllReduce(&mine, &sum, 1, ncclUint64, ncclSum, c, s) == ncclSuccess, "sum of tickets");
    REQUIRE(sync(c, s) == ncclSuccess, "sum of tickets: %s", ncclGetLastError(c));
    REQUIRE(sum == want_tickets, "the ranks did %llu tickets, of %llu", sum, want_tickets);
    REQUIRE(paths(c).tickets == want_tickets, "a staged all-reduce took tickets");
  }));
}

// Host memory (outside the arena) still moves, alone or beside ranks whose buffers are in the
// arena: through the segment (the ranks with arena buffers stage theirs after the first
// barrier), or by cross-memory attach for those peers only; and ACCEL_SIM_ARENA=0 turns the
// arenas off.
TEST(SimNccl, BuffersOutsideTheArenaStillMove) {
  // rank 1's buffers are host memory, the others' cudaMalloc's
  auto rank1_host = [](int q) { return q != 1; };
  expect_all_ok(run(
      3,
      [&](int r, ncclComm_t c, cudaStream_t s) {
        // the broadcasts (one in 6 calls) go through the arenas: their root's input is in its
        // arena, and rank 1 writes its host output itself
        const int calls = mixed_collectives(r, c, s, 3, rank1_host);
        const Paths p = paths(c);
        const unsigned long long broadcasts = calls / 6, others = calls - broadcasts;
        REQUIRE(p.arena == broadcasts && p.attach == 0 && p.staged == others && p.attach_calls == 0,
                "staged: %llu arena, %llu attach, %llu staged", p.arena, p.attach, p.staged);
      },
      {"ACCEL_SIM_DIRECT=0"}));
  expect_all_ok(run(
      3,
      [&](int r, ncclComm_t c, cudaStream_t s) {
        const int calls = mixed_collectives(r, c, s, 3, rank1_host);
        const Paths p = paths(c);
        const unsigned long long broadcasts = calls / 6, others = calls - broadcasts;
        REQUIRE(p.arena == broadcasts && p.attach == others && p.staged == 0,
                "attach: %llu arena, %llu attach, %llu staged", p.arena, p.attach, p.staged);
        // only rank 1's buffers need the system calls: rank 1 itself reaches the others' arenas
        REQUIRE((r == 1) == (p.attach_calls == 0), "rank %d made %llu attach calls", r, p.attach_calls);
      },
      {"ACCEL_SIM_DIRECT=1"}));
  expect_all_ok(run(
      2,
      [](int r, ncclComm_t c, cudaStream_t s) {
        const int calls = mixed_collectives(r, c, s, 2, [](int) { return true; });
        const Paths p = paths(c);
        REQUIRE(p.arena == 0 && p.staged == static_cast<unsigned long long>(calls), "arenas off: %llu arena, %llu staged",
                p.arena, p.staged);
      },
      {"ACCEL_SIM_DIRECT=0", "ACCEL_SIM_ARENA=0"}));
}

// The arena holds the budget's allocations and no more (the out-of-memory error unchanged), and
// a freed allocation's memory goes back to the system.
TEST(SimNccl, TheArenaKeepsTheBudgetAndGivesMemoryBack) {
  expect_all_ok(run(
      2,
      [](int r, ncclComm_t c, cudaStream_t s) {
        const size_t mib = 1 << 20;
        void* a = nullptr;
        void* b = nullptr;
        REQUIRE(cudaMalloc(&a, 40 * mib) == cudaSuccess, "40 MiB of 64");
        std::memset(a, 1, 40 * mib);
        REQUIRE(paths(c).resident >= 40 * mib, "resident %llu", paths(c).resident);
        REQUIRE(cudaMalloc(&b, 30 * mib) == cudaErrorMemoryAllocation, "30 MiB more exceed the budget");
        REQUIRE(cudaFree(a) == cudaSuccess, "free");
        REQUIRE(paths(c).resident < mib, "resident after the free: %llu", paths(c).resident);
        // the freed range is handed out again, and still reached by the peers
        Device<float> d(24 * mib / sizeof(float), static_cast<float>(r + 1));
        REQUIRE(ncclAllReduce(d.p, d.p, d.count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "all_reduce");
        REQUIRE(sync(c, s) == ncclSuccess, "all_reduce: %s", ncclGetLastError(c));
        for (size_t i = 0; i < d.count; i += 1021) REQUIRE(d[i] == 3.f, "sum[%zu] = %g", i, double(d[i]));
        REQUIRE(paths(c).arena == 1 && paths(c).attach_calls == 0, "through the arenas");
      },
      {"ACCEL_SIM_GPU_MEM=64MiB"}));
}

TEST(SimNccl, EveryCollectiveStagedThroughTheSegment) {
  expect_all_ok(run(3, [](int r, ncclComm_t c, cudaStream_t s) { collectives(r, c, s, 3); }, {"ACCEL_SIM_DIRECT=0"}));
}

TEST(SimNccl, EveryCollectiveByDirectAccess) {
  expect_all_ok(run(3, [](int r, ncclComm_t c, cudaStream_t s) { collectives(r, c, s, 3); }, {"ACCEL_SIM_DIRECT=1"}));
}

// A ring exchange in one group (each rank sends to the next and receives from the previous),
// 3 MiB each: three times the pair's ring buffer, so the two sides stream through it.
TEST(SimNccl, SendRecvInAGroupStreamsThroughTheRingBuffer) {
  expect_all_ok(run(4, [](int r, ncclComm_t c, cudaStream_t s) {
    const size_t count = (3u << 20) / sizeof(int32_t);
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(r * 1000003 + i);
    const int next = (r + 1) % 4, prev = (r + 3) % 4;
    REQUIRE(ncclGroupStart() == ncclSuccess, "group start");
    REQUIRE(ncclSend(out.data(), count, ncclInt32, next, c, s) == ncclSuccess, "send");
    REQUIRE(ncclRecv(in.data(), count, ncclInt32, prev, c, s) == ncclSuccess, "recv");
    REQUIRE(ncclGroupEnd() == ncclSuccess, "group end");
    REQUIRE(sync(c, s) == ncclSuccess, "send/recv: %s", ncclGetLastError(c));
    for (size_t i = 0; i < count; ++i) REQUIRE(in[i] == static_cast<int32_t>(prev * 1000003 + i), "in[%zu]", i);
  }));
}

TEST(SimNccl, BlockingCreationAndInvalidArguments) {
  expect_all_ok(run(
      2,
      [](int r, ncclComm_t c, cudaStream_t s) {
        float x = 1;
        REQUIRE(ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(42), ncclSum, c, s) == ncclInvalidArgument, "dtype");
        REQUIRE(ncclAllReduce(&x, &x, 1, ncclFloat32, static_cast<ncclRedOp_t>(77), c, s) == ncclInvalidArgument, "op");
        REQUIRE(ncclBroadcast(&x, &x, 1, ncclFloat32, 2, c, s) == ncclInvalidArgument, "root outside the world");
        REQUIRE(ncclSend(&x, 1, ncclFloat32, -1, c, s) == ncclInvalidArgument, "peer -1");
        REQUIRE(ncclGroupEnd() == ncclInvalidUsage, "group end without start");
        REQUIRE(std::string(ncclGetErrorString(ncclRemoteError)).find("remote process") != std::string::npos, "strings");
        REQUIRE(std::string(cudaGetErrorString(cudaErrorNotReady)) == "device not ready", "cuda strings");
        REQUIRE(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, s) == ncclSuccess, "a valid call after them");
        REQUIRE(sync(c, s) == ncclSuccess && x == 2, "sum %g", double(x));
        (void)r;
      },
      {}, /*blocking=*/true));
}

// Rank 1 aborts while rank 0 waits in an all-reduce: rank 0 fails with ncclRemoteError
// naming rank 1, instead of hanging.
TEST(SimNccl, AnAbortedPeerFailsTheOthers) {
  expect_all_ok(run(2, [](int r, ncclComm_t c, cudaStream_t s) {
    float x = 1;
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      REQUIRE(ncclCommAbort(c) == ncclSuccess, "abort");
      return;
    }
    REQUIRE(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, s) == ncclSuccess, "post");
    const ncclResult_t res = sync(c, s, 10);
    REQUIRE(res == ncclRemoteError, "got %s", ncclGetErrorString(res));
    REQUIRE(std::string(ncclGetLastError(c)).find("rank 1 aborted its communicator") != std::string::npos, "%s",
            ncclGetLastError(c));
  }));
}

// Rank 1 of two posts only once rank 0 has made the file `said` (after its timed checks),
// however late either one was scheduled; rank 0 makes it with say().
void wait_for_word(const std::string& said) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (access(said.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  unlink(said.c_str());
}
void say(const std::string& said) {
  std::FILE* f = std::fopen(said.c_str(), "w");
  REQUIRE(f != nullptr, "cannot make %s", said.c_str());
  std::fclose(f);
}

// The host sleeps on an event until the stream thread passes it (accelSimEventWait, what the
// backend's wait uses): while a peer is late, the wait runs out its time and says so, using
// next to no CPU; once the peer posts, it returns as the event passes, the result complete.
TEST(SimNccl, TheHostSleepsOnAnEventUntilTheStreamPassesIt) {
  expect_all_ok(run(2, [](int r, ncclComm_t c, cudaStream_t s) {
    std::vector<float> x(1000, static_cast<float>(r + 1));
    // rank 1 posts once rank 0's timed wait is over (a file rank 0 makes then), however late
    // either one was scheduled
    const std::string said = "/tmp/accel-test-event-wait-" + std::to_string(getppid());
    if (r == 1) wait_for_word(said);
    REQUIRE(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclSum, c, s) == ncclSuccess, "post");
    cudaEvent_t e;
    REQUIRE(cudaEventCreateWithFlags(&e, kCudaEventDisableTiming) == cudaSuccess, "event");
    REQUIRE(cudaEventRecord(e, s) == cudaSuccess, "record");
    if (r == 0) {
      auto cpu_s = [] {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
      };
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_s();
      REQUIRE(accelSimEventWait(e, 50 * 1000) == 0, "the event passed while rank 1 had not posted");
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double used = cpu_s() - c0;
      REQUIRE(waited >= 0.045, "the wait returned after %.3f s, not its 0.05 s", waited);
      REQUIRE(used < 0.5 * waited, "the wait used %.3f s of CPU in %.3f s: it polls", used, waited);
      REQUIRE(cudaEventQuery(e) == cudaErrorNotReady, "query");
      say(said);
    }
    REQUIRE(accelSimEventWait(e, 30u * 1000 * 1000) == 1, "the event did not pass");
    REQUIRE(cudaEventQuery(e) == cudaSuccess, "query after");
    for (float v : x) REQUIRE(v == 3.f, "all_reduce gave %g", static_cast<double>(v));
    REQUIRE(accelSimEventWait(e, 0) == 1, "a passed event");
    REQUIRE(accelSimEventWait(nullptr, 0) == 0, "no event");
    cudaEvent_t host;
    REQUIRE(cudaEventCreateWithFlags(&host, kCudaEventDisableTiming) == cudaSuccess, "event");
    REQUIRE(cudaEventRecord(host, nullptr) == cudaSuccess, "record on the host");
    REQUIRE(accelSimEventWait(host, 0) == 1, "an event of the host's stream has passed");
    cudaEventDestroy(host);
    cudaEventDestroy(e);
  }));
}

// A stream that waits on another stream's event not yet passed (cudaStreamWaitEvent) starts its
// next work only once it passes, and its thread sleeps meanwhile: while rank 1 is late, rank 0's
// process makes next to no context switches (a thread polling every 50 us made thousands a
// second); once rank 1 posts, the waiting stream's own event passes, after the all-reduce.
TEST(SimNccl, AStreamWaitingOnAnotherStreamsEventSleepsUntilItPasses) {
  expect_all_ok(run(2, [](int r, ncclComm_t c, cudaStream_t s) {
    std::vector<float> x(1000, static_cast<float>(r + 1));
    const std::string said = "/tmp/accel-test-stream-wait-" + std::to_string(getppid());
    if (r == 1) wait_for_word(said);
    REQUIRE(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclSum, c, s) == ncclSuccess, "post");
    cudaEvent_t e, after;
    REQUIRE(cudaEventCreateWithFlags(&e, kCudaEventDisableTiming) == cudaSuccess, "event");
    REQUIRE(cudaEventCreateWithFlags(&after, kCudaEventDisableTiming) == cudaSuccess, "event");
    REQUIRE(cudaEventRecord(e, s) == cudaSuccess, "record");
    cudaStream_t other;
    REQUIRE(cudaStreamCreateWithFlags(&other, kCudaStreamNonBlocking) == cudaSuccess, "stream");
    REQUIRE(cudaStreamWaitEvent(other, e, 0) == cudaSuccess, "wait");
    REQUIRE(cudaEventRecord(after, other) == cudaSuccess, "record after the wait");
    if (r == 0) {
      auto switches = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return u.ru_nvcsw + u.ru_nivcsw;
      };
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the stream reaches its wait
      const long before = switches();
      REQUIRE(accelSimEventWait(after, 200 * 1000) == 0, "the waiting stream went on before the event");
      const long made = switches() - before;
      const bool pending = cudaEventQuery(e) == cudaErrorNotReady;
      say(said);  // rank 1 goes on, whatever the checks say
      REQUIRE(pending, "the event passed while rank 1 had not posted");
      REQUIRE(made < 200, "%ld context switches in 0.2 s while the stream waited: it polls", made);
    }
    REQUIRE(accelSimEventWait(after, 30u * 1000 * 1000) == 1, "the waiting stream did not go on");
    REQUIRE(cudaEventQuery(e) == cudaSuccess, "the stream went on before the event it waited for");
    for (float v : x) REQUIRE(v == 3.f, "all_reduce gave %g", static_cast<double>(v));
    cudaEventDestroy(after);
    cudaEventDestroy(e);
    cudaStreamDestroy(other);
  }));
}

// A child forked by a rank's process (a data loader's worker) that ends with exit(), running
// the process's exit hooks, leaves the rank alone: the world goes on, and rank 0's process
// hosts the coordinator (its child used to say goodbye and shut the shared connection down).
TEST(SimNccl, AForkedChildThatExitsLeavesItsRankAlone) {
  expect_all_ok(run(2, [](int r, ncclComm_t c, cudaStream_t s) {
    std::vector<float> x(1000, static_cast<float>(r + 1));
    REQUIRE(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclSum, c, s) == ncclSuccess, "post");
    REQUIRE(sync(c, s) == ncclSuccess, "first: %s", ncclGetLastError(c));
    std::fflush(nullptr);
    const pid_t kid = fork();
    if (kid == 0) std::exit(0);  // atexit handlers run here, in the child
    // (its exit status is not the point: under LeakSanitizer the child reports the threads'
    // memory it never had, and fails, after the process's own exit hooks have run)
    int st = 0;
    REQUIRE(waitpid(kid, &st, 0) == kid, "the child's exit");
    for (int k = 0; k < 3; ++k) {
      std::fill(x.begin(), x.end(), static_cast<float>(r + 1));
      REQUIRE(ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclSum, c, s) == ncclSuccess, "post");
      const ncclResult_t res = sync(c, s, 20);
      REQUIRE(res == ncclSuccess, "after the child's exit: %s (%s)", ncclGetErrorString(res), ncclGetLastError(c));
      for (float v : x) REQUIRE(v == 3.f, "all_reduce gave %g", static_cast<double>(v));
    }
  }));
}

// Different collectives at the same call number fail on every rank, naming both calls.
TEST(SimNccl, MismatchedCallsFailEveryRankNamingThem) {
  expect_all_ok(run(2, [](int r, ncclComm_t c, cudaStream_t s) {
    std::vector<float> x(8, 1.f), y(16, 0.f);
    if (r == 0)
      REQUIRE(ncclAllReduce(x.data(), x.data(), 8, ncclFloat32, ncclSum, c, s) == ncclSuccess, "post");
    else
      REQUIRE(ncclAllGather(x.data(), y.data(), 8, ncclFloat32, c, s) == ncclSuccess, "post");
    const ncclResult_t res = sync(c, s, 10);
    REQUIRE(res == ncclInvalidUsage, "got %s", ncclGetErrorString(res));
    REQUIRE(std::string(ncclGetLastError(c)).find("mismatched collectives: rank 0 called all_reduce #1(count=8, "
                                                  "float32, sum); rank 1 called all_gather #1(count=8, float32)") !=
                std::string::npos,
            "%s", ncclGetLastError(c));
  }));
}

}  // namespace

// NCCL_ALGO, as NCCL reads it: an all-reduce the cost model would run on NVLS runs the ring
// when only the ring is allowed (and rounds as the ring does), and a call it leaves no
// algorithm for fails on every rank with NCCL's invalid usage, naming what there was.
TEST(SimNccl, NcclAlgoChoosesTheAlgorithm) {
  expect_all_ok(run(2, [](int r, ncclComm_t c, cudaStream_t s) {
    std::vector<float> x(8, 1.f), y(16, 0.f);
    REQUIRE(ncclAllGather(x.data(), y.data(), 8, ncclFloat32, c, s) == ncclSuccess, "post");
    const ncclResult_t res = sync(c, s, 10);
    REQUIRE(res == ncclInvalidUsage, "got %s", ncclGetErrorString(res));
    REQUIRE(std::string(ncclGetLastError(c)).find("no algorithm for all_gather of 64 bytes over 2 ranks on 8xH100: "
                                                  "the algorithms allowed ('NVLS') exclude the cost model's (ring)") !=
                std::string::npos,
            "rank %d: %s", r, ncclGetLastError(c));
  }, {"NCCL_ALGO=NVLS"}));
  // an unknown name is the process's configuration error: the communicator's creation fails
  // ("init: ... NCCL_ALGO: unknown algorithm 'Treee' ..." above), so no rank reaches its body
  const std::vector<int> st = run(2, [](int, ncclComm_t, cudaStream_t) { std::exit(0); }, {"NCCL_ALGO=Treee"});
  ASSERT_EQ(st.size(), 2u);
  for (int code : st) EXPECT_NE(code, 0) << "NCCL_ALGO=Treee was accepted";
}

