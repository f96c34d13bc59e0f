// `accel launch`: starting a group: the log files, the simulation's output directory
// (ACCEL_SIM_OUT), the children's environment (torchrun's variables and ACCEL_*), fork and exec.
#include "tools/launch/internal.h"

#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/files.h"

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

// --warm-start: libaccel-warm-start.so beside this executable (the build tree) or where it was
// installed (ACCEL_TOOLS_MODULE_DIR); "" when neither has it.
std::string warm_start_library() {
  for (const std::string& dir : {files::own_directory(), std::string(ACCEL_TOOLS_MODULE_DIR)}) {
    const std::string c = dir + "/libaccel-warm-start.so";
    if (!dir.empty() && ::access(c.c_str(), R_OK) == 0) return c;
  }
  return "";
}

// "" when `file` is an executable the warm start can fork from: a dynamically linked ELF
// (the dynamic loader preloads the library into it), not setuid or setgid (where it ignores
// LD_PRELOAD), not built with a sanitizer that must load first; otherwise what it is.
std::string warm_start_refusal(const std::string& file) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0) return "cannot read " + file + ": " + errno_text(errno);
  if (st.st_mode & (S_ISUID | S_ISGID)) return file + " is setuid or setgid (the dynamic loader preloads nothing there)";
  std::ifstream f(file, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!f.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return file + " is not an ELF executable (a script?)";
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) ||
      eh.e_phentsize != sizeof(Elf64_Phdr))
    return file + " is not a 64-bit ELF executable";
  std::vector<Elf64_Phdr> phs;
  bool interp = false;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    f.seekg(static_cast<std::streamoff>(eh.e_phoff + static_cast<uint64_t>(i) * sizeof ph));
    if (!f.read(reinterpret_cast<char*>(&ph), sizeof ph)) break;
    interp = interp || ph.p_type == PT_INTERP;
    phs.push_back(ph);
  }
  if (!interp) return file + " is statically linked";
  // a sanitizer's runtime among the libraries it needs must be the first library loaded,
  // before any preloaded one (AddressSanitizer refuses to run otherwise)
  auto file_offset = [&](uint64_t vaddr) -> int64_t {
    for (const auto& ph : phs)
      if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz)
        return static_cast<int64_t>(vaddr - ph.p_vaddr + ph.p_offset);
    return -1;
  };
  for (const auto& ph : phs) {
    if (ph.p_type != PT_DYNAMIC) continue;
    std::vector<Elf64_Dyn> dyn(ph.p_filesz / sizeof(Elf64_Dyn));
    f.clear();
    f.seekg(static_cast<std::streamoff>(ph.p_offset));
    if (dyn.empty() || !f.read(reinterpret_cast<char*>(dyn.data()), static_cast<std::streamsize>(dyn.size() * sizeof(Elf64_Dyn))))
      break;
    int64_t strtab = -1;
    for (const auto& d : dyn)
      if (d.d_tag == DT_STRTAB) strtab = file_offset(d.d_un.d_ptr);
    if (strtab < 0) break;
    for (const auto& d : dyn) {
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED) continue;
      std::string name;
      f.clear();
      f.seekg(static_cast<std::streamoff>(strtab + static_cast<int64_t>(d.d_un.d_val)));
      std::getline(f, name, '\0');
      for (const char* rt : {"libasan.", "libtsan.", "liblsan.", "libmsan.", "libhwasan."})
        if (name.rfind(rt, 0) == 0)
          return file + " is built with a sanitizer (" + name + "), whose runtime must be loaded before any other library";
    }
  }
  return "";
}

}  // namespace

