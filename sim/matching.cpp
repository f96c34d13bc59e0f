// Matching: each posted call gets its number (collectives per rank, send/recv per pair) and
// is compared with the other ranks' calls of that number by fingerprint; mismatches, dead
// peers and deadlocks fail the operations involved with a message naming the ranks and
// the calls, where NCCL would hang.
#include <sstream>

#include "sim/simulation.h"

namespace accel::sim {

using comm::Result;

void Simulation::post(int r, const OpPtr& op) {
  auto& d = ranks[r];
  last_progress = std::chrono::steady_clock::now();
  op->launch_t = d.compute_t + d.faults.delay;
  if (op->collective()) {
    op->seq = ++d.coll_seq;
    ++d.collectives;
    if (opts.record_program) {
      // nccl-tests' size: the all-gather output, the reduce-scatter input, else the buffer
      const bool of_all = op->kind == OpKind::AllGather || op->kind == OpKind::ReduceScatter;
      const uint64_t bytes = of_all ? op->count * comm::dtype_size(op->t) * n : op->count * comm::dtype_size(op->t);
      op->post_index = d.program.post(coll_kind(op->kind), bytes, op->t, op->op);
      if (d.faults.delay > 0 && d.approximate.find("fault delays") == std::string::npos)
        d.approximate += std::string(d.approximate.empty() ? "" : "; ") + "fault delays";
    }
    d.faults.at_collective(r, op->seq);
    auto& e = colls[op->seq];
    if (e.ops.empty()) e.ops.resize(n);
    e.ops[r] = op;
    ++e.posted;
    if (e.failed) {
      std::string msg = e.error;
      if (e.first && !op->same_call(*e.first)) msg += "; rank " + std::to_string(r) + " called " + op->describe();
      fail_op(op, e.result, msg);
    } else if (!e.first) {
      e.first = op;
    } else if (!op->same_call(*e.first)) {
      std::ostringstream os;
      os << "mismatched collectives at call #" << op->seq << ":";
      for (int q = 0; q < n; ++q)
        if (e.ops[q]) os << " rank " << q << " called " << e.ops[q]->describe() << ";";
      os << " every rank must make the same calls in the same order";
      fail_collective(op->seq, Result::InvalidUsage, os.str());
    } else {
      // a rank that died before reaching it (the lowest one, kept by rank_died: no scan per post)
      if (first_dead >= 0) fail_collective(op->seq, Result::RemoteError, died(first_dead));
    }
  } else {
    if (opts.record_program && d.approximate.find("send/recv") == std::string::npos)
      d.approximate += std::string(d.approximate.empty() ? "" : "; ") + "send/recv (not replayed)";
    const bool is_send = op->kind == OpKind::Send;
    const int src = op->src(), dst = op->dst();
    op->seq = is_send ? ++d.send_seq[op->peer] : ++d.recv_seq[op->peer];
    auto& pr = p2p[{src, dst, op->seq}];
    (is_send ? pr.first : pr.second) = op;
    if (ranks[op->peer].state == RankState::Dead) fail_op(op, Result::RemoteError, died(op->peer));
    OpPtr other = is_send ? pr.second : pr.first;
    if (other && (other->count != op->count || other->t != op->t)) {
      std::string msg = "send/recv mismatch between rank " + std::to_string(src) + " and rank " + std::to_string(dst) +
                        ": " + pr.first->describe() + " vs " + pr.second->describe();
      fail_op(pr.first, Result::InvalidUsage, msg);
      fail_op(pr.second, Result::InvalidUsage, msg);
    }
  }
  if (d.group_depth > 0) {
    op->in_group = true;
    d.group.ops.push_back(op);
  } else {
    d.stream.push_back(Slot{{op}});
    progress(r);
  }
}

void Simulation::fail_op(const OpPtr& op, Result r, const std::string& msg) {
  if (op->done) return;
  op->done = true;
  op->result = r;
  op->error = msg;
}

void Simulation::fail_collective(uint64_t seq, Result r, const std::string& msg) {
  auto& e = colls[seq];
  if (e.ops.empty()) e.ops.resize(n);
  e.failed = true;
  e.result = r;
  e.error = msg;
  for (auto& o : e.ops)
    if (o) fail_op(o, r, msg);
}

std::string Simulation::died(int r) const { return "rank " + std::to_string(r) + " died: " + ranks[r].death; }

void Simulation::rank_died(int r, const std::string& why) {
  auto& d = ranks[r];
  d.state = RankState::Dead;
  d.death = why;
  if (first_dead < 0 || r < first_dead) first_dead = r;
  const std::string msg = died(r);
  for (auto& [seq, e] : colls)
    if (!e.failed && (e.ops.empty() || !e.ops[r] || !e.ops[r]->done)) {
      bool anyone_waiting = false;
      for (auto& o : e.ops) anyone_waiting |= o && !o->done;
      if (anyone_waiting) fail_collective(seq, Result::RemoteError, msg);
    }
  for (auto& [key, pr] : p2p) {
    auto [src, dst, seq] = key;
    if (src != r && dst != r) continue;
    if (pr.first) fail_op(pr.first, Result::RemoteError, msg);
    if (pr.second) fail_op(pr.second, Result::RemoteError, msg);
  }
  for (auto& slot : d.stream)
    for (auto& o : slot.ops) fail_op(o, Result::RemoteError, msg);
}

void Simulation::diagnose_deadlock() {
  for (int r = 0; r < n; ++r) {
    auto& d = ranks[r];
    if (d.state != RankState::Blocked || !d.waiting || d.waiting->done) continue;
    const OpPtr& op = d.waiting;
    if (op->collective()) {
      auto& e = colls[op->seq];
      std::ostringstream os;
      os << "collective " << op->describe() << " can never complete:";
      for (int q = 0; q < n; ++q) {
        if (e.ops[q]) continue;
        os << " rank " << q;
        if (ranks[q].state == RankState::Finished)
          os << " finished without calling it;";
        else if (ranks[q].state == RankState::Dead)
          os << " died (" << ranks[q].death << ");";
        else if (ranks[q].waiting)
          os << " waits for " << ranks[q].waiting->describe() << " instead;";
        else
          os << " has not called it;";
      }
      // a posted call stuck behind an earlier operation of its rank's stream
      for (int q = 0; q < n; ++q)
        if (e.ops[q] && !head_has(q, e.ops[q]) && !ranks[q].stream.empty())
          os << " rank " << q << " posted it behind " << ranks[q].stream.front().ops.front()->describe() << ";";
      fail_collective(op->seq, Result::InvalidUsage, os.str());
    } else {
      std::ostringstream os;
      os << "rank " << r << "'s " << op->describe() << " can never complete: ";
      int peer = op->peer;
      if (ranks[peer].state == RankState::Finished)
        os << "rank " << peer << " finished without the matching " << (op->kind == OpKind::Send ? "recv" : "send");
      else if (ranks[peer].waiting)
        os << "rank " << peer << " waits for " << ranks[peer].waiting->describe()
           << " (send/recv pairs that depend on each other need group_start/group_end)";
      else
        os << "no matching " << (op->kind == OpKind::Send ? "recv" : "send") << " was posted by rank " << peer;
      fail_op(op, Result::InvalidUsage, os.str());
    }
  }
}

}  // namespace accel::sim
