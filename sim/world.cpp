// The World: its lifetime, its options, and a run: one thread per rank under the maestro
// (sim/scheduler.cpp), each rank's outcome and the report. The parts of the simulation are
// mapped in sim/README.md.
#include "sim/world.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "sim/settings.h"
#include "sim/simulation.h"

namespace accel::sim {

namespace {
thread_local int tls_rank = -1;
thread_local World* tls_world = nullptr;
}  // namespace

namespace {

long read_number(const char* path) {
  std::ifstream f(path);
  long v = -1;
  f >> v;
  return f ? v : -1;
}

// A field of a /proc file with "Name: value" lines, e.g. ("/proc/self/status", "Threads:").
long proc_field(const char* path, const char* name) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (line.rfind(name, 0) == 0) return std::atol(line.c_str() + std::strlen(name));
  return -1;
}

// Which limit stopped the threads of a world: the kernel's PIDs (every thread takes one),
// the user's processes, memory mappings (each stack takes two), the address space, memory.
std::string thread_limit_binding() {
  std::ostringstream os;
  const long pid_max = read_number("/proc/sys/kernel/pid_max"), threads_max = read_number("/proc/sys/kernel/threads-max");
  const long map_max = read_number("/proc/sys/vm/max_map_count");
  long tasks = -1;  // threads on the machine: /proc/loadavg's "running/total"
  {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c, rt;
    if (f >> a >> b >> c >> rt && rt.find('/') != std::string::npos) tasks = std::atol(rt.c_str() + rt.find('/') + 1);
  }
  long maps = 0;
  {
    std::ifstream f("/proc/self/maps");
    for (std::string line; std::getline(f, line);) ++maps;
  }
  const long threads = proc_field("/proc/self/status", "Threads:");
  const long vm_kib = proc_field("/proc/self/status", "VmSize:");
  const long avail_kib = proc_field("/proc/meminfo", "MemAvailable:");
  struct rlimit nproc {}, as {}, stack {};
  getrlimit(RLIMIT_NPROC, &nproc);
  getrlimit(RLIMIT_AS, &as);
  getrlimit(RLIMIT_STACK, &stack);
  const double stack_mib = stack.rlim_cur == RLIM_INFINITY ? 8.0 : static_cast<double>(stack.rlim_cur) / (1 << 20);
  auto near = [](long used, long limit) { return limit > 0 && used >= 0 && used * 10 >= limit * 9; };
  if (near(tasks, pid_max))
    os << "the kernel's PIDs bind: kernel.pid_max is " << pid_max << " and the machine runs " << tasks
       << " threads (each takes one; sysctl kernel.pid_max=4194304 raises it)";
  else if (near(tasks, threads_max))
    os << "the kernel's thread limit binds: kernel.threads-max is " << threads_max << " and the machine runs " << tasks
       << " threads";
  else if (nproc.rlim_cur != RLIM_INFINITY && near(threads, static_cast<long>(nproc.rlim_cur)))
    os << "the user's process limit binds: ulimit -u is " << nproc.rlim_cur << " and this process has " << threads
       << " threads";
  else if (near(maps, map_max))
    os << "memory mappings bind: vm.max_map_count is " << map_max << " and this process has " << maps
       << " (each thread's stack takes two; sysctl vm.max_map_count raises it)";
  else if (as.rlim_cur != RLIM_INFINITY && vm_kib >= 0 &&
           static_cast<double>(vm_kib) / 1024 + stack_mib >= static_cast<double>(as.rlim_cur) / (1 << 20))
    os << "the address-space limit binds: ulimit -v is " << as.rlim_cur / 1024 << " KiB, this process uses " << vm_kib
       << " KiB and each thread reserves a " << stack_mib << " MiB stack";
  else
    os << "memory binds: " << (avail_kib >= 0 ? std::to_string(avail_kib / 1024) + " MiB available" : "unknown")
       << ", this process has " << threads << " threads of " << stack_mib << " MiB stacks";
  return os.str();
}

}  // namespace

int current_rank() { return tls_rank; }
World* current_world() { return tls_world; }

bool RunReport::ok() const {
  for (const auto& r : ranks)
    if (r.status != Status::Ok) return false;
  return true;
}

std::string RunReport::first_error() const {
  for (const auto& r : ranks)
    if (r.status != Status::Ok) return "rank " + std::to_string(r.rank) + ": " + r.error;
  return "";
}

// ---------------------------------------------------------------------------------------
// World and Rank

int Rank::rank() const { return rank_; }
int Rank::size() const { return world_->options().world_size; }
World& Rank::world() { return *world_; }

RankCommunicator& Rank::comm() { return *world_->sim_->comms.at(rank_); }

void Rank::notify_step(int64_t step) { comm().on_step(step); }