bool Launcher::start_warm(int restart_count, int port, const SignalScope& signals) {
  std::string file, why;
  try {
    file = check_program(o_.command[0]);  // (checked before anything started: gone since?)
    why = warm_start_refusal(file);
  } catch (const UsageError& e) {
    why = e.what();
  }
  const std::string lib = warm_start_library();
  if (why.empty() && lib.empty())
    why = "libaccel-warm-start.so is neither beside accel nor in " + std::string(ACCEL_TOOLS_MODULE_DIR);
  if (why.empty() && lib.find_first_of(" :") != std::string::npos)
    why = "the path of " + lib + " has a space or a colon, which LD_PRELOAD cannot hold";
  int sv[2] = {-1, -1};
  if (why.empty() && ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    why = "socketpair: " + errno_text(errno);
  if (!why.empty()) {
    say("--warm-start: " + why + "; starting each process on its own");
    return false;
  }
  ::fcntl(sv[1], F_SETFD, 0);  // the template's end outlives its exec
  const std::vector<std::string> base = base_environment();
  // the template: every process's environment but RANK and LOCAL_RANK, the library preloaded
  std::vector<std::string> tenv = environment(base, nullptr, restart_count, port);
  bool preload = false;
  for (auto& e : tenv)
    if (e.rfind("LD_PRELOAD=", 0) == 0) {
      e = "LD_PRELOAD=" + lib + (e.size() > 11 ? ":" + e.substr(11) : "");
      preload = true;
    }
  if (!preload) tenv.push_back("LD_PRELOAD=" + lib);
  tenv.push_back("ACCEL_WARM_START_FD=" + std::to_string(sv[1]));
  std::vector<char*> argv, envp;
  for (const auto& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : tenv) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const auto t0 = Clock::now();
  const pid_t self = ::getpid();
  const pid_t tpl = ::fork();
  if (tpl == 0) exec_child(argv[0], argv.data(), envp.data(), 1, 2, self, signals);  // its own output: the launcher's
  const int fork_errno = errno;
  ::close(sv[1]);
  if (tpl < 0) {
    ::close(sv[0]);
    say("--warm-start: fork: " + errno_text(fork_errno) + "; starting each process on its own");
    return false;
  }
  // the template ends when its end of the connection closes (or is killed after 5 s)
  auto end_template = [&] {
    ::close(sv[0]);
    for (int i = 0; i < 500; ++i) {
      if (::waitpid(tpl, nullptr, WNOHANG) == tpl) return;
      ::usleep(10000);
    }
    ::kill(tpl, SIGKILL);
    ::waitpid(tpl, nullptr, 0);
  };
  // one message from the connection, waiting up to `limit` seconds (0: as long as the template
  // lives): kMessage with it in `m`, or why none came
  enum Received { kMessage, kEnded, kLate, kSignal };
  auto receive = [&](std::string& m, double limit) {
    const auto since = Clock::now();
    while (g_signal == 0) {
      pollfd p{sv[0], POLLIN, 0};
      const timespec ts{0, 200 * 1000 * 1000};
      const int r = ::ppoll(&p, 1, &ts, &signals.wait_mask());
      if (r > 0) {
        char buf[256];
        const ssize_t k = ::recv(sv[0], buf, sizeof buf - 1, 0);
        if (k <= 0) return kEnded;
        m.assign(buf, static_cast<size_t>(k));
        return kMessage;
      }
      if (r != 0) continue;  // a signal: the loop's condition
      // the template still there? (not reaped here: end_template does)
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(tpl), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != 0)
        return kEnded;
      if (limit > 0 && std::chrono::duration<double>(Clock::now() - since).count() > limit) return kLate;
    }
    return kSignal;
  };
  int started = 0;
  std::string failure;
  // the template's first word, once its libraries have loaded: "ready", or why it cannot
  std::string first;
  const Received got = receive(first, 0);
  if (got == kEnded) failure = "the template process ended before its libraries loaded (" + file + ")";
  else if (got == kMessage && first.rfind("refused: ", 0) == 0) failure = first.substr(9);
  else if (got == kMessage && first != "ready") failure = "unexpected answer '" + first + "'";
  const double loaded_s = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& c : children_) {
    if (!failure.empty() || g_signal != 0) break;
    std::string msg = std::to_string(c.rank);
    msg.push_back('\0');
    for (const auto& e : environment(base, &c, restart_count, port)) {
      msg += e;
      msg.push_back('\0');
    }
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      failure = "pipe: " + errno_text(errno);
      break;
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      failure = "pipe: " + errno_text(errno);
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      break;
    }
    const int fds[2] = {out_pipe[1], err_pipe[1]};
    const bool sent = files::send_with_descriptors(sv[0], msg.data(), msg.size(), fds, 2);
    const int send_errno = errno;
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    // the replies: "forked RANK" from the template, "RANK PID" from the rank once it is the
    // launcher's child (within 10 s), or why not
    const std::string want = std::to_string(c.rank) + " ";
    std::string reply;
    while (sent) {
      std::string m;
      const Received r = receive(m, 10);
      if (r == kLate) reply = "failed: rank " + std::to_string(c.rank) + "'s process did not report within 10 s";
      if (r != kMessage) break;
      if (m.rfind("forked ", 0) == 0) continue;  // (a previous rank's may come after that rank's pid)
      reply = m;
      break;
    }
    if (!sent || reply.rfind(want, 0) != 0) {
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      if (g_signal != 0) break;  // the loop forwards it to those started
      failure = !sent ? "cannot reach the template process: " + errno_text(send_errno)
                : reply.rfind("refused: ", 0) == 0 ? reply.substr(9)
                : reply.rfind("failed: ", 0) == 0  ? reply.substr(8)
                : reply.empty() ? "the template process ended (" + file + ")"
                                : "unexpected answer '" + reply + "'";
      break;
    }
    ::fcntl(out_pipe[0], F_SETFL, ::fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
    ::fcntl(err_pipe[0], F_SETFL, ::fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
    c.out.fd = out_pipe[0];
    c.err.fd = err_pipe[0];
    c.pid = static_cast<pid_t>(std::atol(reply.c_str() + want.size()));
    c.running = true;
    ++started;
  }
  end_template();
  if (!failure.empty() && started == 0 && g_signal == 0) {
    say("--warm-start: " + failure + "; starting each process on its own");
    return false;
  }
  if (!failure.empty()) {
    start_error_ = "cannot start rank " + std::to_string(children_[static_cast<size_t>(started)].rank) +
                   " by warm start: " + failure;
    say(start_error_ + "; stopping the others");
    begin_stopping(SIGTERM);
  } else if (g_signal == 0) {
    say("--warm-start: " + std::to_string(started) + " processes forked from one start of " + o_.command[0] +
        " after its libraries loaded (" + seconds_text(loaded_s) + ")");
  }
  return true;
}

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

std::vector<std::string> Launcher::environment(const std::vector<std::string>& base, const Child* c, int restart_count,
                                               int port) const {
  const int n = o_.nproc_per_node;
  std::vector<std::string> env = base;
  auto set = [&env](const char* name, const std::string& value) { env.push_back(std::string(name) + "=" + value); };
  if (c) {
    set("RANK", std::to_string(c->rank));
    set("LOCAL_RANK", std::to_string(c->local_rank));
  }
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
  return env;
}

void Launcher::start_group(int restart_count, int port, const SignalScope& signals) {
  failed_ = -1;
  start_error_.clear();
  stopping_ = false;
  killed_ = false;
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
  if (o_.warm_start && start_warm(restart_count, port, signals)) return;
  for (auto& c : children_) {
    const std::vector<std::string> env = environment(base, &c, restart_count, port);
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
