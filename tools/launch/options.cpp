// `accel launch`: the checks of the flags and of PROGRAM, before anything starts (a usage
// error, exit status 2, and nothing started). The --sim-* flags are checked by the
// simulator's own parsers.
#include "tools/launch/internal.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/text.h"
#include "sim/settings.h"

namespace accel::launch {

// ---- checks before anything starts ------------------------------------------------------

namespace {

// Why `path` cannot be executed, or "" when it can.
std::string not_executable(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_text(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (::access(path.c_str(), X_OK) != 0) return "is not executable (" + errno_text(errno) + ")";
  return "";
}

}  // namespace

// PROGRAM as execvp() would find it: a name with a slash is a path, otherwise each PATH
// directory in turn (an empty entry is the current directory; no PATH: /bin:/usr/bin).
std::string check_program(const std::string& program) {
  if (program.empty()) throw UsageError("the program name is empty");
  if (program.find('/') != std::string::npos) {
    std::string why = not_executable(program);
    if (!why.empty()) throw UsageError("cannot run '" + program + "': " + why);
    return program;
  }
  const char* env_path = std::getenv("PATH");
  std::string path = env_path ? env_path : "/bin:/usr/bin";
  std::string first_problem;
  size_t begin = 0;
  while (true) {
    size_t end = path.find(':', begin);
    std::string dir = path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0) {
      std::string why = not_executable(candidate);
      if (why.empty()) return candidate;
      if (first_problem.empty()) first_problem = candidate + " " + why;
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  throw UsageError("cannot run '" + program + "': " +
                   (first_problem.empty() ? "no such program in PATH" : first_problem));
}

namespace {

std::string lowercase(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

bool is_sim(const Options& o) { return lowercase(o.backend) == "sim"; }

namespace {


// A file the launcher is to write (--sim-report, --sim-trace): its directory must exist.
void check_output_file(const char* flag, const std::string& path) {
  if (path.empty()) throw UsageError(std::string(flag) + ": the file name is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UsageError(std::string(flag) + " " + path + " is a directory (give a file name)");
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError(std::string(flag) + " " + path + ": the directory " + dir + " does not exist");
  if (::access(dir.c_str(), W_OK) != 0)
    throw UsageError(std::string(flag) + " " + path + ": cannot write in " + dir + " (" + errno_text(errno) + ")");
}

// The --sim-* flags: only with --backend sim, checked by the simulator's own parser.
void validate_sim(Options& o, const std::vector<std::string>& empty_given) {
  const std::pair<const char*, const std::string*> flags[] = {{"--sim-gpu-mem", &o.sim_gpu_mem},
                                                              {"--sim-topology", &o.sim_topology},
                                                              {"--sim-trace", &o.sim_trace},
                                                              {"--sim-faults", &o.sim_faults},
                                                              {"--sim-report", &o.sim_report}};
  if (!is_sim(o)) {
    for (const auto& [flag, value] : flags)
      if (!value->empty() || std::find(empty_given.begin(), empty_given.end(), flag) != empty_given.end())
        throw UsageError(std::string(flag) + " needs --backend sim" +
                         (o.backend.empty() ? std::string() : " (got --backend " + o.backend + ")"));
    return;
  }
  o.backend = "sim";
  if (o.nnodes > 1)
    throw UsageError("--backend sim runs on one node only (the simulated processes share this machine's memory): "
                     "--nnodes " + std::to_string(o.nnodes) + " is not supported; give --nnodes 1 and up to the "
                     "topology's GPUs with -n (--sim-topology 4x8xH100-IB -n 32 simulates 4 nodes)");
  for (const auto& flag : empty_given)
    if (flag != "--sim-faults") throw UsageError(flag + ": the value is empty");
  if (o.sim_topology.empty()) o.sim_topology = sim::kDefaultTopology;
  // the simulator's one parser (sim/settings.h), its fields named as this command's flags
  sim::SettingsText text;
  text.world_size = o.nproc_per_node * o.nnodes;
  text.topology = o.sim_topology;
  if (!o.sim_gpu_mem.empty()) text.device_memory = o.sim_gpu_mem;
  text.faults = o.sim_faults;
  sim::SettingNames names;
  names.world_size = "-n/--nproc-per-node times --nnodes";
  names.topology = "--sim-topology";
  names.device_memory = "--sim-gpu-mem";
  names.faults = "--sim-faults";
  names.prefix_topology_errors = true;
  try {
    sim::parse_settings(text, names);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (!o.sim_report.empty()) check_output_file("--sim-report", o.sim_report);
  if (!o.sim_trace.empty()) check_output_file("--sim-trace", o.sim_trace);
}

// --backend, --strategy, --mixed-precision, --offload: the values the processes' runtime
// accepts in ACCEL_BACKEND, ACCEL_STRATEGY, ACCEL_MIXED_PRECISION and ACCEL_OFFLOAD (any case; capi/internal.h,
// runtime_options, and runtime/options.cpp, parse_strategy), checked here so that a typo
// fails before anything starts rather than in every process. Empty: not given.
void check_choice(const char* flag, const std::string& value, std::initializer_list<const char*> accepted,
                  const char* listed) {
  if (value.empty()) return;
  const std::string v = lowercase(value);
  for (const char* a : accepted)
    if (v == a) return;
  throw UsageError(std::string(flag) + " '" + value + "' is not one of " + listed);
}

std::string normalized_timeout(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  if (text.empty() || end == begin || *end != '\0' || errno == ERANGE || !std::isfinite(v) || !(v > 0))
    throw UsageError("--timeout must be a positive, finite number of seconds (got '" + text + "')");
  return number_text(v);
}

}  // namespace

void validate(Options& o, bool separated, const std::vector<std::string>& empty_sim_flags) {
  if (o.nproc_per_node < 1)
    throw UsageError("-n/--nproc-per-node must be at least 1 (got " + std::to_string(o.nproc_per_node) + ")");
  if (o.nnodes < 1) throw UsageError("--nnodes must be at least 1 (got " + std::to_string(o.nnodes) + ")");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes)
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is outside 0.." +
                     std::to_string(o.nnodes - 1) + " (--nnodes " + std::to_string(o.nnodes) + ")");
  if (o.master_port < 0 || o.master_port > 65535)
    throw UsageError("--master-port " + std::to_string(o.master_port) + " is outside 0..65535");
  if (o.master_port == 0 && o.nnodes > 1)
    throw UsageError("--master-port 0 (a free port) needs --nnodes 1: the other nodes must know the port; give one");
  if (o.master_addr.empty()) throw UsageError("--master-addr is empty");
  if (static_cast<long long>(o.nproc_per_node) * o.nnodes > 1000000)
    throw UsageError("-n times --nnodes is too large");
  check_choice("--backend", o.backend, {"auto", "gloo", "nccl", "sim"}, "auto, gloo, nccl, sim");
  check_choice("--strategy", o.strategy,
               {"no", "none", "ddp", "multi_gpu", "zero1", "zero-1", "zero_1", "zero2", "zero-2", "zero_2",
                "shard_grad_op", "zero3", "zero-3", "zero_3", "full_shard"},
               "no, ddp, zero1, zero2, zero3 (or shard_grad_op, full_shard)");
  check_choice("--mixed-precision", o.mixed_precision, {"no", "bf16", "fp16", "auto"}, "no, bf16, fp16, auto");
  check_choice("--offload", o.offload, {"none", "optimizer", "parameters"}, "none, optimizer, parameters");
  validate_sim(o, empty_sim_flags);
  if (!o.timeout.empty()) o.timeout = normalized_timeout(o.timeout);
  if (o.max_restarts < 0)
    throw UsageError("--max-restarts must be at least 0 (got " + std::to_string(o.max_restarts) + ")");
  if (!std::isfinite(o.grace_period) || o.grace_period < 0 || o.grace_period > 1e6)
    throw UsageError("--grace-period must be a finite number of seconds >= 0 (got " + number_text(o.grace_period) + ")");
  if (o.command.empty()) throw UsageError("no program given: accel launch -n N [options] PROGRAM [ARGS...]");
  if (!separated && o.command[0].size() > 1 && o.command[0][0] == '-')
    throw UsageError("unknown option " + o.command[0] + " (options go before PROGRAM; see accel launch --help)");
}

}  // namespace accel::launch
