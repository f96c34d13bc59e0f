// The NCCL backend: one NCCL communicator per process behind the Communicator, for CUDA
// devices, on the real NCCL and CUDA runtime loaded with dlopen when the backend is first
// asked for (nothing links them: one build runs with or without them), and on the simulated
// NCCL (comm/nccl/api.h). Torch-free: it calls only nccl.h and a few
// functions of the CUDA runtime (device count and selection, one stream, events, a small
// buffer), the set that sim/nccl/ implements over host memory.
//
// The processes meet through the Store (comm::meet), process 0 makes the unique id
// (ncclGetUniqueId) and publishes it there; the communicator is created non-blocking
// (ncclConfig_t.blocking = 0) so that every NCCL call, creation included, is polled with
// ncclCommGetAsyncError against the timeout. Operations run on a stream of their own,
// ordered after the compute stream (the device's default stream, where the runtime
// computes) by an event; a Work is an event recorded after the operation. Waiting polls the
// event and the communicator's asynchronous error: a timeout or a peer's failure aborts the
// communicator (ncclCommAbort) and surfaces as CommError(Timeout) / the error NCCL reported
// (ncclRemoteError, ncclSystemError: ACCEL_ERR_COMMUNICATION), never a hang.
#pragma once

#include <memory>
#include <string>

#include "comm/rendezvous.h"

namespace accel::comm {

// Joins the world `c` describes on CUDA device c.device (-1: local_rank modulo the devices
// this process sees). Error(Unsupported) when the process sees no CUDA device, or when the
// real NCCL or CUDA runtime cannot be loaded (the message names the files tried).
std::shared_ptr<Communicator> make_nccl_communicator(const GroupConfig& c);

// The same backend on the simulated NCCL (sim/nccl/, loaded from libaccel-nccl-sim.so):
// one simulated GPU per process, host memory, the simulator's clock, budget and faults
// (ACCEL_SIM_*). ACCEL_BACKEND=sim in a launched world.
std::shared_ptr<Communicator> make_sim_nccl_communicator(const GroupConfig& c);

// The simulated library's per-process memory budget (its accelSimMemCharge and
// accelSimMemRelease): charge returns 0, or non-zero with a CUDA-shaped out-of-memory message
// written into its buffer. The runtime hands them to its allocator hook once a process joined
// a simulated world (runtime/world.cpp); loads the library.
struct SimMemoryHooks {
  int (*charge)(unsigned long long bytes, char* msg, size_t len) = nullptr;
  void (*release)(unsigned long long bytes) = nullptr;
};
SimMemoryHooks sim_nccl_memory_hooks();

// The path of the simulated NCCL library this process loads for backend 'sim' (loading it
// if not yet loaded); Error(Unsupported) naming the paths tried when it cannot be loaded.
std::string sim_nccl_library();

// The real NCCL and CUDA runtime this process loads for backend 'nccl' ("PATH (NCCL x.y.z);
// PATH"), loading them if not yet loaded; Error(Unsupported) naming the files tried when
// they cannot be loaded (`accel env`).
std::string real_nccl_library();

}  // namespace accel::comm
