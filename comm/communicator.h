// The Communicator: one interface, in NCCL's vocabulary, that every strategy (DDP, ZeRO)
// is written against. Backends: local (one rank), sim (the simulator), later gloo and nccl.
// Torch-free: buffers are raw pointers with a count and a data type, as in nccl.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace accel::comm {

class Store;

// The element types of nccl.h (ncclInt8 ... ncclBfloat16).
enum class DataType : int {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  BFloat16 = 9,
};
constexpr int kNumDataTypes = 10;

// The reduction operations of nccl.h. PreMulSum multiplies each rank's input by a scalar
// (of the operation's data type, or a host double) before summing.
enum class RedOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4, PreMulSum = 5 };
constexpr int kNumRedOps = 6;

// Mirrors ncclResult_t (0..7), plus Timeout, which NCCL lacks (it hangs instead).
enum class Result : int {
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
  InProgress = 7,
  Timeout = 8,
};

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);
const char* op_name(RedOp op);
const char* result_name(Result r);
// The accel status a communication result surfaces as through the C ABI.
Status to_status(Result r);

// A failed communication call: the ncclResult_t-like code and a message naming the ranks
// and calls involved.
class CommError : public Error {
 public:
  CommError(Result r, const std::string& msg) : Error(to_status(r), msg), result_(r) {}
  Result result() const noexcept { return result_; }

 private:
  Result result_;
};

// An asynchronous operation. Operations posted by one rank complete in the order posted.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes; throws CommError if it failed.
  virtual void wait() = 0;
  // Non-blocking: true once complete (successfully or not).
  virtual bool test() = 0;
  // Waits up to `d`: true once complete (then as wait(): throws CommError if it failed),
  // false while it still runs. The default polls test(); backends that can block with a
  // deadline do (comm/guard.h checks a long wait across the processes in between).
  virtual bool wait_for(std::chrono::milliseconds d);
  // The backend's own Work under any wrappers (staging, unpacking, the guard), for what
  // reads the backend's record of it (the simulator's clock: when it ended).
  virtual const Work* underlying() const { return this; }
};

// The operations of the interface below, for capability queries (Communicator::supports).
enum class Collective : int { AllReduce = 0, ReduceScatter, AllGather, Broadcast, Reduce, Send, Recv, Barrier };
constexpr int kNumCollectives = 8;
const char* collective_name(Collective c);  // "all_reduce", "reduce_scatter"...
// Whether a call of this kind has a reduction (all_reduce, reduce_scatter, reduce) or a root
// (broadcast, reduce): the fields of its fingerprint that apply.
bool collective_has_op(Collective c);
bool collective_has_root(Collective c);
// A call as the simulator writes an operation (sim/operation.h) and the checks across
// processes name it: "all_reduce #5(count=4, float32, sum)", "broadcast #2(count=8,
// float64, root=1)", "barrier #3", "send(count=4, int32, to rank 1)" (send and recv are not
// numbered; `op` only where the kind has one, `root` and `peer` likewise).
std::string describe_call(Collective k, uint64_t number, uint64_t count, DataType t, RedOp op, int root, int peer);

// Where a buffer's memory is. Every operation's buffers are on one device; a backend says
// which it can reach (reaches()), and the runtime stages what it cannot through host memory
// (comm/tensors.h), so the same strategy code runs on a CPU, a GPU, the simulator.
struct Device {
  enum class Kind : int { Host = 0, Cuda = 1 };
  Kind kind = Kind::Host;
  int index = 0;
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
};

// The scalar of PreMulSum: a host value applied in the operation's data type.
struct PreMul {
  double value = 1.0;
};

