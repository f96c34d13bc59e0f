// Process groups are made here, from the configuration: a backend's name picks its
// constructor in one table (factory.cpp). A new backend is a folder under runtime/comm/ and
// one line in that table. Torch-free.
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/comm/store.h"

namespace accel::sim {
class Rank;
}

namespace accel::comm {

// What a process group is made from.
struct GroupConfig {
  std::string backend = "local";  // a name of backend_names()
  int rank = 0, world_size = 1;   // this process in its world
  int local_rank = 0, local_world_size = 1;
  std::shared_ptr<Store> store;   // the rendezvous, for backends of real processes
  sim::Rank* sim_rank = nullptr;  // "sim": the simulated rank this context is (its World owns it)
};

// The process group `config.backend` names (InvalidArgument naming the backends this build
// has when it names none of them).
std::shared_ptr<Communicator> make_process_group(const GroupConfig& config);

// The backends this build has, comma-separated, in the factory's order.
std::string backend_names();

}  // namespace accel::comm
