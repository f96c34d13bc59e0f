// The state a World's ranks share while they run, all of it guarded by one mutex, and the
// operations on it, defined by concern:
//   matching.cpp      posting; matching each call across ranks by its fingerprint; failing
//                     operations, with messages that name the ranks and calls (mismatches,
//                     dead ranks, deadlocks)
//   scheduler.cpp     the maestro (one rank runs at a time: the baton), waiting, timeouts,
//                     the progress of the ranks' streams, and the virtual clocks
//   communicator.cpp  the Communicator a rank sees
// Torch-free.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/cost.h"
#include "sim/engine.h"
#include "sim/faults.h"
#include "sim/operation.h"
#include "sim/trace.h"
#include "sim/world.h"

namespace accel::sim {

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
  RankFaults faults;
  uint64_t collectives = 0, bytes_sent = 0;
  uint64_t host_bytes = 0;    // device <-> host transfers charged (offload)
  double host_seconds = 0.0;  // and their time over the host link
  double host_link_t = 0.0;   // when the rank's host link is free (posted copies run beside the compute)
  Status status = Status::Ok;
  std::string error;
  ReplayProgram program;    // WorldOptions::record_program: what the rank did, as a replay program
  std::string approximate;  // what it did that a replay does not model
};

// A collective being matched: each rank's call of one collective number.
struct CollEntry {
  std::vector<OpPtr> ops;  // by rank; null until that rank posts
  OpPtr first;             // the first poster's call, the reference fingerprint
  int posted = 0;
  bool failed = false;
  comm::Result result = comm::Result::Success;
  std::string error;
};

struct Simulation {
  WorldOptions opts;
  Topology topo;
  int n = 0;
  mutable std::mutex mu;
  // One condition variable per rank: handing over the baton wakes only its new holder
  // (a shared one would wake every rank thread at every switch: N^2 wake-ups per collective).
  std::unique_ptr<std::condition_variable[]> cvs;
  int holder = -1;  // the rank allowed to run
  std::vector<RankData> ranks;
  int first_dead = -1;  // the lowest rank that died (a post checks it in O(1)), -1: none
  AlgorithmFilter algorithms;  // WorldOptions::algorithms (or NCCL_ALGO), parsed
  ReplayRecording recording;   // the last run's (WorldOptions::record_program)
  std::map<uint64_t, CollEntry> colls;
  // p2p: (src, dst, seq) -> the posted send and recv
  std::map<std::tuple<int, int, uint64_t>, std::pair<OpPtr, OpPtr>> p2p;
  std::chrono::steady_clock::time_point last_progress;
  std::vector<TraceEvent> trace;
  std::mt19937_64 noise;
  Engine engine;
  std::shared_ptr<MemoryBudget> budget;
  std::vector<char> progress_queued;  // progress()'s work-list marks, kept to avoid an O(n) allocation per call
  std::vector<std::unique_ptr<RankCommunicator>> comms;  // one per rank, made by World::run()
  // WorldOptions::missing, parsed: (collective, element type or -1 for every type)
  std::vector<std::pair<comm::Collective, int>> missing;

  // --- matching.cpp -----------------------------------------------------------------

  // Records rank r's operation: its number, its match across ranks (failing it on a
  // mismatch or a dead peer), then its place in the rank's stream or open group.
  void post(int r, const OpPtr& op);
  void fail_op(const OpPtr& op, comm::Result r, const std::string& msg);
  void fail_collective(uint64_t seq, comm::Result r, const std::string& msg);
  // A rank died: everything that needs it fails with RemoteError.
  void rank_died(int r, const std::string& why);
  // "rank R died: why", for the operations that needed it.
  std::string died(int r) const;
  // Nobody can run but someone waits: name the ranks and calls that block each other.
  void diagnose_deadlock();

  // --- scheduler.cpp ----------------------------------------------------------------

  bool runnable(int r) const;
  // Hands the baton to the next runnable rank after `from` (round robin). With none
  // runnable while some rank still waits: a deadlock; diagnose it (fails the operations
  // involved) and try again.
  void pass_baton(int from);
  // noise_seed: a random sleep at a scheduling point.
  void maybe_noise(std::unique_lock<std::mutex>& lk);
  // Blocks the calling rank until `op` is done, letting other ranks run meanwhile.
  void wait_op(int r, const OpPtr& op, std::unique_lock<std::mutex>& lk);
  void time_out(const OpPtr& op);
  // Whether `op` is in the slot at the head of rank r's stream.
  bool head_has(int r, const OpPtr& op) const;
  // Runs every operation that became runnable. Only ranks whose stream head may have
  // changed are examined: the rank that posted (`from`), then every rank an executed
  // operation involved, so the cost per operation does not grow with the world.
  // from < 0: examine every rank (after a rank finished or died).
  void progress(int from = -1);
  // Moves the data (the engine), then advances the virtual clocks by the cost model and
  // records the trace.
  void execute_collective(CollEntry& e);
  void execute_p2p(const OpPtr& s, const OpPtr& r);
  // `o` ran on its rank's communication stream from `start` for `seconds`.
  void complete(Op& o, double start, double seconds);
};

// communicator.cpp: rank `rank`'s communicator on `sim`.
std::unique_ptr<RankCommunicator> make_sim_communicator(Simulation& sim, int rank);

}  // namespace accel::sim