WorldOptions world_options(const WorldSettings& s) {
  SettingsText text;
  text.world_size = s.world_size;
  text.topology = s.topology;
  text.device_memory = s.device_memory;
  text.host_memory = s.host_memory;
  text.faults = s.faults;
  Settings parsed = parse_settings(text);  // each error names the C ABI's field
  WorldOptions wo;
  wo.world_size = s.world_size;
  wo.topology = s.topology;
  wo.device_capacity = parsed.device_capacity;
  wo.host_capacity = parsed.host_capacity;
  wo.timeout_seconds = s.timeout_seconds;
  wo.faults = std::move(parsed.faults);
  wo.engine_threads = s.engine_threads;
  // ACCEL_SIM_PROGRAM=FILE: record the ranks' calls and write them there, to replay the run on
  // another number of ranks (accel sim step --program FILE)
  if (const char* path = std::getenv("ACCEL_SIM_PROGRAM"); path && *path) {
    wo.record_program = true;
    wo.program_path = path;
  }
  wo.record_trace = s.record_trace;
  return wo;
}

World::World(WorldOptions opts) : sim_(std::make_unique<Simulation>()) {
  ACCEL_CHECK(opts.world_size >= 1, Status::InvalidArgument, "world_size must be >= 1, got ", opts.world_size);
  ACCEL_CHECK(std::isfinite(opts.timeout_seconds) && opts.timeout_seconds > 0, Status::InvalidArgument,
              "timeout_seconds must be finite and > 0, got ", opts.timeout_seconds);
  ACCEL_CHECK(opts.engine_threads >= 0 && opts.engine_threads <= 1024, Status::InvalidArgument,
              "engine_threads must be in [0, 1024] (0: the machine's cores), got ", opts.engine_threads);
  for (const auto& f : opts.faults)
    ACCEL_CHECK(f.rank < opts.world_size, Status::InvalidArgument, "faults: a fault names rank ", f.rank, " of a ",
                opts.world_size, "-rank world");
  sim_->topo = topology_preset(opts.topology);
  sim_->n = opts.world_size;
  {
    const char* env = std::getenv("NCCL_ALGO");
    const std::string spec = !opts.algorithms.empty() ? opts.algorithms : env ? env : "";
    try {
      sim_->algorithms = parse_algorithms(spec);
    } catch (const Error& e) {
      fail(Status::InvalidArgument, opts.algorithms.empty() ? "NCCL_ALGO: " : "algorithms: ", e.what());
    }
  }
  sim_->engine = Engine(opts.engine_threads > 0 ? opts.engine_threads
                                                : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  sim_->budget = std::make_shared<MemoryBudget>(opts.world_size, opts.device_capacity, opts.host_capacity,
                                                sim_->topo.gpus_per_node);
  for (const auto& m : opts.missing) {  // "reduce_scatter" or "reduce_scatter:bfloat16"
    const auto colon = m.find(':');
    const std::string name = m.substr(0, colon), type = colon == std::string::npos ? "" : m.substr(colon + 1);
    int c = 0, t = -1;
    while (c < comm::kNumCollectives && name != comm::collective_name(static_cast<comm::Collective>(c))) ++c;
    ACCEL_CHECK(c < comm::kNumCollectives, Status::InvalidArgument, "missing: '", name, "' is not a collective (all_reduce, ",
                "reduce_scatter, all_gather, broadcast, reduce, send, recv, barrier)");
    if (!type.empty()) {
      t = 0;
      while (t < comm::kNumDataTypes && type != comm::dtype_name(static_cast<comm::DataType>(t))) ++t;
      ACCEL_CHECK(t < comm::kNumDataTypes, Status::InvalidArgument, "missing: '", type, "' is not an element type (",
                  "int8 ... bfloat16, as nccl.h names them)");
    }
    sim_->missing.emplace_back(static_cast<comm::Collective>(c), t);
  }
  sim_->opts = std::move(opts);
}

World::~World() = default;

const WorldOptions& World::options() const { return sim_->opts; }
const Topology& World::topology() const { return sim_->topo; }

RunReport World::run(const std::function<void(Rank&)>& fn) {
  auto& w = *sim_;
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.ranks.assign(w.n, RankData{});
    w.first_dead = -1;
    w.colls.clear();
    w.p2p.clear();
    w.trace.clear();
    w.noise.seed(w.opts.noise_seed);
    const std::vector<RankFaults> faults = arm_faults(w.opts.faults, w.n);
    for (int r = 0; r < w.n; ++r) w.ranks[r].faults = faults[r];
    w.cvs.reset(new std::condition_variable[w.n]);
    w.comms.clear();
    for (int r = 0; r < w.n; ++r) w.comms.push_back(make_sim_communicator(w, r));
    w.budget->reset_peaks();
    w.holder = -1;  // nobody runs until every rank's thread exists
    w.last_progress = std::chrono::steady_clock::now();
  }
  std::vector<std::thread> threads;
  threads.reserve(w.n);
  bool abandoned = false;  // a thread could not be started: the started ones leave at once
  auto start = [&](int r) {
    threads.emplace_back([this, &w, &fn, &abandoned, r] {
      tls_rank = r;
      tls_world = this;
      Rank rank(this, r);
      {
        std::unique_lock<std::mutex> lk(w.mu);
        w.cvs[r].wait(lk, [&] { return w.holder == r || abandoned; });
        if (abandoned) return;
      }
      Status status = Status::Ok;
      std::string error;
      try {
        fn(rank);
      } catch (const Error& e) {
        status = e.status();
        error = e.what();
      } catch (const std::bad_alloc&) {
        status = Status::OutOfMemory;
        error = "out of host memory";
      } catch (const std::exception& e) {
        // libtorch errors (c10::Error, including the budget's OutOfMemoryError) land here
        std::string what = e.what();
        status = what.find("out of memory") != std::string::npos ? Status::OutOfMemory : Status::Internal;
        error = what.substr(0, what.find("\nException raised from"));
      } catch (...) {
        status = Status::Internal;
        error = "unknown exception";
      }
      std::unique_lock<std::mutex> lk(w.mu);
      auto& d = w.ranks[r];
      d.status = status;
      d.error = error;
      // close any group left open: its operations never launch
      d.group = Slot{};
      d.group_depth = 0;
      if (status == Status::Ok) {
        d.state = RankState::Finished;
      } else {
        w.rank_died(r, error);
      }
      w.last_progress = std::chrono::steady_clock::now();
      w.progress();
      w.pass_baton(r);
      tls_rank = -1;
      tls_world = nullptr;
    });
  };
  for (int r = 0; r < w.n; ++r) {
    try {
      start(r);
    } catch (const std::exception& e) {  // std::system_error (EAGAIN: no threads or memory left), bad_alloc
      const std::string binding = thread_limit_binding();  // before the started threads end
      {
        std::lock_guard<std::mutex> lk(w.mu);
        abandoned = true;
        for (int q = 0; q < r; ++q) w.cvs[q].notify_all();
      }
      for (auto& t : threads) t.join();
      fail(Status::OutOfMemory, "could not start the thread of simulated rank ", r, " of ", w.n, " (", e.what(),
           "): ", binding, "; no rank ran. Lower world_size or raise that limit; a program known "
           "in advance (a step's collective pattern) replays on any number of ranks without threads (accel sim "
           "step, sim/replay.h)");
    }
  }
  {
    std::lock_guard<std::mutex> lk(w.mu);
    w.holder = 0;
    w.cvs[0].notify_all();
  }
  for (auto& t : threads) t.join();

  RunReport rep;
  std::lock_guard<std::mutex> lk(w.mu);
  for (int r = 0; r < w.n; ++r) {
    const auto& d = w.ranks[r];
    RankReport rr;
    rr.rank = r;
    rr.status = d.status;
    rr.error = d.error;
    rr.peak_bytes = w.budget->peak(r);
    rr.current_bytes = w.budget->current(r);
    rr.host_peak_bytes = w.budget->host_peak(r);
    rr.host_current_bytes = w.budget->host_current(r);
    rr.host_transfer_bytes = d.host_bytes;
    rr.host_transfer_seconds = d.host_seconds;
    rr.virtual_seconds = std::max(d.compute_t, d.comm_t);
    rr.collectives = d.collectives;
    rr.bytes_sent = d.bytes_sent;
    rep.predicted_seconds = std::max(rep.predicted_seconds, rr.virtual_seconds);
    rep.ranks.push_back(rr);
  }
  w.recording = ReplayRecording{};
  if (w.opts.record_program) {
    ReplayRecording& rec = w.recording;
    rec.world_size = w.n;
    rec.topology = w.topo.name;
    rec.predicted_seconds = rep.predicted_seconds;
    for (int r = 0; r < w.n; ++r) {
      auto& d = w.ranks[r];
      size_t p = 0;
      while (p < rec.programs.size() && !(rec.programs[p] == d.program)) ++p;
      if (p == rec.programs.size()) {
        d.program.name = "rank " + std::to_string(r);
        rec.programs.push_back(d.program);
      }
      rec.program_of.push_back(static_cast<uint32_t>(p));
      if (!d.approximate.empty() && rec.approximate.find(d.approximate) == std::string::npos)
        rec.approximate += std::string(rec.approximate.empty() ? "" : "; ") + d.approximate;
    }
    if (!w.opts.program_path.empty()) {
      std::ofstream f(w.opts.program_path, std::ios::binary | std::ios::trunc);
      f << recording_json(rec);
      f.close();
      ACCEL_CHECK(f.good(), Status::IO, "cannot write the recording to '", w.opts.program_path, "'");
    }
  }
  return rep;
}

const ReplayRecording& World::recording() const { return sim_->recording; }

std::string World::trace_json() const {
  std::lock_guard<std::mutex> lk(sim_->mu);
  return chrome_trace_json(sim_->trace, sim_->topo.name, sim_->n);
}

void World::write_trace(const std::string& path) const {  // a plain write (the C ABI checks the path and writes atomically)
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  ACCEL_CHECK(f.good(), Status::IO, "cannot write the trace to '", path, "'");
  f << trace_json();
  f.close();
  ACCEL_CHECK(f.good(), Status::IO, "cannot write the trace to '", path, "'");
}

const std::shared_ptr<MemoryBudget>& World::budget() const { return sim_->budget; }
uint64_t World::current_bytes(int rank) const { return sim_->budget->current(rank); }
uint64_t World::peak_bytes(int rank) const { return sim_->budget->peak(rank); }

}  // namespace accel::sim
