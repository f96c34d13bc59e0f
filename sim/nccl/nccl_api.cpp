// The simulated NCCL library (sim/nccl/internal.h): nccl.h's functions — posting a call on a
// stream (alone, or in a group), communicators, reduction operators.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/kernels.h"
#include "sim/nccl/internal.h"

namespace {

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
