// Where a context's world comes from (world.h): the backends' table, the one world of a
// launched process, placement, and the in-process simulated world.
#include "runtime/world.h"

#include <algorithm>
#include <mutex>

#include "base/status.h"
#include "comm/guard.h"
#include "comm/launch_env.h"
#include "comm/nccl/nccl.h"
#ifdef ACCEL_HAVE_GLOO
#include "comm/gloo/gloo.h"
#endif
#include "runtime/accelerator.h"
#include "runtime/device_memory.h"
#include "runtime/paths.h"
#include "runtime/safetensors.h"

namespace accel::world {

namespace {

std::shared_ptr<comm::Communicator> make_local(const comm::GroupConfig& c) {
  ACCEL_CHECK(c.world_size == 1 && c.rank == 0, Status::InvalidArgument, "backend 'local' is one process, got rank ", c.rank,
              " of ", c.world_size);
  return comm::make_local_communicator();
}

// A process of a launched world on the simulated NCCL library (the nccl backend loaded with
// libaccel-nccl-sim.so): its allocations are its simulated GPU's, charged to the library's
// per-process budget.
std::shared_ptr<comm::Communicator> make_sim(const comm::GroupConfig& c) {
  ACCEL_CHECK(c.store != nullptr || comm::read_launch_env().launched, Status::InvalidArgument,
              "backend 'sim' joins a simulated world: run the program through accel_sim_run (ranks as threads), or ",
              "as the processes of a launched world (accel launch --backend sim)");
  auto group = comm::make_sim_nccl_communicator(c);
  const comm::SimMemoryHooks hooks = comm::sim_nccl_memory_hooks();
  device_memory::set_process_hooks(hooks.charge, hooks.release);
  return group;
}

struct Backend {
  const char* name;
  std::shared_ptr<comm::Communicator> (*make)(const comm::GroupConfig&);
};

const Backend kBackends[] = {
    {"local", make_local},  // one process: collectives are copies
    {"sim", make_sim},      // a process on the simulated NCCL (sim/nccl/); rank threads: simulated_rank()
#ifdef ACCEL_HAVE_GLOO
    {"gloo", comm::make_gloo_communicator},  // real processes over TCP: c10d's ProcessGroupGloo (comm/gloo/)
#endif
    {"nccl", comm::make_nccl_communicator},  // CUDA devices: one NCCL communicator per process, NCCL loaded at run time (comm/nccl/)
};

}  // namespace

std::shared_ptr<comm::Communicator> make_process_group(const comm::GroupConfig& config) {
  for (const Backend& b : kBackends)
    if (config.backend == b.name) {
      auto c = b.make(config);
      // Real processes (Gloo, a real NCCL) get their calls' fingerprints checked across the
      // processes (comm/guard.h); the simulated NCCL checks its own.
      const std::string kind = c->backend();
      if ((kind == "gloo" || kind == "nccl") && comm::comm_check_enabled())
        return comm::guard_communicator(std::move(c), config.timeout);
      return c;
    }
  fail(Status::InvalidArgument, "backend '", config.backend, "' is not one this build has (", backend_names(), ")");
}

std::shared_ptr<comm::Communicator> simulated_rank(sim::Rank& rank) {
  device_memory::install();
  return std::shared_ptr<comm::Communicator>(&rank.comm(), [](comm::Communicator*) {});
}

std::shared_ptr<comm::Communicator> join_world(const std::string& backend, std::chrono::milliseconds timeout, bool cuda) {
  const comm::LaunchEnv env = comm::read_launch_env();
  if (!env.launched || (env.world_size == 1 && backend == "auto")) return comm::make_local_communicator();
  comm::GroupConfig c;
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
  static std::shared_ptr<comm::Communicator>* world = nullptr;
  static comm::GroupConfig* joined = nullptr;
  std::lock_guard<std::mutex> lk(mu);
  if (world) {
    ACCEL_CHECK(joined->backend == c.backend, Status::InvalidState, "this process already joined its world as rank ",
                joined->rank, " of ", joined->world_size, " over ", joined->backend, "; a context cannot use ", c.backend,
                " beside it");
    return *world;
  }
  auto comm = make_process_group(c);
  world = new std::shared_ptr<comm::Communicator>(std::move(comm));
  joined = new comm::GroupConfig(c);
  return *world;
}

std::string backend_names() {
  std::string out;
  for (const Backend& b : kBackends) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

std::unique_ptr<Accelerator> open(const Options& ro) {
  // auto: CUDA where each process of this node can have a GPU of its own (NCCL refuses two
  // ranks on one GPU), else the CPU and Gloo
  Options placed = ro;
  if (ro.device == DeviceKind::Auto && torch::cuda::is_available() &&
      static_cast<int>(torch::cuda::device_count()) < comm::read_launch_env().local_world_size)
    placed.device = DeviceKind::CPU;
  const bool cuda =
      placed.device == DeviceKind::CUDA || (placed.device == DeviceKind::Auto && torch::cuda::is_available());
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(std::min(ro.timeout_seconds, 1e9) * 1000));
  // a launched process joins its world (one per process: later contexts share it)
  auto comm = join_world(ro.backend, timeout, cuda);
  // on CUDA, a launched process left on device 0 takes the device of its local rank (the one
  // the nccl backend's communicator uses), as torchrun's users set by hand
  if (cuda && comm->size() > 1 && ro.device_index == 0 && torch::cuda::device_count() > 0)
    placed.device_index = comm->local_rank() % static_cast<int>(torch::cuda::device_count());
  return std::make_unique<Accelerator>(placed, std::move(comm));
}

sim::RunReport run_simulated(const sim::WorldSettings& settings, const std::string& trace_path, const Options& options,
                             const std::function<void(std::unique_ptr<Accelerator>)>& rank_fn) {
  sim::WorldSettings ws = settings;
  ws.record_trace = !trace_path.empty();
  sim::World world(sim::world_options(ws));  // checks every field, naming it
  if (!trace_path.empty()) paths::check_file_target(trace_path, paths::FileKind::ChromeTrace, "trace_path");
  ACCEL_CHECK(options.device != DeviceKind::CUDA, Status::Unsupported,
              "ctx_opts->device: simulated ranks run on the CPU; ask for ACCEL_DEVICE_AUTO or ACCEL_DEVICE_CPU");
  Options ro = options;
  ro.device = DeviceKind::CPU;
  sim::RunReport report =
      world.run([&](sim::Rank& rank) { rank_fn(std::make_unique<Accelerator>(ro, simulated_rank(rank))); });
  if (!trace_path.empty()) safetensors::write_file_atomic(trace_path, world.trace_json());  // appears whole
  return report;
}

}  // namespace accel::world
