// Where this process stands in a launched world, read from the launcher's environment:
// accel launch and torchrun, Open MPI's mpirun, MPICH/PMI (mpiexec, Intel MPI) and Slurm's
// srun each describe the world in their own variables. Torch-free.
//
// The order (the first launcher whose rank variable is set wins; a set with a rank but no
// world size is an error naming the missing variable):
//   1. torchrun / accel launch: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   2. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//      OMPI_COMM_WORLD_LOCAL_SIZE
//   3. MPICH / PMI: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   4. Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (its first
//      count, "4(x2)" style lists included)
// Local rank and size default to the global ones where the launcher gives none (one node).
// The rendezvous: MASTER_ADDR and MASTER_PORT (default 29500) whoever launched; under Slurm
// without MASTER_ADDR, SLURM_LAUNCH_NODE_IPADDR (the node srun ran on); otherwise a world
// of more than one process without MASTER_ADDR is an error saying to set it.
#pragma once

#include <functional>
#include <string>

namespace accel::comm {

struct LaunchEnv {
  bool launched = false;  // a launcher's variables were found (else: one process, the rest default)
  std::string launcher;   // "torchrun", "Open MPI", "MPICH/PMI", "Slurm"
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr;  // empty for a single process that was given none
  int master_port = 29500;
};

// Reads the variables through `get` (std::getenv by default; tests pass their own).
// InvalidArgument naming the variable and its value for anything malformed or
// contradictory (not an integer, a rank outside [0, world size), a local rank outside its
// node, a port outside [0, 65535], a world without a master address).
LaunchEnv read_launch_env(const std::function<const char*(const char*)>& get = nullptr);

}  // namespace accel::comm
