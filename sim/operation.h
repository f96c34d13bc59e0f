// What a rank posts: an operation (a collective or one side of a send/recv), its
// fingerprint (what every rank must agree on for the same collective number), and the slots
// of a rank's stream. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "sim/cost.h"

namespace accel::sim {

enum class OpKind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Barrier, Send, Recv };

inline const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::Barrier: return "barrier";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
  }
  return "?";
}

// The cost model's name for it.
inline CollKind coll_kind(OpKind k) {
  switch (k) {
    case OpKind::AllReduce: return CollKind::AllReduce;
    case OpKind::ReduceScatter: return CollKind::ReduceScatter;
    case OpKind::AllGather: return CollKind::AllGather;
    case OpKind::Broadcast: return CollKind::Broadcast;
    case OpKind::Reduce: return CollKind::Reduce;
    case OpKind::Barrier: return CollKind::Barrier;
    default: return CollKind::SendRecv;
  }
}

struct Op {
  OpKind kind;
  int rank;
  uint64_t seq = 0;  // collectives: the rank's collective number (1-based); p2p: per pair
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  comm::DataType t = comm::DataType::Float32;
  comm::RedOp op = comm::RedOp::Sum;
  double premul = 1.0;
  int root = 0;   // collectives with a root
  int peer = -1;  // p2p
  bool done = false;
  comm::Result result = comm::Result::Success;
  std::string error;
  double launch_t = 0.0, start_t = 0.0, end_t = 0.0;
  bool in_group = false;
  uint32_t post_index = 0;  // recording: this collective's number in the rank's replay program

  bool collective() const { return kind != OpKind::Send && kind != OpKind::Recv; }
  // p2p: the sending and the receiving rank.
  int src() const { return kind == OpKind::Send ? rank : peer; }
  int dst() const { return kind == OpKind::Send ? peer : rank; }
  // The size of this rank's buffer: count elements.
  size_t bytes() const { return count * comm::dtype_size(t); }

  std::string describe() const {
    std::ostringstream os;
    os << kind_name(kind);
    if (collective()) os << " #" << seq;
    os << "(count=" << count << ", " << comm::dtype_name(t);
    if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter || kind == OpKind::Reduce)
      os << ", " << comm::op_name(op);
    if (kind == OpKind::Broadcast || kind == OpKind::Reduce) os << ", root=" << root;
    if (kind == OpKind::Send) os << ", to rank " << peer;
    if (kind == OpKind::Recv) os << ", from rank " << peer;
    os << ")";
    return os.str();
  }
  // The fingerprint: what every rank must agree on for the same collective number.
  bool same_call(const Op& o) const {
    return kind == o.kind && count == o.count && t == o.t &&
           ((kind != OpKind::AllReduce && kind != OpKind::ReduceScatter && kind != OpKind::Reduce) || op == o.op) &&
           ((kind != OpKind::Broadcast && kind != OpKind::Reduce) || root == o.root);
  }
};
using OpPtr = std::shared_ptr<Op>;

// One entry of a rank's stream: a single operation, or all operations of a group.
struct Slot {
  std::vector<OpPtr> ops;
  bool all_done() const {
    for (const auto& o : ops)
      if (!o->done) return false;
    return true;
  }
};

}  // namespace accel::sim
