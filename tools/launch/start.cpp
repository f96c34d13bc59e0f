// `accel launch`: starting a group: the log files, the simulation's output directory
// (ACCEL_SIM_OUT), the children's environment (torchrun's variables and ACCEL_*), fork and exec.
#include "tools/launch/internal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern char** environ;

namespace accel::launch {

namespace {

// In the child between fork() and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const char* file, char* const argv[], char* const envp[], int out_fd, int err_fd,
                             pid_t parent, const SignalScope& signals) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the launcher died before prctl: do not run orphaned
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);  // both pipes' original descriptors are close-on-exec
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGPIPE, &dfl, nullptr);
  struct sigaction ign = dfl;
  ign.sa_handler = SIG_IGN;
  for (size_t i = 0; i < kNumHandled; ++i) ::sigaction(kHandled[i], signals.child_ignores(i) ? &ign : &dfl, nullptr);
  ::sigprocmask(SIG_SETMASK, &signals.original_mask(), nullptr);
  ::execvpe(file, argv, envp);
  int e = errno;
  const char* parts[] = {"accel launch: cannot execute '", file, "': ", ::strerrordesc_np(e), "\n"};
  for (const char* p : parts)
    if (p) write_all(2, p, std::strlen(p));
  ::_exit(127);
}

}  // namespace

void Launcher::open_logs() {
  if (o_.log_dir.empty()) return;
  make_dirs(o_.log_dir);
  for (auto& c : children_) {
    std::string path = o_.log_dir + "/rank_" + std::to_string(c.rank) + ".log";
    c.log = std::fopen(path.c_str(), "we");
    if (!c.log) throw UsageError("--log-dir: cannot write " + path + ": " + errno_text(errno));
  }
}

// --backend sim: the processes' output directory (ACCEL_SIM_OUT), LOG_DIR/sim or a fresh
// temporary one (removed at the end); an absolute path, as the processes may change theirs.
void Launcher::make_sim_dir() {
  if (!sim_) return;
  std::string dir;
  if (!o_.log_dir.empty()) {
    dir = o_.log_dir + "/sim";
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
      throw UsageError("--log-dir: cannot create " + dir + ": " + errno_text(errno));
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) throw UsageError("--log-dir: " + dir + " is not a directory");
  } else {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/accel-sim-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      throw UsageError("cannot create the simulation's output directory " + pattern + ": " + errno_text(errno));
    dir = pattern;
    sim_dir_is_temp_ = true;
  }
  char* real = ::realpath(dir.c_str(), nullptr);
  sim_dir_ = real ? real : dir;
  std::free(real);
}

// ACCEL_LAUNCH_STATUS_DIR: a fresh temporary directory (removed at the end). Without it the
// processes still name a peer that ended, without its exit status.
void Launcher::make_status_dir() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/accel-launch-XXXXXX";
  if (!::mkdtemp(pattern.data())) return;
  char* real = ::realpath(pattern.c_str(), nullptr);
  status_dir_ = real ? real : pattern;
  std::free(real);
}

// Where the processes find how a rank ended: rank-<R> under the status directory.
void Launcher::write_end(const Child& c) {
  if (!status_dir_.empty()) write_atomically(status_dir_ + "/rank-" + std::to_string(c.rank), describe_status(c.status) + "\n");
}

// The environment every child gets: the launcher's, with the variables below replaced.
std::vector<std::string> Launcher::base_environment() const {
  static const char* const replaced[] = {
      "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
      "MASTER_ADDR", "MASTER_PORT", "ACCEL_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT",
      "TORCHELASTIC_MAX_RESTARTS", "ACCEL_BACKEND", "ACCEL_STRATEGY", "ACCEL_MIXED_PRECISION",
      "ACCEL_OFFLOAD", "ACCEL_TIMEOUT", "ACCEL_LAUNCH_STATUS_DIR"};
  // with --backend sim, the simulation's settings are the launcher's flags, never inherited
  static const char* const sim_replaced[] = {"ACCEL_SIM_OUT", "ACCEL_SIM_GPU_MEM", "ACCEL_SIM_TOPOLOGY",
                                             "ACCEL_SIM_TRACE", "ACCEL_SIM_FAULTS"};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    bool replace = false;
    for (const char* r : replaced) replace = replace || name == r;
    if (sim_)
      for (const char* r : sim_replaced) replace = replace || name == r;
    // ACCEL_* configuration the command line does not give is inherited
    if (replace && name.rfind("ACCEL_", 0) == 0 && name != "ACCEL_RESTART_COUNT") {
      replace = (name == "ACCEL_BACKEND" && !o_.backend.empty()) ||
                (name == "ACCEL_STRATEGY" && !o_.strategy.empty()) ||
                (name == "ACCEL_MIXED_PRECISION" && !o_.mixed_precision.empty()) ||
                (name == "ACCEL_OFFLOAD" && !o_.offload.empty()) ||
                (name == "ACCEL_TIMEOUT" && !o_.timeout.empty()) || name.rfind("ACCEL_SIM_", 0) == 0 ||
                name == "ACCEL_LAUNCH_STATUS_DIR";
    }
    if (!replace) env.push_back(std::move(entry));
  }
  return env;
}

