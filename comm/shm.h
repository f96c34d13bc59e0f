// Collectives through shared memory, for the processes of one machine (as NCCL's SHM
// transport, which Gloo lacks: its collectives go through TCP over loopback, about 1 GB/s and
// a millisecond a call here, where a copy through memory is 10-20 GB/s and microseconds).
//
// The processes of a world whose join records (comm/rendezvous.h) name one pid space (one
// machine, one pid namespace) map one segment: process 0 creates a memfd, the others open it
// through /proc/<pid>/fd and map it. Each process has a slot in it, twice (alternate chunks use
// alternate slots, so a process may write its next chunk while the others still read its last).
// A collective goes chunk by chunk through the slots:
//   all_reduce, reduce: each process copies its chunk into its slot; each reduces its part of
//     the chunk (1/n of it, in rank order, so every process gets the same bytes) across every
//     slot; each copies every part out (reduce: the root only);
//   reduce_scatter: each copies the pieces of its input into its slot; each reduces its own
//     piece across the slots straight into its output;
//   all_gather, broadcast: each (the root) copies in; the others copy out.
// Each step waits for the others to be there: a few microseconds of spinning, then a futex on
// the segment (woken by the process that arrives). Every chunk carries its collective's
// fingerprint (number, kind, count, type, reduction, root): processes whose calls differ never
// combine their buffers. They stop there, as Gloo would hang, and the guard above (comm/guard.h)
// names the calls within seconds; without the guard (ACCEL_COMM_CHECK=0) the mismatch is a
// CommError(InvalidUsage) at once.
//
// Operations run in the order posted, on the caller's thread: posting starts what can start
// without waiting (outside a group; inside one, nothing starts before group_end), and waiting
// on an operation (wait, wait_for, test) runs it and those before it. A wait longer than the operation's timeout (from its post) is a CommError(Timeout) naming
// the processes not there yet. Send and recv, and everything on a machine where the segment
// cannot be made, go to the inner communicator (Gloo).
//
// ACCEL_GLOO_SHM: unset or "auto": used where every process is in one pid space and the
// segment can be made, Gloo's own otherwise; "0"/"off": never; "1"/"on": required (a world that
// cannot have it fails to start, naming why). Torch-free.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace accel::comm {

// `inner` (a host backend of real processes with a store(), such as Gloo) with its collectives
// through shared memory where ACCEL_GLOO_SHM and the machine allow (see above), agreed by every
// process through the store; `inner` itself otherwise. `timeout`: the operations' timeout.
// Collective: every process of the world calls it.
std::shared_ptr<Communicator> shared_memory_collectives(std::shared_ptr<Communicator> inner,
                                                        std::chrono::milliseconds timeout);

}  // namespace accel::comm
