// Where a context's world comes from: the one place of accel that names the communication
// backends, joins a launched process's world, places a context on its device, runs a world
// of simulated ranks, and hands the simulator's memory budgets to libtorch's allocator
// (device_memory.h). Below it, comm/ knows no backend table and no simulator; sim/ knows no
// runtime. A new backend is a folder under comm/ and one line in world.cpp's table.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "comm/rendezvous.h"
#include "sim/world.h"

namespace accel {
class Accelerator;
struct Options;  // runtime/options.h (this header stays torch-free)
}

namespace accel::world {

// The process group `config.backend` names (InvalidArgument naming the backends this build
// has when it names none of them). Backend "sim" here is a process of a launched simulated
// world (the nccl backend on the simulated NCCL library); a rank thread of the in-process
// simulator is simulated_rank's.
std::shared_ptr<comm::Communicator> make_process_group(const comm::GroupConfig& config);

// The communicator of a rank of the in-process simulator (its World owns it and outlives the
// rank's contexts); installs the allocator hook that charges the rank's budget.
std::shared_ptr<comm::Communicator> simulated_rank(sim::Rank& rank);

// This process's world, from its launcher's variables (comm/launch_env.h): a process nobody
// launched, or alone in its world with backend "auto", gets the local backend; otherwise
// `backend` ("auto": "nccl" when `cuda`, else "gloo"; or a name of backend_names()) joins
// the others at MASTER_ADDR:MASTER_PORT within `timeout`. A process belongs to one world:
// the first call joins it and later calls return the same communicator (a later call naming
// another backend is an InvalidState error). The group lives until the process exits.
std::shared_ptr<comm::Communicator> join_world(const std::string& backend, std::chrono::milliseconds timeout, bool cuda);

// The backends this build has, comma-separated, in the table's order.
std::string backend_names();

// What accel_init does: places a context on its device (auto: CUDA where each process of
// this node can have a GPU of its own, else the CPU), joins this process's world
// (join_world) and makes the Accelerator.
std::unique_ptr<Accelerator> open(const Options& options);

// What accel_sim_run does: a world of settings.world_size simulated ranks (threads) on the
// CPU, each running `rank_fn` with an Accelerator of `options` joined to its rank. The
// settings are checked first (world_options: each field named); `trace_path`, when not
// empty, is checked as a file target and receives the world's Chrome trace, whole, after
// the run. Returns every rank's report (a rank whose function threw has its status and
// message there); the caller decides what a failed rank means.
sim::RunReport run_simulated(const sim::WorldSettings& settings, const std::string& trace_path, const Options& options,
                             const std::function<void(std::unique_ptr<Accelerator>)>& rank_fn);

}  // namespace accel::world