void Launcher::start_group(int restart_count, int port, const SignalScope& signals) {
  failed_ = -1;
  start_error_.clear();
  stopping_ = false;
  killed_ = false;
  const int n = o_.nproc_per_node;
  const std::vector<std::string> base = base_environment();
  std::vector<char*> argv;
  for (const auto& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t self = ::getpid();
  for (auto& c : children_) {
    c.pid = -1;
    c.running = false;
    c.status = 0;
    c.sent = 0;
    c.killed_after_grace = false;
    c.killed_by_second = 0;
    c.last_err.clear();
    c.out.partial.clear();
    c.err.partial.clear();
  }
  for (auto& c : children_) {
    std::vector<std::string> env = base;
    auto set = [&env](const char* name, const std::string& value) { env.push_back(std::string(name) + "=" + value); };
    set("RANK", std::to_string(c.rank));
    set("LOCAL_RANK", std::to_string(c.local_rank));
    set("WORLD_SIZE", std::to_string(n * o_.nnodes));
    set("LOCAL_WORLD_SIZE", std::to_string(n));
    set("GROUP_RANK", std::to_string(o_.node_rank));
    set("GROUP_WORLD_SIZE", std::to_string(o_.nnodes));
    set("MASTER_ADDR", o_.master_addr);
    set("MASTER_PORT", std::to_string(port));
    set("ACCEL_RESTART_COUNT", std::to_string(restart_count));
    set("TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count));
    set("TORCHELASTIC_MAX_RESTARTS", std::to_string(o_.max_restarts));
    if (!o_.backend.empty()) set("ACCEL_BACKEND", o_.backend);
    if (!o_.strategy.empty()) set("ACCEL_STRATEGY", o_.strategy);
    if (!o_.mixed_precision.empty()) set("ACCEL_MIXED_PRECISION", o_.mixed_precision);
    if (!o_.offload.empty()) set("ACCEL_OFFLOAD", o_.offload);
    if (!o_.timeout.empty()) set("ACCEL_TIMEOUT", o_.timeout);
    if (!status_dir_.empty()) set("ACCEL_LAUNCH_STATUS_DIR", status_dir_);
    // on a terminal the processes draw progress bars, which the relay redraws in place
    if (terminal_ && !std::getenv("ACCEL_PROGRESS")) set("ACCEL_PROGRESS", "bar");
    if (sim_) {
      set("ACCEL_SIM_OUT", sim_dir_);
      set("ACCEL_SIM_TOPOLOGY", o_.sim_topology);
      if (!o_.sim_gpu_mem.empty()) set("ACCEL_SIM_GPU_MEM", o_.sim_gpu_mem);
      if (!o_.sim_trace.empty()) set("ACCEL_SIM_TRACE", "1");
      if (!o_.sim_faults.empty()) set("ACCEL_SIM_FAULTS", o_.sim_faults);
    }
    // As torchrun: several processes on one machine share its cores, so each gets one
    // OpenMP thread unless the user said otherwise (OpenMP's idle threads spin, and N
    // processes x all cores oversubscribe: 2 processes of the digits example on 2 cores
    // took 12.4 s without this, 3.1 s with it).
    if (n > 1 && !std::getenv("OMP_NUM_THREADS")) set("OMP_NUM_THREADS", "1");
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      start_error_ = "cannot start rank " + std::to_string(c.rank) + ": pipe: " + errno_text(errno);
      break;
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      start_error_ = "cannot start rank " + std::to_string(c.rank) + ": pipe: " + errno_text(errno);
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      break;
    }
    pid_t pid = ::fork();
    if (pid == 0)
      exec_child(argv[0], argv.data(), envp.data(), out_pipe[1], err_pipe[1], self, signals);
    int fork_errno = errno;
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (pid < 0) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      start_error_ = "cannot start rank " + std::to_string(c.rank) + ": fork: " + errno_text(fork_errno);
      break;
    }
    // only the launcher's ends are non-blocking (the children's stay ordinary)
    ::fcntl(out_pipe[0], F_SETFL, ::fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
    ::fcntl(err_pipe[0], F_SETFL, ::fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
    c.out.fd = out_pipe[0];
    c.err.fd = err_pipe[0];
    c.pid = pid;
    c.running = true;
  }
  if (!start_error_.empty()) {
    say(start_error_ + "; stopping the others");
    begin_stopping(SIGTERM);
  }
}

}  // namespace accel::launch
