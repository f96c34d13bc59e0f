// Process groups are made here, from the configuration: a backend's name picks its
// constructor in one table (factory.cpp). A new backend is a folder under runtime/comm/ and
// one line in that table. Torch-free.
#pragma once

#include <chrono>
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
  std::shared_ptr<Store> store;   // the rendezvous, for backends of real processes (null: a
                                  // TCPStore at master_addr:master_port that rank 0 hosts)
  sim::Rank* sim_rank = nullptr;  // "sim": the simulated rank this context is (its World owns it)
  std::string master_addr = "127.0.0.1";  // real processes: where rank 0 hosts the store
  int master_port = 29500;
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // rendezvous and every operation
  int device = -1;  // nccl: the CUDA device ordinal (-1: local_rank modulo the devices visible)
};

// The rendezvous every backend of real processes starts with: this process claims its rank
// in `store` (compare-and-set, so a second process with the same rank is an
// InvalidArgument naming both), then waits up to c.timeout for every rank and checks that
// all describe the same world (world size, backend): a rank that never arrives is a Timeout
// naming it and those that came; a disagreement is an InvalidArgument naming the ranks and
// their values.
void meet(Store& store, const GroupConfig& c);

// The process group `config.backend` names (InvalidArgument naming the backends this build
// has when it names none of them).
std::shared_ptr<Communicator> make_process_group(const GroupConfig& config);

// This process's world, from its launcher's variables (launch_env.h): a process nobody
// launched, or alone in its world with backend "auto", gets the local backend; otherwise
// `backend` ("auto": "nccl" when `cuda`, else "gloo"; or a name of backend_names()) joins
// the others at MASTER_ADDR:MASTER_PORT within `timeout`. A process belongs to one world:
// the first call joins it and later calls return the same communicator (a later call naming
// another backend is an InvalidState error). The group lives until the process exits.
std::shared_ptr<Communicator> join_world(const std::string& backend, std::chrono::milliseconds timeout, bool cuda);

// The backends this build has, comma-separated, in the factory's order.
std::string backend_names();

}  // namespace accel::comm
