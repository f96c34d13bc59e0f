// The communicator a rank sees: each call checks its arguments, becomes an operation
// posted to the simulation, and returns a Work that waits on it under the maestro.
#include <algorithm>

#include "comm/kernels.h"
#include "sim/simulation.h"

namespace accel::sim {

using comm::CommError;
using comm::DataType;
using comm::RedOp;
using comm::Result;

namespace {

class SimWork final : public comm::Work {
 public:
  SimWork(Simulation* w, OpPtr op) : w_(w), op_(std::move(op)) {}
  void wait() override {
    std::unique_lock<std::mutex> lk(w_->mu);
    w_->maybe_noise(lk);
    w_->wait_op(op_->rank, op_, lk);
  }
  bool test() override {
    std::lock_guard<std::mutex> lk(w_->mu);
    return op_->done;
  }
  const Op& op() const { return *op_; }  // read under w_->mu

 private:
  Simulation* w_;
  OpPtr op_;
};

class SimCommunicator final : public RankCommunicator {
 public:
  SimCommunicator(Simulation* w, int rank) : w_(w), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return w_->n; }
  int local_rank() const override { return rank_ % w_->topo.gpus_per_node; }
  int local_size() const override {
    const int first = rank_ - local_rank();
    return std::min(w_->topo.gpus_per_node, w_->n - first);
  }
  std::string backend() const override { return "sim"; }
  double flops_per_second() const override { return w_->topo.gpu_flops * w_->topo.mfu; }
  bool supports(comm::Collective op, DataType t) const override {
    for (const auto& [c, dtype] : w_->missing)
      if (c == op && (dtype < 0 || dtype == static_cast<int>(t))) return false;
    return true;
  }

