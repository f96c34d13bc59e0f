// The launcher's environment (launch_env.h).
#include "comm/launch_env.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "base/status.h"

namespace accel::comm {

namespace {

struct Names {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

// In the documented order.
const Names kLaunchers[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPICH/PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

// A whole decimal integer in [lo, hi]; `text` may end in Slurm's "(xN)" repeat suffix when
// `slurm_list` (the first count of "4(x2),3" is 4).
int parse_int(const char* name, const char* text, long lo, long hi, bool slurm_list = false) {
  std::string t = text;
  if (slurm_list) t = t.substr(0, t.find_first_of("(,"));
  errno = 0;
  char* end = nullptr;
  const long v = t.empty() ? 0 : std::strtol(t.c_str(), &end, 10);
  ACCEL_CHECK(!t.empty() && errno == 0 && end && *end == '\0' && v >= lo && v <= hi, Status::InvalidArgument, name, "='",
              text, "' is not an integer in [", lo, ", ", hi, "]");
  return static_cast<int>(v);
}

}  // namespace

LaunchEnv read_launch_env(const std::function<const char*(const char*)>& get_arg) {
  auto get = [&](const char* name) -> const char* {
    const char* v = get_arg ? get_arg(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  };
  LaunchEnv e;
  constexpr long kMaxProcesses = 1 << 24;
  for (const Names& n : kLaunchers) {
    const char* rank = get(n.rank);
    if (!rank) continue;
    const char* size = get(n.size);
    ACCEL_CHECK(size != nullptr, Status::InvalidArgument, n.rank, " is set (", n.launcher, "'s variables) but ", n.size,
                " is not: the world's size is unknown");
    e.launched = true;
    e.launcher = n.launcher;
    e.world_size = parse_int(n.size, size, 1, kMaxProcesses);
    e.rank = parse_int(n.rank, rank, 0, kMaxProcesses);
    ACCEL_CHECK(e.rank < e.world_size, Status::InvalidArgument, n.rank, "=", e.rank, " is not below ", n.size, "=",
                e.world_size, " (ranks count from 0)");
    const char* local_size = get(n.local_size);
    const char* local_rank = get(n.local_rank);
    e.local_world_size = local_size ? parse_int(n.local_size, local_size, 1, e.world_size, true) : e.world_size;
    e.local_rank = local_rank ? parse_int(n.local_rank, local_rank, 0, kMaxProcesses) : e.rank;
    ACCEL_CHECK(e.local_rank < e.local_world_size, Status::InvalidArgument, n.local_rank, "=", e.local_rank,
                " is not below the node's ", e.local_world_size, " processes (", n.local_size, ")");
    break;
  }
  if (const char* addr = get("MASTER_ADDR")) {
    e.master_addr = addr;
  } else if (e.launcher == "Slurm" && get("SLURM_LAUNCH_NODE_IPADDR")) {
    e.master_addr = get("SLURM_LAUNCH_NODE_IPADDR");
  }
  if (const char* port = get("MASTER_PORT")) e.master_port = parse_int("MASTER_PORT", port, 0, 65535);
  ACCEL_CHECK(e.world_size == 1 || !e.master_addr.empty(), Status::InvalidArgument, e.launcher, " started ", e.world_size,
              " processes but MASTER_ADDR is not set: set it (and MASTER_PORT, default 29500) to the address where "
              "process 0 can be reached");
  return e;
}

}  // namespace accel::comm
