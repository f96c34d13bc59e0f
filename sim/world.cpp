// The simulator's engine: maestro scheduling, per-rank streams, collective matching with
// fingerprints, point-to-point rendezvous, deadlock and mismatch diagnosis, faults, the
// virtual clock and the trace.
#include "sim/world.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "runtime/comm/kernels.h"

namespace accel::sim {

using comm::CommError;
using comm::DataType;
using comm::RedOp;
using comm::Result;

namespace {
thread_local int tls_rank = -1;
thread_local World* tls_world = nullptr;
}  // namespace

int current_rank() { return tls_rank; }
World* current_world() { return tls_world; }

bool RunReport::ok() const {
  for (const auto& r : ranks)
    if (r.status != Status::Ok) return false;
  return true;
}

std::string RunReport::first_error() const {
  for (const auto& r : ranks)
    if (r.status != Status::Ok) return "rank " + std::to_string(r.rank) + ": " + r.error;
  return "";
}

// ---------------------------------------------------------------------------------------
// Parsing

uint64_t parse_bytes(const std::string& text, const char* what) {
  // digits, an optional fraction, optional spaces, an optional unit; nothing else
  auto refuse = [&](const std::string& why) {
    fail(Status::InvalidArgument, what, " '", text, "' ", why,
         " (a positive number and a unit: 64MiB, 1.5GiB, 80GB, 1000000; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const size_t int_digits = i;
  size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++frac_digits;
    if (frac_digits == 0) refuse("is not a size");
  }
  if (int_digits == 0) refuse("is not a size");
  const std::string number = text.substr(0, i);
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string unit = text.substr(i);
  static const std::map<std::string, double> units = {
      {"", 1},           {"B", 1},         {"KiB", 1024.0},    {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12},
      {"K", 1024.0},     {"M", 1048576.0}, {"G", 1073741824.0}};
  auto it = units.find(unit);
  if (it == units.end()) refuse("has an unknown unit '" + unit + "'");
  const double bytes = std::strtod(number.c_str(), nullptr) * it->second;  // digits only: strtod cannot fail
  if (!(bytes < 18446744073709551616.0)) refuse("is too large (at most 16 EiB)");
  const uint64_t out = static_cast<uint64_t>(bytes + 0.5);
  if (out == 0) refuse("is zero (for no limit pass no size at all)");
  return out;
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

std::vector<Fault> parse_faults(const std::string& spec, int world_size) {
  std::vector<Fault> out;
  std::stringstream ss(spec);
  std::string item;
  const char* forms = "kill:RANK@collective:K, kill:RANK@step:K, delay:RANK:SECONDS";
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    Fault f;
    int rank = -1, used = 0;
    long long at = 0;
    double secs = 0;
    char what[16] = {0};
    const auto whole = [&] { return used == static_cast<int>(item.size()); };
    if (std::sscanf(item.c_str(), "kill:%d@%15[a-z]:%lld%n", &rank, what, &at, &used) == 3 && whole()) {
      std::string w = what;
      ACCEL_CHECK(w == "collective" || w == "step", Status::InvalidArgument, "faults: '", item,
                  "': kill at 'collective' or 'step'");
      f.kind = w == "step" ? Fault::Kind::KillAtStep : Fault::Kind::KillAtCollective;
      ACCEL_CHECK(at >= 1 || (f.kind == Fault::Kind::KillAtStep && at >= 0), Status::InvalidArgument, "faults: '",
                  item, "': K must be >= ", f.kind == Fault::Kind::KillAtStep ? 0 : 1, " (collectives are counted from 1), got ", at);
      f.at = at;
    } else if (std::sscanf(item.c_str(), "delay:%d:%lf%n", &rank, &secs, &used) == 2 && whole()) {
      f.kind = Fault::Kind::Delay;
      ACCEL_CHECK(std::isfinite(secs) && secs >= 0, Status::InvalidArgument, "faults: '", item,
                  "': SECONDS must be finite and >= 0, got ", secs);
      f.seconds = secs;
    } else {
      fail(Status::InvalidArgument, "faults: cannot read '", item, "' (", forms, ")");
    }
    ACCEL_CHECK(rank >= 0, Status::InvalidArgument, "faults: '", item, "': RANK must be >= 0, got ", rank);
    ACCEL_CHECK(world_size <= 0 || rank < world_size, Status::InvalidArgument, "faults: '", item, "' names rank ", rank,
                " of a ", world_size, "-rank world");
    f.rank = rank;
    out.push_back(f);
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Operations and streams

namespace {

enum class OpKind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Barrier, Send, Recv };

const char* kind_name(OpKind k) {
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

CollKind coll_kind(OpKind k) {
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
  DataType t = DataType::Float32;
  RedOp op = RedOp::Sum;
  double premul = 1.0;
  int root = 0;   // collectives with a root
  int peer = -1;  // p2p
  bool done = false;
  Result result = Result::Success;
  std::string error;
  double launch_t = 0.0, start_t = 0.0, end_t = 0.0;
  bool in_group = false;

  bool collective() const { return kind != OpKind::Send && kind != OpKind::Recv; }
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
  // What every rank must agree on for the same collective number.
  bool same_call(const Op& o) const {
    return kind == o.kind && count == o.count && t == o.t &&
           ((kind != OpKind::AllReduce && kind != OpKind::ReduceScatter && kind != OpKind::Reduce) || op == o.op) &&
           ((kind != OpKind::Broadcast && kind != OpKind::Reduce) || root == o.root);
  }
  size_t bytes() const {
    const size_t b = count * comm::dtype_size(t);
    // nccl-tests' "size": the all-gather output, the reduce-scatter input.
    return b;
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

enum class RankState { Runnable, Blocked, Finished, Dead };

struct RankData {
  std::deque<Slot> stream;
  Slot group;
  int group_depth = 0;
  uint64_t coll_seq = 0;
  std::map<int, uint64_t> send_seq, recv_seq;
  RankState state = RankState::Runnable;
  OpPtr waiting;  // the operation a Blocked rank waits for
  std::string death;  // why a Dead rank died
  double compute_t = 0.0, comm_t = 0.0;
  double delay = 0.0;  // Delay faults: virtual seconds before each operation
  int64_t kill_at_collective = 0, kill_at_step = -1;
  uint64_t collectives = 0, bytes_sent = 0;
  Status status = Status::Ok;
  std::string error;
};

struct CollEntry {
  std::vector<OpPtr> ops;  // by rank; null until that rank posts
  OpPtr first;             // the first poster's call, the reference fingerprint
  int posted = 0;
  bool failed = false;
  Result result = Result::Success;
  std::string error;
};

struct TraceEvent {
  int rank;
  int lane;  // 0 compute, 1 communication
  std::string name;
  double ts, dur;  // seconds
  std::string args;
};

}  // namespace

// ---------------------------------------------------------------------------------------

struct World::Impl {
  World* self = nullptr;
  WorldOptions opts;
  Topology topo;
  int n = 0;
  mutable std::mutex mu;
  // One condition variable per rank: handing over the baton wakes only its new holder
  // (a shared one would wake every rank thread at every switch: N^2 wake-ups per collective).
  std::unique_ptr<std::condition_variable[]> cvs;
  int holder = -1;  // the rank allowed to run
  std::vector<RankData> ranks;
  std::map<uint64_t, CollEntry> colls;
  // p2p: (src, dst, seq) -> the posted send and recv
  std::map<std::tuple<int, int, uint64_t>, std::pair<OpPtr, OpPtr>> p2p;
  std::chrono::steady_clock::time_point last_progress;
  std::vector<TraceEvent> trace;
  std::mt19937_64 noise;
  int engine_threads = 1;
  std::shared_ptr<MemoryBudget> budget;
  std::vector<char> progress_queued;  // progress()'s work-list marks, kept to avoid an O(n) allocation per call
  std::vector<std::unique_ptr<RankCommunicator>> comms;  // one per rank, made by run()
  // WorldOptions::missing, parsed: (collective, element type or -1 for every type)
  std::vector<std::pair<comm::Collective, int>> missing;

  // --- scheduling --------------------------------------------------------------------

  bool runnable(int r) const {
    const auto& d = ranks[r];
    if (d.state == RankState::Runnable) return true;
    return d.state == RankState::Blocked && d.waiting && d.waiting->done;
  }

  // Hands the baton to the next runnable rank after `from` (round robin). With none
  // runnable while some rank still waits: a deadlock; diagnose it (fails the operations
  // involved) and try again.
  void pass_baton(int from) {
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

  void maybe_noise(std::unique_lock<std::mutex>& lk) {
    if (!opts.noise_seed) return;
    auto us = std::uniform_int_distribution<int>(0, 200)(noise);
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    lk.lock();
  }

  // Blocks the calling rank until `op` is done, letting other ranks run meanwhile.
  void wait_op(int r, const OpPtr& op, std::unique_lock<std::mutex>& lk) {
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
  }

  void time_out(const OpPtr& op) {
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

  // --- failure ---------------------------------------------------------------------

  void fail_op(const OpPtr& op, Result r, const std::string& msg) {
    if (op->done) return;
    op->done = true;
    op->result = r;
    op->error = msg;
  }

  void fail_collective(uint64_t seq, Result r, const std::string& msg) {
    auto& e = colls[seq];
    if (e.ops.empty()) e.ops.resize(n);
    e.failed = true;
    e.result = r;
    e.error = msg;
    for (auto& o : e.ops)
      if (o) fail_op(o, r, msg);
  }

  // A rank died: everything that needs it fails with RemoteError.
  void rank_died(int r, const std::string& why) {
    auto& d = ranks[r];
    d.state = RankState::Dead;
    d.death = why;
    std::string msg = "rank " + std::to_string(r) + " died: " + why;
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

  // Nobody can run but someone waits: name the ranks and calls that block each other.
  void diagnose_deadlock() {
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

  // --- posting and progress ----------------------------------------------------------

  bool head_has(int r, const OpPtr& op) const {
    const auto& s = ranks[r].stream;
    if (s.empty()) return false;
    for (const auto& o : s.front().ops)
      if (o == op) return true;
    return false;
  }

  void post(int r, const OpPtr& op) {
    auto& d = ranks[r];
    last_progress = std::chrono::steady_clock::now();
    op->launch_t = d.compute_t + d.delay;
    if (op->collective()) {
      op->seq = ++d.coll_seq;
      ++d.collectives;
      if (d.kill_at_collective > 0 && static_cast<int64_t>(op->seq) == d.kill_at_collective)
        throw CommError(Result::SystemError, "rank " + std::to_string(r) + " was killed by fault injection at its collective #" +
                                                 std::to_string(op->seq));
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
        // a rank that died before reaching it
        for (int q = 0; q < n; ++q)
          if (ranks[q].state == RankState::Dead) {
            fail_collective(op->seq, Result::RemoteError, "rank " + std::to_string(q) + " died: " + ranks[q].death);
            break;
          }
      }
    } else {
      const bool is_send = op->kind == OpKind::Send;
      const int src = is_send ? r : op->peer, dst = is_send ? op->peer : r;
      op->seq = is_send ? ++d.send_seq[op->peer] : ++d.recv_seq[op->peer];
      auto& pr = p2p[{src, dst, op->seq}];
      (is_send ? pr.first : pr.second) = op;
      if (ranks[op->peer].state == RankState::Dead)
        fail_op(op, Result::RemoteError, "rank " + std::to_string(op->peer) + " died: " + ranks[op->peer].death);
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

  // Runs every operation that became runnable. Only ranks whose stream head may have
  // changed are examined: the rank that posted (`from`), then every rank an executed
  // operation involved, so the cost per operation does not grow with the world.
  // from < 0: examine every rank (after a rank finished or died).
  void progress(int from = -1) {
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
          const bool is_send = op->kind == OpKind::Send;
          auto it = p2p.find({is_send ? r : op->peer, is_send ? op->peer : r, op->seq});
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

  // --- execution -----------------------------------------------------------------------

  // All-reduce: the scratch chunk (in cache) and the total output size from which the
  // outputs are written with non-temporal stores (below it they are likely read again soon,
  // from the caches).
  static constexpr size_t kChunkBytes = 64 << 10;
  static constexpr uint64_t kStreamMinBytes = 16ull << 20;

  // Copies `bytes` from `src` to `dst` with non-temporal (streaming) stores where the CPU
  // has them, plain ones elsewhere; stream_fence() orders them before the engine's threads
  // finish.
  static void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
    if (head > bytes) head = bytes;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
      const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      const __m128i x2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      const __m128i x3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d), x0);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), x1);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), x2);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), x3);
    }
    std::memcpy(d, s, bytes);
#else
    std::memcpy(dst, src, bytes);
#endif
  }
  static void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
  }

  template <class F>
  void parallel_for(size_t count, size_t min_chunk, F&& body) {
    const int threads = static_cast<int>(std::min<size_t>(engine_threads, std::max<size_t>(1, count / min_chunk)));
    if (threads <= 1) {
      body(0, count);
      return;
    }
    std::vector<std::thread> pool;
    const size_t per = (count + threads - 1) / threads;
    for (int t = 1; t < threads; ++t) {
      size_t b = per * t, e = std::min(count, b + per);
      if (b < e) pool.emplace_back([&body, b, e] { body(b, e); });
    }
    body(0, std::min(count, per));
    for (auto& th : pool) th.join();
  }

  void execute_collective(CollEntry& e) {
    const Op& ref = *e.first;
    const size_t es = comm::dtype_size(ref.t);
    std::vector<const void*> srcs(n);
    switch (ref.kind) {
      case OpKind::AllReduce: {
        // Chunk by chunk: reduce the ranks' inputs (in rank order) into a scratch chunk
        // that stays in cache, then copy it to every rank's output. The memory traffic is
        // then what an all-reduce in one address space cannot avoid: each input read once,
        // each output written once. Large outputs are written with non-temporal stores
        // (stream_copy): a plain store first reads each destination line from memory, a
        // third of the traffic again. Not in place: there the destination lines were just
        // read and are in cache, where plain stores were measured faster. In place is
        // safe: a chunk is read whole before any output of it is written.
        // (Nothing below allocates on the engine's threads, where an exception could not
        // be caught: the scratch chunk is on the stack, the per-thread source pointers are
        // allocated here, one row per thread parallel_for may start.)
        const bool stream = static_cast<uint64_t>(ref.count) * es * static_cast<uint64_t>(n) >= kStreamMinBytes;
        const size_t chunk = kChunkBytes / es;
        std::vector<const void*> rows(static_cast<size_t>(std::max(1, engine_threads)) * n);
        std::atomic<int> next_row{0};
        parallel_for(ref.count, 1 << 16, [&](size_t b, size_t end) {
          alignas(64) unsigned char scratch[kChunkBytes];
          const void** at = rows.data() + static_cast<size_t>(next_row.fetch_add(1)) * n;
          for (size_t c = b; c < end; c += chunk) {
            const size_t ce = std::min(end, c + chunk), bytes = (ce - c) * es;
            for (int q = 0; q < n; ++q) at[q] = static_cast<const char*>(e.ops[q]->send) + c * es;
            comm::reduce(scratch, at, n, 0, ce - c, ref.t, ref.op, ref.premul);
            for (int q = 0; q < n; ++q) {
              char* dst = static_cast<char*>(e.ops[q]->recv) + c * es;
              if (stream && e.ops[q]->recv != e.ops[q]->send)
                stream_copy(dst, scratch, bytes);
              else
                std::memcpy(dst, scratch, bytes);
            }
          }
          if (stream) stream_fence();
        });
        break;
      }
      case OpKind::ReduceScatter: {
        const size_t rc = ref.count;
        for (int r = 0; r < n; ++r) {
          for (int q = 0; q < n; ++q) srcs[q] = static_cast<const char*>(e.ops[q]->send) + r * rc * es;
          // the reduce kernel indexes from each source's base: shift bases so index 0 is segment r
          parallel_for(rc, 1 << 16, [&](size_t b, size_t end) {
            comm::reduce(e.ops[r]->recv, srcs.data(), n, b, end, ref.t, ref.op, ref.premul);
          });
        }
        break;
      }
      case OpKind::AllGather: {
        const size_t bytes = ref.count * es;
        for (int r = 0; r < n; ++r)
          for (int q = 0; q < n; ++q) {
            char* dst = static_cast<char*>(e.ops[r]->recv) + q * bytes;
            if (dst != e.ops[q]->send) std::memmove(dst, e.ops[q]->send, bytes);
          }
        break;
      }
      case OpKind::Broadcast: {
        const void* src = e.ops[ref.root]->send;
        for (int r = 0; r < n; ++r)
          if (e.ops[r]->recv != src) std::memmove(e.ops[r]->recv, src, ref.count * es);
        break;
      }
      case OpKind::Reduce: {
        for (int q = 0; q < n; ++q) srcs[q] = e.ops[q]->send;
        void* out = e.ops[ref.root]->recv;
        parallel_for(ref.count, 1 << 16, [&](size_t b, size_t end) {
          comm::reduce(out, srcs.data(), n, b, end, ref.t, ref.op, ref.premul);
        });
        break;
      }
      case OpKind::Barrier:
      default:
        break;
    }
    // the virtual clock: the collective starts when the last rank launched it and its
    // communication stream is free
    double start = 0.0;
    for (int q = 0; q < n; ++q) start = std::max({start, e.ops[q]->launch_t, ranks[q].comm_t});
    const uint64_t bytes = ref.kind == OpKind::AllGather ? ref.count * es * n
                         : ref.kind == OpKind::ReduceScatter ? ref.count * es * n
                                                             : ref.count * es;
    Estimate est = collective_cost(topo, coll_kind(ref.kind), bytes, n);
    const uint64_t sent = bytes_sent_per_rank(coll_kind(ref.kind), bytes, n);
    for (int q = 0; q < n; ++q) {
      auto& o = *e.ops[q];
      o.start_t = start;
      o.end_t = start + est.seconds;
      o.done = true;
      ranks[q].comm_t = o.end_t;
      ranks[q].bytes_sent += sent;
      if (opts.record_trace) {
        std::ostringstream args;
        args << "\"call\":" << o.seq << ",\"bytes\":" << bytes << ",\"algorithm\":\"" << est.algorithm << "\"";
        trace.push_back({q, 1, kind_name(o.kind), start, est.seconds, args.str()});
        if (start > o.launch_t + 1e-12) trace.push_back({q, 1, "wait", o.launch_t, start - o.launch_t, ""});
      }
    }
  }

  void execute_p2p(const OpPtr& s, const OpPtr& r) {
    const size_t bytes = s->count * comm::dtype_size(s->t);
    if (bytes && s->send != r->recv) std::memmove(r->recv, s->send, bytes);
    auto& rs = ranks[s->rank];
    auto& rr = ranks[r->rank];
    double start = std::max({s->launch_t, r->launch_t, rs.comm_t, rr.comm_t});
    double dur = p2p_cost(topo, s->rank, r->rank, bytes);
    for (const auto& o : {s, r}) {
      o->start_t = start;
      o->end_t = start + dur;
      o->done = true;
      ranks[o->rank].comm_t = o->end_t;
      if (opts.record_trace) {
        std::ostringstream args;
        args << "\"peer\":" << o->peer << ",\"bytes\":" << bytes;
        trace.push_back({o->rank, 1, kind_name(o->kind), start, dur, args.str()});
      }
    }
    rs.bytes_sent += bytes;
  }
};

// ---------------------------------------------------------------------------------------
// The communicator a rank sees

namespace {

class SimWork final : public comm::Work {
 public:
  SimWork(World::Impl* w, OpPtr op) : w_(w), op_(std::move(op)) {}
  void wait() override {
    std::unique_lock<std::mutex> lk(w_->mu);
    w_->maybe_noise(lk);
    w_->wait_op(op_->rank, op_, lk);
  }
  bool test() override {
    std::lock_guard<std::mutex> lk(w_->mu);
    return op_->done;
  }

