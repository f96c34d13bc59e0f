// The process-group factory (see factory.h): one line per backend.
#include "runtime/comm/factory.h"

#include "runtime/status.h"
#include "sim/world.h"

namespace accel::comm {

namespace {

std::shared_ptr<Communicator> make_local(const GroupConfig& c) {
  ACCEL_CHECK(c.world_size == 1 && c.rank == 0, Status::InvalidArgument, "backend 'local' is one process, got rank ", c.rank,
              " of ", c.world_size);
  return make_local_communicator();
}

// A simulated rank's communicator: its World owns it and outlives the rank's contexts.
std::shared_ptr<Communicator> make_sim(const GroupConfig& c) {
  ACCEL_CHECK(c.sim_rank != nullptr, Status::InvalidArgument,
              "backend 'sim' joins a simulated world: run the program through accel_sim_run");
  return std::shared_ptr<Communicator>(&c.sim_rank->comm(), [](Communicator*) {});
}

struct Backend {
  const char* name;
  std::shared_ptr<Communicator> (*make)(const GroupConfig&);
};

const Backend kBackends[] = {
    {"local", make_local},  // one process: collectives are copies
    {"sim", make_sim},      // a rank of the deterministic simulator (sim/)
};

}  // namespace

std::shared_ptr<Communicator> make_process_group(const GroupConfig& config) {
  for (const Backend& b : kBackends)
    if (config.backend == b.name) return b.make(config);
  fail(Status::InvalidArgument, "backend '", config.backend, "' is not one this build has (", backend_names(), ")");
}

std::string backend_names() {
  std::string out;
  for (const Backend& b : kBackends) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

}  // namespace accel::comm
