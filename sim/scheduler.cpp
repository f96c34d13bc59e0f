// Scheduling: the maestro (one rank runs at a time and hands the baton on when it blocks),
// waiting and timeouts, the progress of the ranks' streams (operations complete in the
// order posted), and the virtual clocks that the cost model advances.
#include <algorithm>
#include <sstream>
#include <thread>

#include "sim/simulation.h"

namespace accel::sim {

using comm::CommError;
using comm::Result;

bool Simulation::runnable(int r) const {
  const auto& d = ranks[r];
  if (d.state == RankState::Runnable) return true;
  return d.state == RankState::Blocked && d.waiting && d.waiting->done;
}

void Simulation::pass_baton(int from) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int i = 1; i <= n; ++i) {
      int r = (from + i) % n;
      if (runnable(r)) {
        holder = r;
        cvs[r].notify_one();
        return;
      }
    }
    bool waiting = false;
    for (const auto& d : ranks) waiting |= d.state == RankState::Blocked;
    if (!waiting) {
      holder = -1;
      return;
    }
    diagnose_deadlock();
  }
  holder = -1;
}

void Simulation::maybe_noise(std::unique_lock<std::mutex>& lk) {
  if (!opts.noise_seed) return;
  auto us = std::uniform_int_distribution<int>(0, 200)(noise);
  lk.unlock();
  std::this_thread::sleep_for(std::chrono::microseconds(us));
  lk.lock();
}

void Simulation::wait_op(int r, const OpPtr& op, std::unique_lock<std::mutex>& lk) {
  auto& d = ranks[r];
  if (!op->done) {
    d.state = RankState::Blocked;
    d.waiting = op;
    pass_baton(r);
    bool timed_out = false;
    while (!(holder == r && op->done)) {
      auto deadline = last_progress + std::chrono::duration<double>(opts.timeout_seconds);
      if (cvs[r].wait_until(lk, deadline) == std::cv_status::timeout && !op->done &&
          std::chrono::steady_clock::now() >= last_progress + std::chrono::duration<double>(opts.timeout_seconds)) {
        // Nothing moved for the whole timeout: fail now, without waiting for the baton
        // (its holder is stuck outside the simulator). Determinism ends with this error.
        time_out(op);
        timed_out = true;
        break;
      }
    }
    d.state = RankState::Runnable;
    d.waiting.reset();
    if (!timed_out) holder = r;
  }
  d.compute_t = std::max(d.compute_t, op->end_t);
  if (op->result != Result::Success) throw CommError(op->result, op->error);
  if (opts.record_program && op->collective()) d.program.wait(op->post_index);
}

void Simulation::time_out(const OpPtr& op) {
  std::ostringstream os;
  os << "rank " << op->rank << " waited more than " << opts.timeout_seconds << " s without progress for "
     << op->describe();
  if (op->collective()) {
    auto& e = colls[op->seq];
    os << "; ranks that have not called it:";
    for (int r = 0; r < n; ++r)
      if (!e.ops[r]) os << " " << r;
    fail_collective(op->seq, Result::Timeout, os.str());
  } else {
    fail_op(op, Result::Timeout, os.str());
  }
  last_progress = std::chrono::steady_clock::now();
}

bool Simulation::head_has(int r, const OpPtr& op) const {
  const auto& s = ranks[r].stream;
  if (s.empty()) return false;
  for (const auto& o : s.front().ops)
    if (o == op) return true;
  return false;
}

