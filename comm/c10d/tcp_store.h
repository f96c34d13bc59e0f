// c10d's TCPStore behind the Store interface: the rendezvous of real processes (the Gloo and
// NCCL backends meet through it). Process 0 hosts the server (`is_server`), every process
// (process 0 too) is a client of it. Errors become CommError: Timeout for a key that does not
// come or a server that cannot be reached within the timeout, RemoteError (the C ABI's
// ACCEL_ERR_COMMUNICATION) for a connection that fails otherwise.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/rendezvous.h"
#include "comm/store.h"

namespace accel::comm {

struct TcpStoreConfig {
  std::string host = "127.0.0.1";  // the server's address (MASTER_ADDR)
  int port = 29500;                // its port; 0 with is_server: a free one (see bound_port)
  bool is_server = false;          // this process hosts the server (process 0)
  int world_size = 1;              // processes that will connect
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // each operation's; connecting waits >= 1 s
};

// Connects (and with is_server, first starts the server). `bound_port` receives the port
// the server listens on (useful with port 0).
std::shared_ptr<Store> make_tcp_store(const TcpStoreConfig& config, int* bound_port = nullptr);

// The store a group of real processes meets through: c.store when given (tests), else a
// TCPStore at c.master_addr:c.master_port that rank 0 hosts, with c's timeout.
std::shared_ptr<Store> group_store(const GroupConfig& c);

}  // namespace accel::comm