 private:
  World::Impl* w_;
  OpPtr op_;
};

class SimCommunicator final : public RankCommunicator {
 public:
  SimCommunicator(World::Impl* w, int rank) : w_(w), rank_(rank) {}
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
    comm::check_op(t, op);
    need(send, recv, count);
    auto o = make(OpKind::AllReduce, send, recv, count, t);
    o->op = op;
    o->premul = premul.value;
    return submit(o);
  }
  std::shared_ptr<comm::Work> reduce_scatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                             comm::PreMul premul) override {
    comm::check_op(t, op);
    need(send, recv, recvcount);
    auto o = make(OpKind::ReduceScatter, send, recv, recvcount, t);
    o->op = op;
    o->premul = premul.value;
    return submit(o);
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
    comm::check_op(t, op);
    check_rank(root, "root");
    need(send, rank_ == root ? recv : send, count);
    auto o = make(OpKind::Reduce, send, recv, count, t);
    o->op = op;
    o->root = root;
    o->premul = premul.value;
    return submit(o);
  }
  std::shared_ptr<comm::Work> send(const void* buf, size_t count, DataType t, int peer) override {
    comm::check_dtype(t);
    check_rank(peer, "peer");
    need(buf, buf, count);
    auto o = make(OpKind::Send, buf, nullptr, count, t);
    o->peer = peer;
    return submit(o);
  }
  std::shared_ptr<comm::Work> recv(void* buf, size_t count, DataType t, int peer) override {
    comm::check_dtype(t);
    check_rank(peer, "peer");
    need(buf, buf, count);
    auto o = make(OpKind::Recv, nullptr, buf, count, t);
    o->peer = peer;
    return submit(o);
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
    if (w_->ranks[rank_].kill_at_step >= 1 && step == w_->ranks[rank_].kill_at_step)
      throw CommError(Result::SystemError, "rank " + std::to_string(rank_) + " was killed by fault injection at step " +
                                               std::to_string(step));
  }

