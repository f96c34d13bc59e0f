// Collective fingerprints across real processes: what the simulator checks for the ranks it
// runs (sim/matching.cpp), checked between the processes of a Gloo or NCCL world, where the
// library itself would hang until its timeout (NCCL) or fail naming nobody (Gloo).
//
// The guard wraps a real-process communicator. Every call it passes on gets a fingerprint:
// its number (collectives are numbered per process, send/recv per pair and direction), kind,
// count, data type, reduction, root or peer; the last kHistory are kept in this process, which
// costs a few stores per call and no communication. Nothing is exchanged while waits end in
// time. When a wait passes `check_after` (1 s, or a quarter of the timeout when that is
// shorter), the waiting process publishes where it is in the store the world met through
// (the TCPStore) and reads where the others are:
//   - two processes whose calls of one number differ: every process fails with
//     ACCEL_ERR_INVALID_STATE (CommError InvalidUsage) and the calls listed, in the
//     simulator's words ("mismatched collectives at call #5: rank 0 called all_reduce #5(...);
//     rank 1 called reduce #5(...); every rank must make the same calls in the same order");
//   - a process that is gone (its pid on this host has exited, or it shut down its context)
//     before making the call waited for: CommError RemoteError (ACCEL_ERR_COMMUNICATION)
//     naming its rank, its pid and how it ended (its exit status where `accel launch` started
//     it: the launcher writes each rank's status into ACCEL_LAUNCH_STATUS_DIR);
//   - a process that is alive but not there yet: nothing (a slow rank is not an error); when
//     the timeout passes, the Timeout error says where every process is (its last call, or
//     the call it waits in, and since when).
// The first process to reach a verdict writes it to the store, so the others quote it
// instead of finding it again, and a failure Gloo or NCCL reports itself (a connection a dead
// peer closed) is explained the same way before it is thrown. A background thread publishes
// this process's last call about once a second while it makes calls, so that a process
// that stopped calling is described by its last call.
//
// ACCEL_COMM_CHECK=0 turns the guard off (the communicator is used as it is).
// Torch-free.
#pragma once

#include <chrono>
#include <memory>

#include "comm/communicator.h"
#include "comm/store.h"

namespace accel::comm {

// `inner` with fingerprints checked across the processes of its world, through its store()
// (the one the world met through: accel/join/rank/<r> names each process's pid and host;
// inner keeps it alive). `timeout` is the operations' timeout (GroupConfig::timeout).
// Returns `inner` itself when it has no store or a single process.
std::shared_ptr<Communicator> guard_communicator(std::shared_ptr<Communicator> inner, std::chrono::milliseconds timeout);

// Whether ACCEL_COMM_CHECK leaves the guard on (unset, or anything but "0"/"off"/"false").
bool comm_check_enabled();

}  // namespace accel::comm
