// The simulated NCCL library (sim/nccl/internal.h): what a stream runs — waiting on the other
// ranks, barriers, the fingerprint of a collective, collectives (through the shared segment, or
// by direct access to the peers' memory: their arenas, or cross-memory attach) and send/recv
// through the mailboxes.
#include <sys/types.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "comm/kernels.h"
#include "sim/cost.h"
#include "sim/nccl/internal.h"

namespace accel::simnccl {

// Why rank q cannot take part any more ("" while it can).
std::string gone(ncclComm* c, int q) {
  const uint32_t st = c->blocks[q].state.load();
  if (st == 0) return "";
  const std::string note = c->blocks[q].note;
  std::string s = "rank " + std::to_string(q);
  if (st == 1) s += " exited (its process ended)";
  if (st == 2) s += " died (its process was killed or crashed)";
  if (st == 3) s += " aborted its communicator";
  if (!note.empty()) s += ": " + note;
  return s;
}

std::vector<int> everyone(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

namespace {

// A barrier phase of every rank.
bool barrier(ncclComm* c, std::string& why) {
  const uint64_t k = ++c->phase;
  c->me().phase.store(k);
  c->ring();
  return wait_until(
      c,
      [&] {
        for (int q = 0; q < c->n; ++q)
          if (c->blocks[q].phase.load() < k) return false;
        return true;
      },
      everyone(c->n), why);
}

// The fingerprint: what every rank must agree on for one collective number.
bool same_call(const RankBlock::Posted& a, const RankBlock::Posted& b) {
  if (a.kind != b.kind || a.count != b.count || a.dtype != b.dtype || a.seq != b.seq) return false;
  if ((a.kind == kAllReduce || a.kind == kReduceScatter || a.kind == kReduce) && a.op != b.op) return false;
  if ((a.kind == kBroadcast || a.kind == kReduce) && a.root != b.root) return false;
  return true;
}

std::string describe_block(const RankBlock::Posted& b) {
  Call c;
  c.kind = b.kind;
  c.count = b.count;
  c.dtype = static_cast<ncclDataType_t>(b.dtype);
  c.op = static_cast<comm::RedOp>(b.op);
  c.root = b.root;
  c.seq = b.seq;
  return c.describe();
}

void fail_call(ncclComm* c, ncclResult_t r, const Call& call, const std::string& why) {
  const std::string msg = call.describe() + " on rank " + std::to_string(c->rank) + " of " + std::to_string(c->n) +
                          " failed: " + why;
  c->set_error(r, msg);
  copy_text(c->me().note, kNote, msg);
}

// Charges a finished operation to the virtual clock and the trace.
void account(ncclComm* c, const Call& call, double ready, double start, double seconds, uint64_t bytes,
             uint64_t sent, const std::string& algorithm) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.comm_t = start + seconds;
  p.bytes_sent += sent;
  if (!p.trace) return;
  std::ostringstream args;
  if (call.kind < kSend)
    args << "\"call\":" << call.seq << ",\"bytes\":" << bytes << ",\"algorithm\":\"" << algorithm << "\"";
  else
    args << "\"peer\":" << call.peer << ",\"bytes\":" << bytes;
  if (start > ready + 1e-12) p.events.push_back({c->rank, 1, "wait", ready, start - ready, ""});
  p.events.push_back({c->rank, 1, kind_name(call.kind), start, seconds, args.str()});
}

}  // namespace

// Copies between this process and rank q's memory: its own with memcpy, a peer's with one
// cross-memory-attach call (process_vm_readv / process_vm_writev: the kernel copies between
// the address spaces, as NVLink's peer-to-peer copies do between GPUs).
bool peer_copy(ncclComm* c, int q, void* local, uint64_t remote, size_t bytes, bool write, std::string& why) {
  if (bytes == 0) return true;
  if (q == c->rank) {
    if (write)
      std::memmove(reinterpret_cast<void*>(remote), local, bytes);
    else
      std::memmove(local, reinterpret_cast<const void*>(remote), bytes);
    return true;
  }
  if (char* at = reach(c, q, remote, bytes)) {  // in q's arena, mapped here
    if (write)
      std::memmove(at, local, bytes);
    else
      std::memmove(local, at, bytes);
    return true;
  }
  const pid_t pid = static_cast<pid_t>(c->blocks[q].pid);
  size_t done = 0;
  while (done < bytes) {
    c->attach_calls.fetch_add(1, std::memory_order_relaxed);
    iovec l{static_cast<char*>(local) + done, bytes - done};
    iovec r{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t k = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      why = gone(c, q);
      if (why.empty())
        why = std::string(write ? "writing to" : "reading from") + " rank " + std::to_string(q) + "'s buffer: " +
              (k < 0 ? std::strerror(errno) : "nothing copied");
      return false;
    }
    done += static_cast<size_t>(k);
  }
  return true;
}

// Rank q's `bytes` at `remote` as memory of this process: its own, or in q's arena mapped here.
char* reach(ncclComm* c, int q, uint64_t remote, size_t bytes) {
  if (q == c->rank) return reinterpret_cast<char*>(remote);
  if (static_cast<size_t>(q) >= c->arena_map.size() || !c->arena_map[q]) return nullptr;  // (not mapped yet at init)
  const uint64_t base = c->arena_base[q], size = c->arena_bytes[q];
  if (remote < base || bytes > size || remote - base > size - bytes) return nullptr;
  return c->arena_map[q] + (remote - base);
}

namespace {

// A collective by direct access, once every rank has published its buffers' addresses and
// passed the first barrier (the fingerprints compared): rank r works on its share, reading the
// peers' inputs and writing the peers' outputs itself, in chunks that stay in cache; a
// barrier, and every output is complete. Each input is read once and each output written once
// (the in-process simulator's traffic). A peer's buffer in its arena is read in place and
// written with memcpy; another is copied by cross-memory attach. Reductions combine the ranks
// in NCCL's order for `algo` with the in-process simulator's kernels (comm::reduce_nccl), so
// the results are the same bits.
bool run_direct(ncclComm* c, const Call& call, const comm::NcclOrder& algo, uint64_t k, std::string& why) {
  const int n = c->n, me = c->rank;
  const comm::DataType t = dtype_of(call.dtype);
  const size_t es = comm::dtype_size(t);
  const size_t total = call.count;
  constexpr size_t kChunk = 128 << 10;  // bytes per rank per step: the ranks' inputs stay in cache
  const size_t per = std::max<size_t>(1, kChunk / es);
  std::vector<std::vector<char>> in(static_cast<size_t>(n));
  std::vector<const void*> srcs(static_cast<size_t>(n));
  std::vector<char> out;
  // rank q's buffers
  auto send_of = [&](int q) { return c->blocks[q].posted[k % 2].send_addr; };
  auto recv_of = [&](int q) { return c->blocks[q].posted[k % 2].recv_addr; };
  // reduces elements [lo, hi) of the buffers whose element 0 is at base(q), chunk by chunk,
  // and hands each reduced chunk to emit(offset, data, elements)
  // (in NCCL's order for the algorithm: an all-reduce's chunks, else `owner`'s chain)
  auto reduce_range = [&](size_t lo, size_t hi, int owner, const std::function<uint64_t(int)>& base,
                          const std::function<bool(size_t, const char*, size_t)>& emit) {
    comm::NcclOrder order = algo;
    order.owner = owner;
    order.count = total;
    for (size_t off = lo; off < hi; off += per) {
      const size_t len = std::min(per, hi - off);
      for (int q = 0; q < n; ++q) {
        if (const char* at = reach(c, q, base(q) + off * es, len * es)) {  // read in place
          srcs[q] = at;
          continue;
        }
        in[q].resize(len * es);
        if (!peer_copy(c, q, in[q].data(), base(q) + off * es, len * es, false, why)) return false;
        srcs[q] = in[q].data();
      }
      out.resize(len * es);
      comm::reduce_nccl(out.data(), srcs.data(), n, 0, len, t, call.op, call.premul, order, off);
      if (!emit(off, out.data(), len)) return false;
    }
    return true;
  };
  bool ok = true;
  switch (call.kind) {
    case kAllReduce:
      ok = reduce_range(total * me / n, total * (me + 1) / n, -1, send_of, [&](size_t off, const char* data, size_t len) {
        for (int q = 0; q < n; ++q)
          if (!peer_copy(c, q, const_cast<char*>(data), recv_of(q) + off * es, len * es, true, why)) return false;
        return true;
      });
      break;
    case kReduceScatter:
      ok = reduce_range(0, total, me, [&](int q) { return send_of(q) + me * total * es; },
                        [&](size_t off, const char* data, size_t len) {
                          std::memcpy(static_cast<char*>(call.recv) + off * es, data, len * es);
                          return true;
                        });
      break;
    case kReduce:
      ok = reduce_range(total * me / n, total * (me + 1) / n, call.root, send_of, [&](size_t off, const char* data, size_t len) {
        return peer_copy(c, call.root, const_cast<char*>(data), recv_of(call.root) + off * es, len * es, true, why);
      });
      break;
    case kAllGather:
      for (int q = 0; q < n && ok; ++q) {
        char* dst = static_cast<char*>(call.recv) + q * total * es;
        if (q == me && dst == static_cast<const char*>(call.send)) continue;
        ok = peer_copy(c, q, dst, send_of(q), total * es, false, why);
      }
      break;
    case kBroadcast:
      if (!(me == call.root && call.recv == call.send))
        ok = peer_copy(c, call.root, call.recv, send_of(call.root), total * es, false, why);
      break;
  }
  if (!ok) return false;
  return barrier(c, why);
}

// A collective whose buffers are all in the arenas (every rank's input and output), done by
// whichever ranks' stream threads are running, once every rank has posted its buffers and
// passed the first barrier: the work is cut into tickets (a chunk of elements: of every
// rank's buffers for an all-reduce, a reduce and a broadcast; of one rank's block for a
// reduce-scatter, whose destination it is, and an all-gather, whose source it is), each rank
// takes the next ticket until none is left, and the collective ends on every rank when all
// tickets are done, without another barrier. With more ranks than cores, a rank that is not
// scheduled holds nobody up once it has arrived, where a share per rank (run_direct) waits
// for every rank to be scheduled again to do its share and reach the last barrier. A ticket's
// result depends only on its elements (comm::reduce_nccl in NCCL's order for `algo`, from
// the element's index): the same bits whoever does it. The tickets are numbered over the
// communicator's life in the segment's header (taken, done); every rank runs the same
// collectives, so each knows where this one's tickets start.
bool run_shared(ncclComm* c, const Call& call, const comm::NcclOrder& algo, uint64_t phase, std::string& why) {
  const int n = c->n;
  const comm::DataType t = dtype_of(call.dtype);
  const size_t es = comm::dtype_size(t);
  const size_t total = call.count;
  constexpr size_t kChunk = 128 << 10;  // bytes per rank per ticket: the ranks' inputs stay in cache
  const size_t per = std::max<size_t>(1, kChunk / es);
  const uint64_t chunks = (total + per - 1) / per;  // of one rank's buffer (one block)
  const bool per_block = call.kind == kReduceScatter || call.kind == kAllGather;
  const uint64_t items = per_block ? chunks * static_cast<uint64_t>(n) : chunks;
  const uint64_t first = c->tickets.load(std::memory_order_relaxed), end = first + items;
  c->tickets.store(end, std::memory_order_relaxed);
  std::vector<const void*> srcs(static_cast<size_t>(n));
  comm::NcclOrder order = algo;
  order.count = total;
  order.owner = call.kind == kReduce ? call.root : -1;
  auto at = [&](int q, uint64_t addr, size_t bytes) { return reach(c, q, addr, bytes); };
  auto send_of = [&](int q) { return c->blocks[q].posted[phase % 2].send_addr; };
  auto recv_of = [&](int q) { return c->blocks[q].posted[phase % 2].recv_addr; };
  // (every rank posted that its buffers lie in its arena and that it maps every peer's whole
  // arena: each buffer is reachable from here)
  const size_t in_elems = call.kind == kReduceScatter ? total * n : total;
  const size_t out_elems = call.kind == kAllGather ? total * n : total;
  for (int q = 0; q < n; ++q) {
    const bool in = call.kind != kBroadcast || q == call.root;
    const bool out = call.kind != kReduce || q == call.root;
    if ((in && !at(q, send_of(q), in_elems * es)) || (out && !at(q, recv_of(q), out_elems * es))) {
      why = "rank " + std::to_string(q) + "'s buffers are not in the arena it mapped here";
      return false;
    }
  }
  for (;;) {
    uint64_t k = c->hdr->taken.load();
    while (k < end && !c->hdr->taken.compare_exchange_weak(k, k + 1)) {
    }
    if (k >= end) break;
    const uint64_t item = k - first;
    const int block = per_block ? static_cast<int>(item / chunks) : -1;  // RS: the destination; AG: the source
    const size_t off = static_cast<size_t>(per_block ? item % chunks : item) * per;
    const size_t len = std::min(per, total - off), bytes = len * es;
    switch (call.kind) {
      case kAllReduce: {
        // reduced into one rank's output, then copied to the others' (in place, the chunk's
        // inputs are read before its output is written: comm::reduce_nccl works block by block)
        for (int q = 0; q < n; ++q) srcs[q] = at(q, send_of(q) + off * es, bytes);
        const int lead = c->rank;
        char* out = at(lead, recv_of(lead) + off * es, bytes);
        comm::reduce_nccl(out, srcs.data(), n, 0, len, t, call.op, call.premul, order, off);
        for (int q = 0; q < n; ++q)
          if (q != lead) std::memcpy(at(q, recv_of(q) + off * es, bytes), out, bytes);
        break;
      }
      case kReduce:
        for (int q = 0; q < n; ++q) srcs[q] = at(q, send_of(q) + off * es, bytes);
        comm::reduce_nccl(at(call.root, recv_of(call.root) + off * es, bytes), srcs.data(), n, 0, len, t, call.op,
                          call.premul, order, off);
        break;
      case kReduceScatter: {  // block `block` of every input into rank `block`'s output, its chain
        for (int q = 0; q < n; ++q) srcs[q] = at(q, send_of(q) + (block * total + off) * es, bytes);
        comm::NcclOrder mine = order;
        mine.owner = block;
        comm::reduce_nccl(at(block, recv_of(block) + off * es, bytes), srcs.data(), n, 0, len, t, call.op, call.premul,
                          mine, off);
        break;
      }
      case kAllGather: {  // rank `block`'s input into block `block` of every output
        const char* from = at(block, send_of(block) + off * es, bytes);
        for (int q = 0; q < n; ++q) {
          char* to = at(q, recv_of(q) + (block * total + off) * es, bytes);
          if (to != from) std::memcpy(to, from, bytes);
        }
        break;
      }
      case kBroadcast: {
        const char* from = at(call.root, send_of(call.root) + off * es, bytes);
        for (int q = 0; q < n; ++q) {
          char* to = at(q, recv_of(q) + off * es, bytes);
          if (to != from) std::memcpy(to, from, bytes);
        }
        break;
      }
    }
    c->tickets_done.fetch_add(1, std::memory_order_relaxed);
    if (c->hdr->done.fetch_add(1) + 1 == end) c->ring();
  }
  return wait_until(c, [&] { return c->hdr->done.load() >= end; }, everyone(n), why);
}

// Whether every buffer of `call` that the other ranks touch by direct access lies in this
// rank's arena (and this rank reaches every peer's arena): the inputs they read, the output
// they write (all-reduce, and reduce's root); not the buffers a rank only touches itself.
bool in_arena(ncclComm* c, const Call& call) {
  if (!c->arena_ok) return false;
  const size_t bytes = call.count * comm::dtype_size(dtype_of(call.dtype));
  if (bytes == 0) return true;
  const bool root = c->rank == call.root;
  switch (call.kind) {
    case kAllReduce: return arena_holds(call.send, bytes) && arena_holds(call.recv, bytes);
    case kReduceScatter: return arena_holds(call.send, bytes * c->n);
    case kAllGather: return arena_holds(call.send, bytes);
    case kBroadcast: return !root || arena_holds(call.send, bytes);
    case kReduce: return arena_holds(call.send, bytes) && (!root || arena_holds(call.recv, bytes));
  }
  return false;
}

// Whether this rank's output of `call` lies in its arena too (with in_arena: the collective can
// be done by shared tickets, every rank writing every rank's output): reduce's root's only.
bool outputs_in_arena(ncclComm* c, const Call& call) {
  const size_t bytes = call.count * comm::dtype_size(dtype_of(call.dtype));
  if (bytes == 0) return true;
  switch (call.kind) {
    case kAllGather: return arena_holds(call.recv, bytes * c->n);
    case kReduce: return c->rank != call.root || arena_holds(call.recv, bytes);
    default: return arena_holds(call.recv, bytes);
  }
}

// One collective on the stream. It moves its data by direct access when every rank's buffers
// are in the arenas (memcpy at memory speed, whatever the size; by shared tickets when every
// rank's output is there too, run_shared), or when cross-memory attach
// is allowed and the collective is large enough for its system calls to pay; else through
// the segment's slots, chunk by chunk. The ranks decide alike: from what each published before
// the first barrier (its buffers, whether they are in its arena) and from the call, which they
// agree on (else the fingerprints differ and every rank fails). A rank that will stage
// through the segment copies its first chunk in before that barrier; in the rare mixed case
// (some ranks' buffers in the arena, others' not, no cross-memory attach) the ranks that did
// not stage theirs do it after, and one more barrier follows.
bool run_collective(ncclComm* c, const Call& call) {
  auto& p = proc();
  const int n = c->n, me = c->rank;
  const size_t es = comm::dtype_size(dtype_of(call.dtype));
  const comm::DataType t = dtype_of(call.dtype);
  double ready;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    ready = p.comm_t + p.delay;
  }
  const uint64_t k = c->phase + 1;  // the first barrier's phase
  RankBlock::Posted& b = c->me().posted[k % 2];
  auto posted = [&](int q) -> const RankBlock::Posted& { return c->blocks[q].posted[k % 2]; };
  b.seq = call.seq;
  b.count = call.count;
  b.kind = call.kind;
  b.dtype = call.dtype;
  b.op = static_cast<int>(call.op);
  b.root = call.root;
  b.ready = ready;
  b.send_addr = reinterpret_cast<uint64_t>(call.send);
  b.recv_addr = reinterpret_cast<uint64_t>(call.recv);
  b.arena = in_arena(c, call) ? 1u : 0u;
  b.outputs = b.arena && outputs_in_arena(c, call) ? 1u : 0u;
  c->set_now(call.describe());
  // Direct access by cross-memory attach moves half the bytes of staging but costs a system
  // call per chunk and peer: measured on 2 cores (docs/benchmarks.md, bench_sim_processes) it
  // wins from 16 MiB.
  const uint64_t call_bytes = call.count * es * (call.kind == kReduceScatter ? n : 1);
  const bool attach = c->direct && call_bytes >= c->direct_from;
  const bool stage_early = !b.arena && !attach;  // this rank stages its first chunk before the barrier
  // staging: elements per chunk, what fits in a slot (reduce-scatter: one block's share of a slot)
  const size_t total = call.count;
  const size_t per = std::max<size_t>(1, call.kind == kReduceScatter ? c->slot_bytes / (es * n) : c->slot_bytes / es);
  const size_t chunks = total == 0 ? 1 : (total + per - 1) / per;
  const char* send = static_cast<const char*>(call.send);
  char* recv = static_cast<char*>(call.recv);
  char* mine = c->slots + static_cast<size_t>(me) * c->slot_bytes;
  auto chunk = [&](size_t k, size_t& off, size_t& len) {
    off = k * per;
    len = std::min(per, total - std::min(total, off));
  };
  // copies this rank's part of chunk k into its slot
  auto stage = [&](size_t k) {
    size_t off, len;
    chunk(k, off, len);
    switch (call.kind) {
      case kReduceScatter:
        for (int q = 0; q < n; ++q) std::memcpy(mine + q * len * es, send + (q * total + off) * es, len * es);
        break;
      case kBroadcast:
        if (me == call.root) std::memcpy(mine, send + off * es, len * es);
        break;
      default: std::memcpy(mine, send + off * es, len * es);
    }
  };
  // the cost model picks NCCL's algorithm; the data is reduced in that algorithm's order
  // (nccl-tests' size: the all-gather output, the reduce-scatter input)
  const uint64_t bytes = (call.kind == kAllGather || call.kind == kReduceScatter) ? total * es * n : total * es;
  const bool reduces = call.kind == kAllReduce || call.kind == kReduceScatter || call.kind == kReduce;
  sim::Estimate est;
  try {
    est = sim::collective_cost(p.topo, coll_kind(call.kind), bytes, n, !reduces || comm::nvls_supported(t, call.op),
                               p.algorithms);
  } catch (const std::exception& e) {  // NCCL_ALGO leaves no algorithm for this call: NCCL's invalid usage
    return fail_call(c, ncclInvalidUsage, call, e.what()), false;
  }
  comm::NcclOrder order;
  order.algo = comm::nccl_algo(est.algorithm);
  order.ranks_per_node = p.topo.gpus_per_node;
  order.count = total;
  std::string why;
  double start = ready;
  if (stage_early) stage(0);
  if (!barrier(c, why)) return fail_call(c, ncclRemoteError, call, why), false;
  for (int q = 0; q < n; ++q)
    if (!same_call(posted(q), posted(0))) {
      std::ostringstream os;
      os << "mismatched collectives: ";
      for (int r = 0; r < n; ++r) os << (r ? "; " : "") << "rank " << r << " called " << describe_block(posted(r));
      // every rank sees the same blocks and fails with the same message
      return fail_call(c, ncclInvalidUsage, call, os.str()), false;
    }
  bool all_arena = true, any_arena = false, all_outputs = true;
  for (int q = 0; q < n; ++q) {
    start = std::max(start, posted(q).ready);
    all_arena = all_arena && posted(q).arena == 1;
    any_arena = any_arena || posted(q).arena == 1;
    all_outputs = all_outputs && posted(q).outputs == 1;
  }
  if (all_arena && all_outputs) {
    if (!run_shared(c, call, order, k, why)) return fail_call(c, ncclRemoteError, call, why), false;
    c->by_arena.fetch_add(1, std::memory_order_relaxed);
  } else if (all_arena || attach) {
    if (!run_direct(c, call, order, k, why)) return fail_call(c, ncclRemoteError, call, why), false;
    (all_arena ? c->by_arena : c->by_attach).fetch_add(1, std::memory_order_relaxed);
  } else {
    if (any_arena) {  // the ranks that did not stage their first chunk do it now
      if (!stage_early) stage(0);
      if (!barrier(c, why)) return fail_call(c, ncclRemoteError, call, why), false;
    }
    std::vector<const void*> srcs(n);
    auto slot = [&](int q) { return static_cast<const void*>(c->slots + static_cast<size_t>(q) * c->slot_bytes); };
    for (size_t k = 0; k < chunks; ++k) {
      size_t off, len;
      chunk(k, off, len);
      if (k > 0) {
        stage(k);
        if (!barrier(c, why)) return fail_call(c, ncclRemoteError, call, why), false;
      }
      switch (call.kind) {
        case kAllReduce: {
          for (int q = 0; q < n; ++q) srcs[q] = slot(q);
          const size_t lo = len * me / n, hi = len * (me + 1) / n;
          comm::reduce_nccl(c->result, srcs.data(), n, lo, hi, t, call.op, call.premul, order, off);
          break;
        }
        case kReduceScatter:
          for (int q = 0; q < n; ++q) srcs[q] = static_cast<const char*>(slot(q)) + me * len * es;
          order.owner = me;
          comm::reduce_nccl(recv + off * es, srcs.data(), n, 0, len, t, call.op, call.premul, order);
          break;
        case kAllGather:
          for (int q = 0; q < n; ++q) {
            char* dst = recv + (q * total + off) * es;
            if (q != me || dst != send + off * es) std::memcpy(dst, slot(q), len * es);
          }
          break;
        case kBroadcast:
          if (recv + off * es != slot(call.root)) std::memcpy(recv + off * es, slot(call.root), len * es);
          break;
        case kReduce:
          if (me == call.root) {
            for (int q = 0; q < n; ++q) srcs[q] = slot(q);
            order.owner = call.root;
            comm::reduce_nccl(recv + off * es, srcs.data(), n, 0, len, t, call.op, call.premul, order);
          }
          break;
      }
      if (!barrier(c, why)) return fail_call(c, ncclRemoteError, call, why), false;
      if (call.kind == kAllReduce) std::memcpy(recv + off * es, c->result, len * es);
    }
    c->by_staging.fetch_add(1, std::memory_order_relaxed);
  }
  account(c, call, ready, start, est.seconds, bytes, sim::bytes_sent_per_rank(coll_kind(call.kind), bytes, n),
          est.algorithm);
  return true;
}

// Send/recv of one group, progressed together (a pair that sends to each other in one
// group must not deadlock). Each message is framed by its byte count and sender's time.
struct P2p {
  Call call;
  uint64_t done = 0, need = 0;  // payload bytes moved; payload bytes in all
  bool header = false;          // the frame's header moved
  double peer_ready = 0;
};

bool run_p2p(ncclComm* c, std::vector<P2p>& ops) {
  auto& p = proc();
  double ready;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    ready = p.comm_t + p.delay;
  }
  struct Frame {
    uint64_t bytes;
    int32_t dtype;
    int32_t pad;
    double ready;
  };
  const uint64_t cap = c->box_bytes;
  for (auto& o : ops) o.need = o.call.count * comm::dtype_size(dtype_of(o.call.dtype));
  // whether some unfinished operation can move now (data to take, room to put)
  auto can_move = [&] {
    for (auto& o : ops) {
      if (o.header && o.done == o.need) continue;
      const bool sending = o.call.kind == kSend;
      const int src = sending ? c->rank : o.call.peer, dst = sending ? o.call.peer : c->rank;
      Mailbox& box = c->boxes[src * c->n + dst];
      const uint64_t used = box.written.load() - box.read.load();
      const uint64_t need = o.header ? 1 : sizeof(Frame);
      if (sending ? cap - used >= need : used >= need) return true;
    }
    return false;
  };
  for (;;) {
    bool progress = false, all = true;
    for (auto& o : ops) {
      const bool sending = o.call.kind == kSend;
      const int src = sending ? c->rank : o.call.peer, dst = sending ? o.call.peer : c->rank;
      Mailbox& box = c->boxes[src * c->n + dst];
      char* ring = c->box_data + (static_cast<size_t>(src) * c->n + dst) * cap;
      auto put = [&](const char* from, uint64_t bytes) {  // whole bytes only; caller checked space
        uint64_t w = box.written.load();
        for (uint64_t i = 0; i < bytes;) {
          const uint64_t at = (w + i) % cap, k = std::min(bytes - i, cap - at);
          std::memcpy(ring + at, from + i, k);
          i += k;
        }
        box.written.store(w + bytes);
      };
      auto take = [&](char* to, uint64_t bytes) {
        uint64_t r = box.read.load();
        for (uint64_t i = 0; i < bytes;) {
          const uint64_t at = (r + i) % cap, k = std::min(bytes - i, cap - at);
          std::memcpy(to + i, ring + at, k);
          i += k;
        }
        box.read.store(r + bytes);
      };
      if (o.header && o.done == o.need) continue;
      all = false;
      const uint64_t used = box.written.load() - box.read.load();
      if (sending) {
        if (!o.header) {
          if (cap - used < sizeof(Frame)) continue;
          Frame f{o.need, o.call.dtype, 0, ready};
          put(reinterpret_cast<const char*>(&f), sizeof f);
          o.header = progress = true;
        } else {
          const uint64_t k = std::min(o.need - o.done, cap - used);
          if (k == 0) continue;
          put(static_cast<const char*>(o.call.send) + o.done, k);
          o.done += k;
          progress = true;
        }
      } else {
        if (!o.header) {
          if (used < sizeof(Frame)) continue;
          Frame f;
          take(reinterpret_cast<char*>(&f), sizeof f);
          o.header = progress = true;
          o.peer_ready = f.ready;
          if (f.bytes != o.need || f.dtype != o.call.dtype) {
            std::ostringstream os;
            os << "mismatched send/recv: rank " << o.call.peer << " sent " << f.bytes << " bytes of "
               << (valid_dtype(static_cast<ncclDataType_t>(f.dtype)) ? comm::dtype_name(dtype_of(static_cast<ncclDataType_t>(f.dtype))) : "?")
               << ", this rank expects " << o.need << " bytes of " << comm::dtype_name(dtype_of(o.call.dtype));
            fail_call(c, ncclInvalidUsage, o.call, os.str());
            return false;
          }
        } else {
          const uint64_t k = std::min(o.need - o.done, used);
          if (k == 0) continue;
          take(static_cast<char*>(o.call.recv) + o.done, k);
          o.done += k;
          progress = true;
        }
      }
    }
    if (all) break;
    if (progress) {
      c->ring();
      continue;
    }
    // nothing moved: wait until something can (a peer that has gone fails the wait only
    // when what it left in the buffer is not enough)
    std::vector<int> peers;  // of the unfinished operations only
    for (auto& o : ops)
      if (!(o.header && o.done == o.need)) peers.push_back(o.call.peer);
    std::string why;
    if (!wait_until(c, can_move, peers, why)) {
      for (auto& o : ops)
        if (!(o.header && o.done == o.need)) return fail_call(c, ncclRemoteError, o.call, why), false;
    }
  }
  for (auto& o : ops) {
    const uint64_t bytes = o.need;
    const double start = o.call.kind == kRecv ? std::max(ready, o.peer_ready) : ready;
    const double secs = sim::p2p_cost(proc().topo, o.call.kind == kSend ? c->rank : o.call.peer,
                                      o.call.kind == kSend ? o.call.peer : c->rank, bytes);
    account(c, o.call, ready, start, secs, bytes, o.call.kind == kSend ? bytes : 0, "direct");
  }
  return true;
}

}  // namespace

// What a group (or a single call) runs on the stream: collectives in order, consecutive
// send/recv together.
bool run_calls(ncclComm* c, const std::vector<Call>& calls) {
  if (c->aborted.load()) return false;
  for (size_t i = 0; i < calls.size();) {
    if (calls[i].kind < kSend) {
      if (!run_collective(c, calls[i])) return false;
      ++i;
      continue;
    }
    std::vector<P2p> batch;
    std::string now;
    while (i < calls.size() && calls[i].kind >= kSend) {
      batch.push_back(P2p{calls[i]});
      now += (now.empty() ? "" : ", ") + calls[i].describe();
      ++i;
    }
    c->set_now(now);
    if (!run_p2p(c, batch)) return false;
  }
  c->ring();
  return true;
}

}  // namespace accel::simnccl
