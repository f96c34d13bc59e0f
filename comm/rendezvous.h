// How the processes of a world find each other: the configuration a process group is made
// from, and the rendezvous every backend of real processes starts with. Which backend a name
// means is decided above comm, in the runtime (runtime/world.cpp). Torch-free.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/store.h"

namespace accel::comm {

// What a process group is made from.
struct GroupConfig {
  std::string backend = "local";  // a name of world::backend_names() (runtime/world.h)
  int rank = 0, world_size = 1;   // this process in its world
  int local_rank = 0, local_world_size = 1;
  std::shared_ptr<Store> store;   // the rendezvous, for backends of real processes (null: a
                                  // TCPStore at master_addr:master_port that rank 0 hosts)
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

// Which process-id space this process lives in: the machine's boot id and its pid namespace
// ("<boot_id>/pid:[4026531836]"), "" where /proc does not say. Two processes may judge each
// other's pids (alive, ended) only when theirs are equal: a host name can repeat across
// machines, and containers on one host can share a host name but not their pids.
std::string pid_space();

// What process `rank` said of itself when it claimed its rank in `store` (meet): "pid",
// "host", "pidspace", "world_size", "backend", ... Waits for it as Store::get does.
std::map<std::string, std::string> joined(Store& store, int rank);

}  // namespace accel::comm