// The simulator's virtual clock and fault injection, which a training context reports to:
// the compute it estimates (forward, backward) and the optimizer steps it starts. The
// simulator's communicators implement it beside Communicator; real backends do not, and the
// runtime finds it with dynamic_cast (comm::clock_of), so nothing simulated is in
// Communicator's interface.
class ComputeClock {
 public:
  virtual ~ComputeClock() = default;
  // Charges `seconds` of compute to this rank's virtual clock.
  virtual void charge_compute(double seconds, const char* label) = 0;
  // The rate (FLOP/s) at which estimated work becomes virtual time (the cost model's).
  virtual double flops_per_second() const = 0;
  void charge_flops(double flops, const char* label) {
    const double fps = flops_per_second();
    if (fps > 0 && flops > 0) charge_compute(flops / fps, label);
  }
  // The rank starts optimizer step `step` (1-based): fault injection may kill it here.
  virtual void on_step(int64_t step) = 0;
  // `bytes` crossed between the device and its host's memory (offloaded optimizer state and
  // weights): the simulator charges their time over the topology's host link and counts
  // them; a clock that does not model the link ignores them.
  virtual void charge_host_transfer(uint64_t bytes, const char* label) { (void)bytes, (void)label; }
  // `bytes` go from the device to the host beside the compute (a copy stream): from the end
  // of `after` (the collective that produced them; null: from now), once the link is free.
  // The compute waits for them only at wait_host_transfers. Counted as charge_host_transfer's.
  virtual void post_host_transfer(uint64_t bytes, const char* label, const Work* after) {
    (void)after;
    charge_host_transfer(bytes, label);
  }
  // The compute waits for the posted transfers (before the offloaded step reads them).
  virtual void wait_host_transfers() {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rank within its node (machine) and the number of ranks on that node.
  virtual int local_rank() const { return rank(); }
  virtual int local_size() const { return size(); }
  virtual std::string backend() const = 0;

  // All operations are asynchronous: they return a Work to wait on. Buffers must stay
  // valid and untouched until the Work completes. Outside a group, posting may block until
  // the operation can start (as NCCL's calls on a busy stream do); inside a group nothing
  // runs before group_end().
  //
  // In-place rules (as NCCL): all_reduce, broadcast, reduce: send == recv.
  // reduce_scatter: recv == send + rank * recvcount (in elements).
  // all_gather: send == recv + rank * sendcount.
  virtual std::shared_ptr<Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                           PreMul premul = {}) = 0;
  virtual std::shared_ptr<Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                               PreMul premul = {}) = 0;
  virtual std::shared_ptr<Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) = 0;
  virtual std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) = 0;
  // recv is only written (and only needs to be valid) on the root.
  virtual std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                                       PreMul premul = {}) = 0;
  virtual std::shared_ptr<Work> send(const void* buf, size_t count, DataType t, int peer) = 0;
  virtual std::shared_ptr<Work> recv(void* buf, size_t count, DataType t, int peer) = 0;
  // Returns when every rank has reached the barrier.
  virtual void barrier() = 0;

  // ncclGroupStart/End: operations posted between them are launched together at
  // group_end (needed for send/recv pairs that would otherwise deadlock). Nested groups
  // count; group_end without group_start is InvalidUsage.
  virtual void group_start() = 0;
  virtual void group_end() = 0;

  // Whether this backend's operations can read and write memory on `d` (local and sim: the
  // host; nccl: its CUDA device). Raw-pointer calls must pass reachable buffers.
  virtual bool reaches(const Device& d) const { return d.kind == Device::Kind::Host; }
  // Where buffers it cannot reach are staged (comm/tensors.h): the host, or for nccl
  // its CUDA device (the runtime's host counters and metadata go through it there).
  virtual Device home() const { return Device{}; }

  // The rendezvous store the processes of this world met through (real-process backends);
  // null for backends whose ranks share a process (local, sim). The runtime checks that the
  // processes agree on their configuration through it (Accelerator::prepare).
  virtual Store* store() { return nullptr; }

  // Whether this backend implements `op` for element type `t`. Strategies check what they
  // need at prepare, so a missing collective is a clear error on every rank instead of a
  // failure mid-step.
  virtual bool supports(Collective op, DataType t) const {
    (void)op;
    (void)t;
    return true;
  }

  // Whether its collectives move through memory shared by the processes (comm/shm.h) rather
  // than the backend's own transport.
  virtual bool shared_memory() const { return false; }
};

// The single-rank backend: collectives are copies (or scalings), send/recv to oneself
// pair up in a group, everything completes immediately.
std::unique_ptr<Communicator> make_local_communicator();

// The clock the simulator attached to `c` (its communicators are clocks too); null for
// real backends.
inline ComputeClock* clock_of(Communicator& c) { return dynamic_cast<ComputeClock*>(&c); }

}  // namespace accel::comm