void Simulation::progress(int from) {
  std::deque<int> work;
  std::vector<char>& queued = progress_queued;  // all zero between calls
  if (queued.size() != static_cast<size_t>(n)) queued.assign(static_cast<size_t>(n), 0);
  auto enqueue = [&](int r) {
    if (!queued[static_cast<size_t>(r)]) {
      queued[static_cast<size_t>(r)] = 1;
      work.push_back(r);
    }
  };
  if (from >= 0) {
    enqueue(from);
  } else {
    for (int r = 0; r < n; ++r) enqueue(r);
  }
  while (!work.empty()) {
    const int r = work.front();
    work.pop_front();
    queued[static_cast<size_t>(r)] = 0;
    auto& s = ranks[r].stream;
    while (!s.empty() && s.front().all_done()) s.pop_front();
    if (s.empty()) continue;
    const std::vector<OpPtr> head = s.front().ops;  // executing may complete several of them
    for (const auto& op : head) {
      if (op->done) continue;
      if (op->collective()) {
        auto it = colls.find(op->seq);
        if (it == colls.end() || it->second.failed || it->second.posted < n) continue;
        auto& e = it->second;
        bool ready = true;
        for (int q = 0; q < n && ready; ++q) ready = head_has(q, e.ops[q]);
        if (!ready) continue;
        execute_collective(e);
        colls.erase(it);  // every rank posted it: nobody will look it up again
        for (int q = 0; q < n; ++q) enqueue(q);
      } else {
        auto it = p2p.find({op->src(), op->dst(), op->seq});
        if (it == p2p.end() || !it->second.first || !it->second.second) continue;
        OpPtr snd = it->second.first, rcv = it->second.second;
        if (snd->done || rcv->done || !head_has(snd->rank, snd) || !head_has(rcv->rank, rcv)) continue;
        execute_p2p(snd, rcv);
        p2p.erase(it);
        enqueue(snd->rank);
        enqueue(rcv->rank);
      }
    }
  }
}

void Simulation::complete(Op& o, double start, double seconds) {
  o.start_t = start;
  o.end_t = start + seconds;
  o.done = true;
  ranks[o.rank].comm_t = o.end_t;
}

void Simulation::execute_collective(CollEntry& e) {
  const Op& ref = *e.first;
  // the cost model picks NCCL's algorithm; the data is reduced in that algorithm's order
  const size_t es = comm::dtype_size(ref.t);
  // nccl-tests' "size": the all-gather output, the reduce-scatter input, else the buffer
  const bool of_all_ranks = ref.kind == OpKind::AllGather || ref.kind == OpKind::ReduceScatter;
  const uint64_t bytes = of_all_ranks ? ref.count * es * n : ref.count * es;
  const bool reduces = ref.kind == OpKind::AllReduce || ref.kind == OpKind::ReduceScatter || ref.kind == OpKind::Reduce;
  Estimate est;
  try {
    est = collective_cost(topo, coll_kind(ref.kind), bytes, n, !reduces || comm::nvls_supported(ref.t, ref.op),
                          algorithms);
  } catch (const Error& err) {  // the algorithms allowed leave none for this call: every rank fails, as on NCCL
    fail_collective(ref.seq, Result::InvalidUsage, std::string(err.what()) + " (" + ref.describe() + ")");
    return;
  }
  comm::NcclOrder order;
  order.algo = comm::nccl_algo(est.algorithm);
  order.ranks_per_node = topo.gpus_per_node;
  engine.collective(ref, e.ops, order);
  // the virtual clock: the collective starts when the last rank launched it and its
  // communication stream is free
  double start = 0.0;
  for (int q = 0; q < n; ++q) start = std::max({start, e.ops[q]->launch_t, ranks[q].comm_t});
  const uint64_t sent = bytes_sent_per_rank(coll_kind(ref.kind), bytes, n);
  for (int q = 0; q < n; ++q) {
    auto& o = *e.ops[q];
    complete(o, start, est.seconds);
    ranks[q].bytes_sent += sent;
    if (opts.record_trace) {
      std::ostringstream args;
      args << "\"call\":" << o.seq << ",\"bytes\":" << bytes << ",\"algorithm\":\"" << est.algorithm << "\"";
      trace.push_back({q, 1, kind_name(o.kind), start, est.seconds, args.str()});
      if (start > o.launch_t + 1e-12) trace.push_back({q, 1, "wait", o.launch_t, start - o.launch_t, ""});
    }
  }
}

void Simulation::execute_p2p(const OpPtr& s, const OpPtr& r) {
  Engine::p2p(*s, *r);
  const size_t bytes = s->bytes();
  auto& rs = ranks[s->rank];
  auto& rr = ranks[r->rank];
  double start = std::max({s->launch_t, r->launch_t, rs.comm_t, rr.comm_t});
  double dur = p2p_cost(topo, s->rank, r->rank, bytes);
  for (const auto& o : {s, r}) {
    complete(*o, start, dur);
    if (opts.record_trace) {
      std::ostringstream args;
      args << "\"peer\":" << o->peer << ",\"bytes\":" << bytes;
      trace.push_back({o->rank, 1, kind_name(o->kind), start, dur, args.str()});
    }
  }
  rs.bytes_sent += bytes;
}

}  // namespace accel::sim
