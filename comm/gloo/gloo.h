// The Gloo backend: libtorch's c10d ProcessGroupGloo (Gloo over TCP) behind the
// Communicator, for real processes on one machine or many. The processes meet through a
// Store (c10d's TCPStore hosted by process 0, or any accel Store a test passes): each claims
// its rank there, the group checks that every process agrees on the world, then c10d connects
// the full mesh. Torch-free header; the implementation is gloo.cpp.
//
// What c10d's Gloo lacks is composed from its own calls (docs/distributed.md, "The Gloo backend"):
//   reduce_scatter       floating-point Sum/Avg: an all-to-all of the chunks, then each
//                        process sums the n chunks it received in rank order ((n-1)·count
//                        elements per rank, as NCCL's ring, in one exchange); other types and
//                        ops: all-reduce of the whole buffer, this rank's slice kept (twice that)
//   Avg                  Sum, then a division on each process
//   PreMulSum            each process scales its own input, then Sum
//   bfloat16 reductions  staged through float32 (twice the bytes), rounded back once
//   uint32 / uint64      Sum/Prod as int32/int64 (the same bits modulo 2^n); Max/Min by an
//                        all-gather and a reduction in rank order on each process ((n-1)·count)
// Every operation is asynchronous (c10d's Work); results that need a step after the
// transfer (a slice, a division, a conversion) are finished when the Work is waited on or
// tested complete. Errors: a timeout is CommError(Timeout) (ACCEL_ERR_TIMEOUT), a closed
// or reset connection (a dead peer) CommError(RemoteError) (ACCEL_ERR_COMMUNICATION).
#pragma once

#include <memory>

#include "comm/rendezvous.h"

namespace accel::comm {

// Built where c10d's Gloo headers were found at configure time (backend_names() lists "gloo").
// Joins the world `c` describes (rank, world_size, local ranks, master address and port,
// timeout; c.store when given, else a TCPStore that rank 0 hosts). Throws CommError /
// Error(InvalidArgument) naming what is wrong: two processes claiming one rank, processes
// that disagree on the world size or backend, ranks that never arrive within the timeout.
std::shared_ptr<Communicator> make_gloo_communicator(const GroupConfig& c);

}  // namespace accel::comm