  std::shared_ptr<comm::Work> all_reduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                         comm::PreMul premul) override {
    return submit(reduction(OpKind::AllReduce, send, recv, count, t, op, premul));
  }
  std::shared_ptr<comm::Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                             comm::PreMul premul) override {
    return submit(reduction(OpKind::ReduceScatter, send, recv, recvcount, t, op, premul));
  }
  std::shared_ptr<comm::Work> all_gather(const void* send, void* recv, size_t sendcount, DataType t) override {
    comm::check_dtype(t);
    need(send, recv, sendcount);
    return submit(make(OpKind::AllGather, send, recv, sendcount, t));
  }
  std::shared_ptr<comm::Work> broadcast(const void* send, void* recv, size_t count, DataType t, int root) override {
    comm::check_dtype(t);
    check_rank(root, "root");
    need(rank_ == root ? send : recv, recv, count);
    auto o = make(OpKind::Broadcast, send, recv, count, t);
    o->root = root;
    return submit(o);
  }
  std::shared_ptr<comm::Work> reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                                     comm::PreMul premul) override {
    return submit(reduction(OpKind::Reduce, send, recv, count, t, op, premul, root));
  }
  std::shared_ptr<comm::Work> send(const void* buf, size_t count, DataType t, int peer) override {
    return submit(point_to_point(OpKind::Send, buf, nullptr, count, t, peer));
  }
  std::shared_ptr<comm::Work> recv(void* buf, size_t count, DataType t, int peer) override {
    return submit(point_to_point(OpKind::Recv, nullptr, buf, count, t, peer));
  }
  void barrier() override { submit(make(OpKind::Barrier, nullptr, nullptr, 0, DataType::Uint8))->wait(); }

  void group_start() override {
    std::lock_guard<std::mutex> lk(w_->mu);
    ++w_->ranks[rank_].group_depth;
  }
  void group_end() override {
    std::unique_lock<std::mutex> lk(w_->mu);
    auto& d = w_->ranks[rank_];
    if (d.group_depth == 0) throw CommError(Result::InvalidUsage, "group_end without group_start");
    if (--d.group_depth > 0) return;
    if (!d.group.ops.empty()) {
      d.stream.push_back(std::move(d.group));
      d.group = Slot{};
      w_->progress(rank_);
    }
  }

  void on_step(int64_t step) override {
    std::lock_guard<std::mutex> lk(w_->mu);
    w_->ranks[rank_].faults.at_step(rank_, step);
  }

  void charge_compute(double seconds, const char* label) override {
    std::lock_guard<std::mutex> lk(w_->mu);
    advance_compute(seconds, label ? label : "compute", "");
  }

  // The compute waits for the link (copies posted earlier), then for these bytes.
  void charge_host_transfer(uint64_t bytes, const char* label) override {
    std::lock_guard<std::mutex> lk(w_->mu);
    auto& d = w_->ranks[rank_];
    wait_link(d);
    const double seconds = link_seconds(bytes);
    advance_compute(seconds, label ? label : "host transfer", "\"bytes\":" + std::to_string(bytes));
    d.host_link_t = d.compute_t;
    d.host_bytes += bytes;
    d.host_seconds += seconds;
  }

  // On the host link's lane: from the end of `after` (the op's virtual end, once complete)
  // or now, and after the copies posted before; the compute goes on.
  void post_host_transfer(uint64_t bytes, const char* label, const comm::Work* after) override {
    std::lock_guard<std::mutex> lk(w_->mu);
    auto& d = w_->ranks[rank_];
    double from = d.compute_t;
    const auto* sw = dynamic_cast<const SimWork*>(after ? after->underlying() : nullptr);
    if (sw && sw->op().done) from = sw->op().end_t;
    const double start = std::max(from, d.host_link_t), seconds = link_seconds(bytes);
    if (w_->opts.record_program && seconds > 0 && d.approximate.find("host link") == std::string::npos)
      d.approximate += std::string(d.approximate.empty() ? "" : "; ") + "copies on the host link beside the compute";
    if (w_->opts.record_trace && seconds > 0)
      w_->trace.push_back({rank_, 2, label ? label : "host transfer", start, seconds, "\"bytes\":" + std::to_string(bytes)});
    d.host_link_t = start + seconds;
    d.host_bytes += bytes;
    d.host_seconds += seconds;
  }

  void wait_host_transfers() override {
    std::lock_guard<std::mutex> lk(w_->mu);
    wait_link(w_->ranks[rank_]);
  }

 private:
  double link_seconds(uint64_t bytes) const {
    const double bw = w_->topo.host_link_bandwidth;
    return bw > 0 ? static_cast<double>(bytes) / bw : 0.0;
  }
  // The compute waits for the copies still on the host link (the caller holds w_->mu).
  void wait_link(RankData& d) {
    if (d.host_link_t > d.compute_t)
      advance_compute(d.host_link_t - d.compute_t, "offload: waiting for the copies to the host", "");
  }
  // The rank's compute clock moves on by `seconds`, traced as `name` (the caller holds w_->mu).
  void advance_compute(double seconds, const char* name, std::string args) {
    auto& d = w_->ranks[rank_];
    if (w_->opts.record_trace && seconds > 0) w_->trace.push_back({rank_, 0, name, d.compute_t, seconds, std::move(args)});
    d.compute_t += seconds;
    if (w_->opts.record_program && seconds > 0) {  // consecutive computes are one step
      auto& steps = d.program.steps;
      if (!steps.empty() && steps.back().kind == ReplayStep::Compute)
        steps.back().seconds += seconds;
      else
        d.program.compute(seconds);
    }
  }
  OpPtr make(OpKind k, const void* send, void* recv, size_t count, DataType t) {
    auto o = std::make_shared<Op>();
    o->kind = k;
    o->rank = rank_;
    o->send = send;
    o->recv = recv;
    o->count = count;
    o->t = t;
    return o;
  }
  // all_reduce, reduce_scatter, reduce (with its root): the checks, then the operation.
  OpPtr reduction(OpKind k, const void* send, void* recv, size_t count, DataType t, RedOp op, comm::PreMul premul,
                  int root = 0) {
    comm::check_op(t, op);
    const bool rooted = k == OpKind::Reduce;
    if (rooted) check_rank(root, "root");
    need(send, rooted && rank_ != root ? send : recv, count);  // only the root's recv is written
    auto o = make(k, send, recv, count, t);
    o->op = op;
    o->root = root;
    o->premul = premul.value;
    return o;
  }
  // send (from `send`) or recv (into `recv`): the checks, then the operation.
  OpPtr point_to_point(OpKind k, const void* send, void* recv, size_t count, DataType t, int peer) {
    comm::check_dtype(t);
    check_rank(peer, "peer");
    const void* buf = k == OpKind::Send ? send : recv;
    need(buf, buf, count);
    auto o = make(k, send, recv, count, t);
    o->peer = peer;
    return o;
  }
  std::shared_ptr<comm::Work> submit(const OpPtr& o) {
    std::unique_lock<std::mutex> lk(w_->mu);
    w_->post(rank_, o);
    return std::make_shared<SimWork>(w_, o);
  }
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= w_->n)
      throw CommError(Result::InvalidArgument, std::string(what) + " " + std::to_string(r) + " is not a rank of this " +
                                                   std::to_string(w_->n) + "-rank world");
  }
  static void need(const void* a, const void* b, size_t count) {
    if (count > 0 && (a == nullptr || b == nullptr)) throw CommError(Result::InvalidArgument, "NULL buffer");
  }

  Simulation* w_;
  int rank_;
};

}  // namespace

std::unique_ptr<RankCommunicator> make_sim_communicator(Simulation& sim, int rank) {
  return std::make_unique<SimCommunicator>(&sim, rank);
}

}  // namespace accel::sim