  void charge_compute(double seconds, const char* label) override {
    std::lock_guard<std::mutex> lk(w_->mu);
    auto& d = w_->ranks[rank_];
    if (w_->opts.record_trace && seconds > 0) w_->trace.push_back({rank_, 0, label ? label : "compute", d.compute_t, seconds, ""});
    d.compute_t += seconds;
  }

 private:
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

  World::Impl* w_;
  int rank_;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// World and Rank

int Rank::rank() const { return rank_; }
int Rank::size() const { return world_->options().world_size; }
World& Rank::world() { return *world_; }

RankCommunicator& Rank::comm() { return *world_->impl_->comms.at(rank_); }

void Rank::notify_step(int64_t step) { comm().on_step(step); }

World::World(WorldOptions opts) : impl_(std::make_unique<Impl>()) {
  ACCEL_CHECK(opts.world_size >= 1, Status::InvalidArgument, "world_size must be >= 1, got ", opts.world_size);
  ACCEL_CHECK(std::isfinite(opts.timeout_seconds) && opts.timeout_seconds > 0, Status::InvalidArgument,
              "timeout_seconds must be finite and > 0, got ", opts.timeout_seconds);
  ACCEL_CHECK(opts.engine_threads >= 0 && opts.engine_threads <= 1024, Status::InvalidArgument,
              "engine_threads must be in [0, 1024] (0: the machine's cores), got ", opts.engine_threads);
  for (const auto& f : opts.faults)
    ACCEL_CHECK(f.rank < opts.world_size, Status::InvalidArgument, "faults: a fault names rank ", f.rank, " of a ",
                opts.world_size, "-rank world");
  impl_->self = this;
  impl_->topo = topology_preset(opts.topology);
  impl_->n = opts.world_size;
  impl_->engine_threads = opts.engine_threads > 0 ? opts.engine_threads
                                                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  impl_->budget = std::make_shared<MemoryBudget>(opts.world_size, opts.device_capacity);
  for (const auto& m : opts.missing) {  // "reduce_scatter" or "reduce_scatter:bfloat16"
    const auto colon = m.find(':');
    const std::string name = m.substr(0, colon), type = colon == std::string::npos ? "" : m.substr(colon + 1);
    int c = 0, t = -1;
    while (c < comm::kNumCollectives && name != comm::collective_name(static_cast<comm::Collective>(c))) ++c;
    ACCEL_CHECK(c < comm::kNumCollectives, Status::InvalidArgument, "missing: '", name, "' is not a collective (all_reduce, ",
                "reduce_scatter, all_gather, broadcast, reduce, send, recv, barrier)");
    if (!type.empty()) {
      t = 0;
      while (t < comm::kNumDataTypes && type != comm::dtype_name(static_cast<DataType>(t))) ++t;
      ACCEL_CHECK(t < comm::kNumDataTypes, Status::InvalidArgument, "missing: '", type, "' is not an element type (",
                  "int8 ... bfloat16, as nccl.h names them)");
    }
    impl_->missing.emplace_back(static_cast<comm::Collective>(c), t);
  }
  impl_->opts = std::move(opts);
  install_allocator_hook();
}

World::~World() = default;

const WorldOptions& World::options() const { return impl_->opts; }
const Topology& World::topology() const { return impl_->topo; }

RunReport World::run(const std::function<void(Rank&)>& fn) {
  auto& w = *impl_;
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.ranks.assign(w.n, RankData{});
    w.colls.clear();
    w.p2p.clear();
    w.trace.clear();
    w.noise.seed(w.opts.noise_seed);
    for (const auto& f : w.opts.faults) {
      auto& d = w.ranks[f.rank];
      if (f.kind == Fault::Kind::Delay) d.delay += f.seconds;
      if (f.kind == Fault::Kind::KillAtCollective) d.kill_at_collective = f.at;
      if (f.kind == Fault::Kind::KillAtStep) d.kill_at_step = f.at;
    }
    w.cvs.reset(new std::condition_variable[w.n]);
    w.comms.clear();
    for (int r = 0; r < w.n; ++r) w.comms.push_back(std::make_unique<SimCommunicator>(&w, r));
    w.budget->reset_peaks();
    w.holder = -1;  // nobody runs until every rank's thread exists
    w.last_progress = std::chrono::steady_clock::now();
  }
  std::vector<std::thread> threads;
  threads.reserve(w.n);
  bool abandoned = false;  // a thread could not be started: the started ones leave at once
  auto start = [&](int r) {
    threads.emplace_back([this, &w, &fn, &abandoned, r] {
      tls_rank = r;
      tls_world = this;
      Rank rank(this, r);
      {
        std::unique_lock<std::mutex> lk(w.mu);
        w.cvs[r].wait(lk, [&] { return w.holder == r || abandoned; });
        if (abandoned) return;
      }
      Status status = Status::Ok;
      std::string error;
      try {
        fn(rank);
      } catch (const Error& e) {
        status = e.status();
        error = e.what();
      } catch (const std::bad_alloc&) {
        status = Status::OutOfMemory;
        error = "out of host memory";
      } catch (const std::exception& e) {
        // libtorch errors (c10::Error, including the budget's OutOfMemoryError) land here
        std::string what = e.what();
        status = what.find("out of memory") != std::string::npos ? Status::OutOfMemory : Status::Internal;
        error = what.substr(0, what.find("\nException raised from"));
      } catch (...) {
        status = Status::Internal;
        error = "unknown exception";
      }
      std::unique_lock<std::mutex> lk(w.mu);
      auto& d = w.ranks[r];
      d.status = status;
      d.error = error;
      // close any group left open: its operations never launch
      d.group = Slot{};
      d.group_depth = 0;
      if (status == Status::Ok) {
        d.state = RankState::Finished;
      } else {
        w.rank_died(r, error);
      }
      w.last_progress = std::chrono::steady_clock::now();
      w.progress();
      w.pass_baton(r);
      tls_rank = -1;
      tls_world = nullptr;
    });
  };
  for (int r = 0; r < w.n; ++r) {
    try {
      start(r);
    } catch (const std::exception& e) {  // std::system_error (EAGAIN: no threads or memory left), bad_alloc
      {
        std::lock_guard<std::mutex> lk(w.mu);
        abandoned = true;
        for (int q = 0; q < r; ++q) w.cvs[q].notify_all();
      }
      for (auto& t : threads) t.join();
      fail(Status::OutOfMemory, "could not start the thread of simulated rank ", r, " of ", w.n, " (", e.what(),
           "): the process ran out of threads or memory for their stacks; no rank ran. Lower world_size, or raise "
           "the limits (ulimit -u, ulimit -v)");
    }
  }
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.holder = 0;
    w.cvs[0].notify_all();
  }
  for (auto& t : threads) t.join();

  RunReport rep;
  std::lock_guard<std::mutex> lk(w.mu);
  for (int r = 0; r < w.n; ++r) {
    const auto& d = w.ranks[r];
    RankReport rr;
    rr.rank = r;
    rr.status = d.status;
    rr.error = d.error;
    rr.peak_bytes = w.budget->peak(r);
    rr.current_bytes = w.budget->current(r);
    rr.virtual_seconds = std::max(d.compute_t, d.comm_t);
    rr.collectives = d.collectives;
    rr.bytes_sent = d.bytes_sent;
    rep.predicted_seconds = std::max(rep.predicted_seconds, rr.virtual_seconds);
    rep.ranks.push_back(rr);
  }
  return rep;
}

