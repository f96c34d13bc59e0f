// The process-group factory (see factory.h): one line per backend, and the rendezvous of
// real processes.
#include "runtime/comm/factory.h"

#include <unistd.h>

#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "runtime/comm/launch_env.h"
#include "base/status.h"
#include "sim/world.h"
#ifdef ACCEL_HAVE_GLOO
#include "runtime/comm/gloo/gloo.h"
#endif
#include "runtime/comm/nccl/nccl.h"

namespace accel::comm {

namespace {

std::shared_ptr<Communicator> make_local(const GroupConfig& c) {
  ACCEL_CHECK(c.world_size == 1 && c.rank == 0, Status::InvalidArgument, "backend 'local' is one process, got rank ", c.rank,
              " of ", c.world_size);
  return make_local_communicator();
}

// A simulated rank: a rank thread of the in-process simulator (its World owns the
// communicator and outlives the rank's contexts), or a process of a launched world on the
// simulated NCCL library (the nccl backend loaded with libaccel-nccl-sim.so).
std::shared_ptr<Communicator> make_sim(const GroupConfig& c) {
  if (c.sim_rank != nullptr) return std::shared_ptr<Communicator>(&c.sim_rank->comm(), [](Communicator*) {});
  ACCEL_CHECK(c.store != nullptr || read_launch_env().launched, Status::InvalidArgument,
              "backend 'sim' joins a simulated world: run the program through accel_sim_run (ranks as threads), or ",
              "as the processes of a launched world (accel launch --backend sim)");
  return make_sim_nccl_communicator(c);
}

struct Backend {
  const char* name;
  std::shared_ptr<Communicator> (*make)(const GroupConfig&);
};

const Backend kBackends[] = {
    {"local", make_local},  // one process: collectives are copies
    {"sim", make_sim},      // a simulated rank: in-process (sim/) or a process on the simulated NCCL (sim/nccl.cpp)
#ifdef ACCEL_HAVE_GLOO
    {"gloo", make_gloo_communicator},  // real processes over TCP: c10d's ProcessGroupGloo (runtime/comm/gloo/)
#endif
    {"nccl", make_nccl_communicator},  // CUDA devices: one NCCL communicator per process, NCCL loaded at run time (runtime/comm/nccl/)
};

// What a process says of itself when it claims its rank: "key=value" fields, one per line.
std::string describe(const GroupConfig& c) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::ostringstream o;
  // the nonce tells two claims apart even from one process (threads in tests)
  o << "nonce=" << std::random_device{}() << "\npid=" << getpid() << "\nhost=" << host << "\nworld_size=" << c.world_size
    << "\nbackend=" << c.backend << "\nlocal_rank=" << c.local_rank << "\nlocal_world_size=" << c.local_world_size << "\n";
  return o.str();
}

std::map<std::string, std::string> fields(const Bytes& b) {
  std::map<std::string, std::string> out;
  std::istringstream in(std::string(b.begin(), b.end()));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string who(const std::map<std::string, std::string>& f) {
  auto get = [&](const char* k) {
    auto it = f.find(k);
    return it == f.end() ? std::string("?") : it->second;
  };
  return "pid " + get("pid") + " on " + get("host");
}

std::string rank_key(int r) { return "accel/join/rank/" + std::to_string(r); }

// Names every field on which a joined process differs from this one.
void compare_worlds(Store& store, const GroupConfig& c, const std::map<std::string, std::string>& mine,
                    const std::vector<int>& ranks) {
  std::string diffs;
  for (int r : ranks) {
    if (r == c.rank) continue;
    const auto theirs = fields(store.get(rank_key(r)));
    for (const char* k : {"world_size", "backend"}) {
      auto it = theirs.find(k);
      const std::string v = it == theirs.end() ? "?" : it->second;
      if (v != mine.at(k))
        diffs += "; rank " + std::to_string(r) + " (" + who(theirs) + ") has " + k + " " + v + ", this process (rank " +
                 std::to_string(c.rank) + ") has " + mine.at(k);
    }
  }
  ACCEL_CHECK(diffs.empty(), Status::InvalidArgument, "the processes disagree on the world", diffs,
              " (check WORLD_SIZE and ACCEL_BACKEND on every process)");
}

}  // namespace

void meet(Store& store, const GroupConfig& c) {
  ACCEL_CHECK(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, Status::InvalidArgument, "rank ", c.rank,
              " is outside a world of ", c.world_size, " processes");
  const std::string me = describe(c);
  const Bytes mine(me.begin(), me.end());
  const Bytes now = store.compare_set("accel/join/claim/" + std::to_string(c.rank), Bytes{}, mine);
  if (now != mine)
    fail(Status::InvalidArgument, "rank ", c.rank, " is claimed by two processes: ", who(fields(now)), " and this one (",
         who(fields(mine)), "); give every process its own RANK");
  // then announced with set(), which wakes those waiting (c10d 1.13's compareSet does not)
  store.set(rank_key(c.rank), mine);
  std::vector<std::string> keys;
  std::vector<int> all;
  for (int r = 0; r < c.world_size; ++r) {
    keys.push_back(rank_key(r));
    all.push_back(r);
  }
  try {
    store.wait(keys, c.timeout);
  } catch (const CommError& e) {
    if (e.result() != Result::Timeout) throw;
    std::vector<int> came;
    std::string missing;
    for (int r = 0; r < c.world_size; ++r) {
      if (store.check(rank_key(r)))
        came.push_back(r);
      else
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    compare_worlds(store, c, fields(mine), came);  // a disagreement explains the absence better than a timeout
    std::string joined;
    for (int r : came)
      joined += (joined.empty() ? "" : ", ") + std::to_string(r) + " (" + who(fields(store.get(rank_key(r)))) + ")";
    throw CommError(Result::Timeout, "rank(s) " + missing + " of " + std::to_string(c.world_size) + " did not join within " +
                                         std::to_string(c.timeout.count()) + " ms (joined: " + joined +
                                         "): a process that failed to start, or a wrong WORLD_SIZE, MASTER_ADDR or MASTER_PORT");
  }
  compare_worlds(store, c, fields(mine), all);
}

std::shared_ptr<Communicator> make_process_group(const GroupConfig& config) {
  for (const Backend& b : kBackends)
    if (config.backend == b.name) return b.make(config);
  fail(Status::InvalidArgument, "backend '", config.backend, "' is not one this build has (", backend_names(), ")");
}

std::shared_ptr<Communicator> join_world(const std::string& backend, std::chrono::milliseconds timeout, bool cuda) {
  const LaunchEnv env = read_launch_env();
  if (!env.launched || (env.world_size == 1 && backend == "auto")) return make_local_communicator();
  GroupConfig c;
  c.backend = backend == "auto" ? (cuda ? "nccl" : "gloo") : backend;
  c.rank = env.rank;
  c.world_size = env.world_size;
  c.local_rank = env.local_rank;
  c.local_world_size = env.local_world_size;
  c.master_addr = env.master_addr.empty() ? "127.0.0.1" : env.master_addr;
  c.master_port = env.master_port;
  c.timeout = timeout;
  bool known = false;
  for (const Backend& b : kBackends) known = known || c.backend == b.name;
  ACCEL_CHECK(known, Status::Unsupported, "backend '", c.backend, "' is not in this build (it has ", backend_names(),
              ")", c.backend == "nccl" && backend == "auto" ? "; set ACCEL_BACKEND=gloo to use Gloo for CUDA tensors" : "");
  ACCEL_CHECK(c.backend != "local", Status::InvalidArgument, "backend '", c.backend,
              "' cannot join a launched world of ", c.world_size, " processes");
  // One world per process, kept until exit (never destroyed: peers may still be talking
  // to it while this process's static destructors run).
  static std::mutex mu;
  static std::shared_ptr<Communicator>* world = nullptr;
  static GroupConfig* joined = nullptr;
  std::lock_guard<std::mutex> lk(mu);
  if (world) {
    ACCEL_CHECK(joined->backend == c.backend, Status::InvalidState, "this process already joined its world as rank ",
                joined->rank, " of ", joined->world_size, " over ", joined->backend, "; a context cannot use ", c.backend,
                " beside it");
    return *world;
  }
  auto comm = make_process_group(c);
  world = new std::shared_ptr<Communicator>(std::move(comm));
  joined = new GroupConfig(c);
  return *world;
}

std::string backend_names() {
  std::string out;
  for (const Backend& b : kBackends) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

}  // namespace accel::comm
