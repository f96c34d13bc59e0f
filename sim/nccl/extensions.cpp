// The simulated NCCL library (sim/nccl/internal.h): the simulator's extensions (accelSim*) —
// compute charged to the virtual clock, optimizer steps (with their faults), diagnostics,
// notes, and the memory budget for the backend's own allocations.
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>

#include "sim/nccl/internal.h"

// ---------------------------------------------------------------------------------------
// The simulator's extensions (comm/nccl/nccl_abi.h)

ACCEL_SIM_EXPORT int accelSimVersion(void) { return 1; }

ACCEL_SIM_EXPORT void accelSimChargeCompute(ncclComm_t c, double seconds, const char* label) {
  if (!(seconds > 0)) return;
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.trace) p.events.push_back({c ? c->rank : 0, 0, label ? label : "compute", p.compute_t, seconds, ""});
  p.compute_t += seconds;
}

ACCEL_SIM_EXPORT double accelSimFlopsPerSecond(ncclComm_t) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.configure();
  return p.topo.gpu_flops * p.topo.mfu;
}

ACCEL_SIM_EXPORT ncclResult_t accelSimOnStep(ncclComm_t c, long long step) {
  auto& p = proc();
  std::lock_guard<std::mutex> lk(p.mu);
  p.steps = std::max<int64_t>(p.steps, step);
  for (const auto& f : p.faults)
    if (c && f.rank == c->rank && f.kind == sim::Fault::Kind::KillAtStep && f.at == step) {
      const std::string why = "killed by fault injection (kill:" + std::to_string(f.rank) + "@step:" +
                              std::to_string(f.at) + ") at optimizer step " + std::to_string(step);
      if (c->blocks) copy_text(c->me().note, kNote, why);
      p.status = "killed";
      p.error = why;
      p.write_files();
      std::fflush(nullptr);
      ::raise(SIGKILL);
    }
  p.write_files(false);  // the report as of this step (a process killed from outside leaves it)
  return ncclSuccess;
}

ACCEL_SIM_EXPORT size_t accelSimDiagnose(ncclComm_t c, char* buf, size_t len) {
  std::ostringstream os;
  if (c && c->blocks) {
    for (int q = 0; q < c->n; ++q) {
      const RankBlock& b = c->blocks[q];
      const std::string g = gone(c, q);
      os << (q ? "; " : "") << "rank " << q << ": ";
      if (!g.empty())
        os << g;
      else
        os << (b.now[0] ? "at " + std::string(b.now) : std::string("no operation yet")) << " (barrier phase "
           << b.phase.load() << ")";
    }
  }
  const std::string s = os.str();
  if (buf && len) copy_text(buf, len, s);
  return s.size();
}

// Why this process's ACCEL_SIM_* settings are bad (empty when they are fine): the backend
// asks before it meets the other processes, so a bad setting fails every process with its own
// message instead of the first one's exit breaking the others' store connections.
ACCEL_SIM_EXPORT size_t accelSimConfigError(char* buf, size_t len) {
  auto& p = proc();
  std::string s;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    p.configure();
    if (!p.config_error.empty()) s = "simulated NCCL: " + p.config_error;
  }
  if (buf && len) copy_text(buf, len, s);
  return s.size();
}

ACCEL_SIM_EXPORT void accelSimNote(ncclComm_t c, const char* why) {
  if (!c || !why) return;
  {
    std::lock_guard<std::mutex> lk(proc().mu);
    proc().record_error(why);
  }
  if (c->blocks) copy_text(c->me().note, kNote, why);
}

ACCEL_SIM_EXPORT int accelSimMemCharge(unsigned long long bytes, char* msg, size_t len) {
  std::string m;
  if (mem_charge(bytes, &m)) return 0;
  if (msg && len) copy_text(msg, len, m);
  return 1;
}

ACCEL_SIM_EXPORT void accelSimMemRelease(unsigned long long bytes) { mem_release(bytes); }

// How this communicator's collectives moved their data, for the tests and diagnostics:
// counts[0] collectives through the peers' arenas (memcpy, no system call), [1] by direct
// access with cross-memory attach for some peer, [2] staged through the segment, [3] the
// cross-memory-attach system calls made, [4] the bytes of this process's arena backed by
// memory now, [5] the tickets of the shared collectives (through the arenas, outputs
// included: run_shared) that this rank did and [6] those collectives' tickets in all (the
// same on every rank). Writes at most `len` of them; returns how many there are.
ACCEL_SIM_EXPORT size_t accelSimDataPaths(ncclComm_t c, unsigned long long* counts, size_t len) {
  const unsigned long long v[] = {c ? c->by_arena.load() : 0,     c ? c->by_attach.load() : 0,
                                  c ? c->by_staging.load() : 0,   c ? c->attach_calls.load() : 0,
                                  arena_resident(),               c ? c->tickets_done.load() : 0,
                                  c ? c->tickets.load() : 0};
  const size_t n = sizeof v / sizeof v[0];
  for (size_t i = 0; i < std::min(n, len); ++i) counts[i] = v[i];
  return n;
}