std::string World::trace_json() const {
  auto& w = *impl_;
  std::lock_guard<std::mutex> lk(w.mu);
  std::vector<TraceEvent> ev = w.trace;
  std::stable_sort(ev.begin(), ev.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return std::tie(a.rank, a.lane, a.ts) < std::tie(b.rank, b.lane, b.ts);
  });
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"topology\":\"" << w.topo.name << "\",\"world_size\":" << w.n
     << "},\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  for (int r = 0; r < w.n; ++r) {
    sep();
    os << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << r << ",\"args\":{\"name\":\"rank " << r << "\"}}";
    sep();
    os << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << r << ",\"tid\":0,\"args\":{\"name\":\"compute\"}}";
    sep();
    os << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << r << ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
  }
  for (const auto& e : ev) {
    sep();
    os << "{\"ph\":\"X\",\"name\":\"" << e.name << "\",\"cat\":\"" << (e.lane ? "comm" : "compute") << "\",\"pid\":" << e.rank
       << ",\"tid\":" << e.lane << ",\"ts\":" << e.ts * 1e6 << ",\"dur\":" << e.dur * 1e6 << ",\"args\":{" << e.args
       << "}}";
  }
  os << "]}\n";
  return os.str();
}

void World::write_trace(const std::string& path) const {  // a plain write (the C ABI checks the path and writes atomically)
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  ACCEL_CHECK(f.good(), Status::IO, "cannot write the trace to '", path, "'");
  f << trace_json();
  f.close();
  ACCEL_CHECK(f.good(), Status::IO, "cannot write the trace to '", path, "'");
}

const std::shared_ptr<MemoryBudget>& World::budget() const { return impl_->budget; }
uint64_t World::current_bytes(int rank) const { return impl_->budget->current(rank); }
uint64_t World::peak_bytes(int rank) const { return impl_->budget->peak(rank); }

}  // namespace accel::sim
