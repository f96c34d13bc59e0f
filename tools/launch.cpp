// `accel launch`: see launch.h and docs/launch.md.
//
// One thread, one event loop: the children's stdout and stderr come through pipes read with
// ppoll(); SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked except inside ppoll(), whose
// handlers only set flags, so no signal is lost between a check and the wait. Children are
// reaped with waitpid(pid, WNOHANG) on every turn of the loop. The launcher is its children's
// subreaper: what a child leaves running when it ends (a background job of a shell script)
// becomes the launcher's child and is stopped and reaped when the attempt ends, so nothing
// started by an attempt runs on into the next one or past the launcher's end.
//
// --backend sim: the processes simulate the GPUs themselves (sim/'s NCCL library, loaded by
// the nccl backend); the launcher checks the simulation's flags with sim/'s own parsers,
// passes them on as ACCEL_SIM_*, gives the processes a fresh directory (ACCEL_SIM_OUT) and,
// at the end, merges the rank-<R>.json and trace-<R>.json files they wrote there.
#include "launch.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/text.h"
#include "sim/cost.h"
#include "sim/world.h"

extern char** environ;

namespace accel::launch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kLastLines = 10;        // stderr lines kept per rank for the failure report
constexpr size_t kMaxLine = 64 * 1024;   // a longer run of bytes without a newline is cut into lines
constexpr size_t kReadChunk = 64 * 1024;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // a closed terminal or pipe: the output is lost, the launcher goes on
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void write_all(int fd, const std::string& s) { write_all(fd, s.data(), s.size()); }

void say(const std::string& s) { write_all(2, "accel launch: " + s + "\n"); }

using text::errno_text;  // base/text.h

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string seconds_text(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

std::string number_text(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string s = "was killed by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "ended with wait status " + std::to_string(status);
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// ---- checks before anything starts ------------------------------------------------------

// Why `path` cannot be executed, or "" when it can.
std::string not_executable(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno_text(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory";
  if (::access(path.c_str(), X_OK) != 0) return "is not executable (" + errno_text(errno) + ")";
  return "";
}

// PROGRAM as execvp() would find it: a name with a slash is a path, otherwise each PATH
// directory in turn (an empty entry is the current directory; no PATH: /bin:/usr/bin).
void check_program(const std::string& program) {
  if (program.empty()) throw UsageError("the program name is empty");
  if (program.find('/') != std::string::npos) {
    std::string why = not_executable(program);
    if (!why.empty()) throw UsageError("cannot run '" + program + "': " + why);
    return;
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
      if (why.empty()) return;
      if (first_problem.empty()) first_problem = candidate + " " + why;
    }
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  throw UsageError("cannot run '" + program + "': " +
                   (first_problem.empty() ? "no such program in PATH" : first_problem));
}

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

Address resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) throw UsageError("--master-addr " + host + ": " + ::gai_strerror(rc));
  Address a;
  std::memcpy(&a.storage, found->ai_addr, found->ai_addrlen);
  a.length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return a;
}

void set_port(Address& a, int port) {
  if (a.storage.ss_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&a.storage)->sin6_port = htons(static_cast<uint16_t>(port));
  else
    reinterpret_cast<sockaddr_in*>(&a.storage)->sin_port = htons(static_cast<uint16_t>(port));
}

// Binds a TCP socket to addr:port and closes it. SO_REUSEADDR is set as the rendezvous
// server (c10d's TCPStore) sets it: a port some other socket listens on (or holds without
// SO_REUSEADDR) fails, one left in TIME_WAIT by the previous run does not, as for the server.
// Returns 0 or the errno of the failure; *bound receives the port bound (for port 0).
int try_bind(Address a, int port, int* bound) {
  set_port(a, port);
  int fd = ::socket(a.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int err = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a.storage), a.length) != 0) {
    err = errno;
  } else if (bound) {
    Address got;
    got.length = sizeof got.storage;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&got.storage), &got.length) != 0) {
      err = errno;
    } else {
      *bound = ntohs(got.storage.ss_family == AF_INET6
                         ? reinterpret_cast<sockaddr_in6*>(&got.storage)->sin6_port
                         : reinterpret_cast<sockaddr_in*>(&got.storage)->sin_port);
    }
  }
  ::close(fd);
  return err;
}

int pick_free_port(const std::string& host) {
  int port = 0;
  int err = try_bind(resolve(host), 0, &port);
  if (err != 0)
    throw UsageError("cannot pick a free port on " + host + " (--master-port 0): " + errno_text(err));
  return port;
}

void check_port_free(const std::string& host, int port) {
  int err = try_bind(resolve(host), port, nullptr);
  if (err == 0) return;
  std::string where = "port " + std::to_string(port) + " on " + host;
  if (err == EADDRINUSE)
    throw UsageError(where +
                     " is in use (another run?); pick another with --master-port or 0 for a free one");
  if (err == EADDRNOTAVAIL) {  // not an address of this machine (NAT, a name for another interface)
    say("warning: cannot check " + where + ": " + host + " is not an address of this machine");
    return;
  }
  throw UsageError("cannot use " + where + ": " + errno_text(err));
}

void make_dirs(const std::string& dir) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST)
      throw UsageError("--log-dir " + dir + ": cannot create " + partial + ": " + errno_text(errno));
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError("--log-dir " + dir + " is not a directory");
}

std::string lowercase(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool is_sim(const Options& o) { return lowercase(o.backend) == "sim"; }

constexpr const char* kDefaultTopology = "8xH100";

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

// The --sim-* flags: only with --backend sim, each checked by the simulator's own parser.
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
  if (o.sim_topology.empty()) o.sim_topology = kDefaultTopology;
  const int64_t world = static_cast<int64_t>(o.nproc_per_node) * o.nnodes;
  try {
    const sim::Topology topo = sim::topology_preset(o.sim_topology);
    const int64_t gpus = static_cast<int64_t>(topo.nodes) * topo.gpus_per_node;
    if (world > gpus)
      throw UsageError("-n/--nproc-per-node times --nnodes must be in [1, " + std::to_string(gpus) +
                       "] (the GPUs of --sim-topology '" + o.sim_topology + "'; e.g. \"4x8xH100-IB\" has 32), got " +
                       std::to_string(world));
  } catch (const Error& e) {
    throw UsageError(std::string("--sim-topology: ") + e.what());
  }
  if (!o.sim_gpu_mem.empty()) {
    try {
      accel::text::parse_bytes(o.sim_gpu_mem, "--sim-gpu-mem");
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  try {
    sim::parse_faults(o.sim_faults, static_cast<int>(world));
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind("faults: ", 0) == 0) why.erase(0, 8);
    throw UsageError("--sim-faults: " + why);
  }
  if (!o.sim_report.empty()) check_output_file("--sim-report", o.sim_report);
  if (!o.sim_trace.empty()) check_output_file("--sim-trace", o.sim_trace);
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

// ---- the simulation's files (--backend sim) ------------------------------------------

using Json = nlohmann::ordered_json;  // keys in the order written: the output is deterministic

extern "C" int remove_below(const char* path, const struct stat*, int, struct FTW* at) {
  if (at->level > 0) ::remove(path);  // the directory itself stays
  return 0;
}

// Removes everything inside `dir` (not following symbolic links).
void empty_dir(const std::string& dir) { ::nftw(dir.c_str(), remove_below, 16, FTW_DEPTH | FTW_PHYS); }

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// Writes `content` to a temporary file beside `path`, then renames it over `path`
// (base/files.h): a reader sees the old file or the whole new one. Returns "" or why it failed.
std::string write_atomically(const std::string& path, const std::string& content) {
  return accel::files::write_atomic(path, content, accel::files::Durability::Replace).message;
}

// What one rank wrote to ACCEL_SIM_OUT/rank-<R>.json (docs/launch.md lists the fields).
struct SimRankFile {
  bool read = false;    // present and well-formed
  std::string problem;  // otherwise, why not
  std::string status, error;
  uint64_t peak_bytes = 0, capacity_bytes = 0, collectives = 0, bytes_sent = 0;
  double virtual_seconds = 0, compute_seconds = 0, comm_seconds = 0;
  uint64_t steps = 0;
};

SimRankFile read_rank_file(const std::string& dir, int rank) {
  SimRankFile f;
  const std::string name = "rank-" + std::to_string(rank) + ".json";
  std::string text;
  if (!read_file(dir + "/" + name, text)) {
    f.problem = "no " + name;
    return f;
  }
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    f.problem = name + " is not a JSON object";
    return f;
  }
  auto bad = [&](const char* field, const char* what) {
    f.problem = name + ": \"" + field + "\" " + what;
    return f;
  };
  if (j.contains("rank") && !(j["rank"].is_number_integer() && j["rank"].get<int64_t>() == rank))
    return bad("rank", ("is not " + std::to_string(rank)).c_str());
  if (!j.contains("status") || !j["status"].is_string()) return bad("status", "is missing or not a string");
  f.status = j["status"].get<std::string>();
  if (f.status != "ok" && f.status != "failed" && f.status != "killed")
    return bad("status", "is not \"ok\", \"failed\" or \"killed\"");
  if (j.contains("error")) {
    if (!j["error"].is_string()) return bad("error", "is not a string");
    f.error = j["error"].get<std::string>();
  }
  const std::pair<const char*, uint64_t*> counts[] = {{"peak_bytes", &f.peak_bytes},
                                                      {"capacity_bytes", &f.capacity_bytes},
                                                      {"steps", &f.steps},
                                                      {"collectives", &f.collectives},
                                                      {"bytes_sent", &f.bytes_sent}};
  for (const auto& [field, out] : counts) {
    if (!j.contains(field)) continue;
    const Json& v = j[field];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return bad(field, "is not a whole number >= 0");
    *out = v.get<uint64_t>();
  }
  const std::pair<const char*, double*> times[] = {{"virtual_seconds", &f.virtual_seconds},
                                                   {"compute_seconds", &f.compute_seconds},
                                                   {"comm_seconds", &f.comm_seconds}};
  for (const auto& [field, out] : times) {
    if (!j.contains(field)) continue;
    if (!j[field].is_number() || !(j[field].get<double>() >= 0)) return bad(field, "is not a number >= 0");
    *out = j[field].get<double>();
  }
  f.read = true;
  return f;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// One line of a table cell: control characters (newlines) become spaces.
std::string one_line(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';
  return s;
}

// ---- signals --------------------------------------------------------------------------

volatile sig_atomic_t g_child_changed = 0;  // wakes ppoll; children are reaped every turn anyway
volatile sig_atomic_t g_signal = 0;        // the first SIGINT/SIGTERM/SIGHUP received
volatile sig_atomic_t g_signal_count = 0;  // how many of them

extern "C" void on_signal(int sig) {
  if (sig == SIGCHLD) {
    g_child_changed = 1;
  } else {
    if (g_signal == 0) g_signal = sig;
    g_signal_count = g_signal_count + 1;
  }
}

constexpr int kHandled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
constexpr size_t kNumHandled = std::size(kHandled);

// Installs the handlers with the signals blocked (they arrive only inside ppoll) and SIGPIPE
// ignored (a closed output must not kill the launcher); restores everything when destroyed.
// SIGINT, SIGTERM or SIGHUP ignored when the launcher starts (nohup; a background job of a
// script) stays ignored, for the launcher and for its processes.
class SignalScope {
 public:
  SignalScope() {
    g_child_changed = 0;
    g_signal = 0;
    g_signal_count = 0;
    sigset_t block;
    sigemptyset(&block);
    for (int s : kHandled) sigaddset(&block, s);
    ::sigprocmask(SIG_BLOCK, &block, &original_mask_);
    wait_mask_ = original_mask_;
    for (int s : kHandled) sigdelset(&wait_mask_, s);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kNumHandled; ++i) {
      ::sigaction(kHandled[i], nullptr, &old_[i]);
      child_ignores_[i] = kHandled[i] != SIGCHLD && old_[i].sa_handler == SIG_IGN;
      if (!child_ignores_[i]) ::sigaction(kHandled[i], &sa, nullptr);
    }
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~SignalScope() {
    for (size_t i = 0; i < kNumHandled; ++i) ::sigaction(kHandled[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  const sigset_t& original_mask() const { return original_mask_; }
  const sigset_t& wait_mask() const { return wait_mask_; }
  // For kHandled[i] in a child: ignored (as the launcher found it) or the default.
  bool child_ignores(size_t i) const { return child_ignores_[i]; }

 private:
  sigset_t original_mask_, wait_mask_;
  struct sigaction old_[kNumHandled];
  bool child_ignores_[kNumHandled] = {};
  struct sigaction old_pipe_;
};

// ---- the children ---------------------------------------------------------------------

struct Stream {
  int fd = -1;
  std::string partial;  // bytes after the last newline
};

struct Child {
  int local_rank = 0, rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int sent = 0;                 // the last signal the launcher sent it (0: none)
  bool killed_after_grace = false;
  Stream out, err;
  std::deque<std::string> last_err;
  FILE* log = nullptr;
};

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

class Launcher {
 public:
  explicit Launcher(Options o) : o_(std::move(o)), start_(Clock::now()), sim_(is_sim(o_)) {
    const int n = o_.nproc_per_node;
    children_.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      children_[i].local_rank = i;
      children_[i].rank = o_.node_rank * n + i;
    }
  }
  ~Launcher() {
    for (auto& c : children_) {
      close_stream(c.out);
      close_stream(c.err);
      if (c.log) std::fclose(c.log);
    }
    if (sim_dir_is_temp_) {
      empty_dir(sim_dir_);
      ::rmdir(sim_dir_.c_str());
    }
  }
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  void open_logs() {
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
  void make_sim_dir() {
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

  int run() {
    SignalScope signals;
    const int n = o_.nproc_per_node;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned descendants come to the launcher (stop_orphans)
    make_sim_dir();
    for (int attempt = 0;; ++attempt) {
      int port = static_cast<int>(o_.master_port);
      if (port == 0) port = pick_free_port(o_.master_addr);  // a fresh one on every attempt
      std::string what = std::to_string(n) + (n == 1 ? " process" : " processes") + " (node " +
                         std::to_string(o_.node_rank) + " of " + std::to_string(o_.nnodes);
      if (o_.nnodes > 1)
        what += (n == 1 ? ", rank " + std::to_string(children_.front().rank)
                        : ", ranks " + std::to_string(children_.front().rank) + ".." +
                              std::to_string(children_.back().rank)) +
                " of " + std::to_string(n * o_.nnodes);
      what += "), master " + o_.master_addr + ":" + std::to_string(port);
      if (attempt == 0) {
        say(what + (o_.log_dir.empty() ? "" : ", logs in " + o_.log_dir));
        if (sim_)
          say("simulated GPUs: " + sim_setup() + (o_.sim_faults.empty() ? "" : ", faults " + o_.sim_faults) +
              "; the processes write to " + sim_dir_);
      } else {
        say("restart " + std::to_string(attempt) + " of " + std::to_string(o_.max_restarts) + ": " + what);
        for (auto& c : children_)
          if (c.log)
            std::fprintf(c.log, "=== accel launch: restart %d of %d (ACCEL_RESTART_COUNT=%d) ===\n", attempt,
                         o_.max_restarts, attempt);
      }
      if (sim_) empty_dir(sim_dir_);  // each attempt starts from an empty directory
      start_group(attempt, port, signals);
      supervise(attempt, signals);
      stop_orphans();
      finish_output();
      // a signal that came while the launcher was busy (they are blocked outside ppoll) counts
      // before a restart is decided
      timespec zero{0, 0};
      ::ppoll(nullptr, 0, &zero, &signals.wait_mask());
      if (g_signal != 0) return sim_report(report_interrupted(g_signal), attempt, g_signal);
      if (!start_error_.empty()) return sim_report(report_failure(attempt), attempt, 0);
      if (failed_ < 0) {
        say((n == 1 ? std::string("the process") : "all " + std::to_string(n) + " processes") + " exited 0 in " +
            seconds_text(elapsed()) + restarts_text(attempt));
        return sim_report(0, attempt, 0);
      }
      if (attempt >= o_.max_restarts) return sim_report(report_failure(attempt), attempt, 0);
    }
  }

 private:
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  static std::string restarts_text(int attempt) {
    if (attempt == 0) return "";
    return " (after " + std::to_string(attempt) + (attempt == 1 ? " restart)" : " restarts)");
  }

  static void close_stream(Stream& s) {
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
  }

  // The environment every child gets: the launcher's, with the variables below replaced.
  std::vector<std::string> base_environment() const {
    static const char* const replaced[] = {
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "ACCEL_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS", "ACCEL_BACKEND", "ACCEL_STRATEGY", "ACCEL_MIXED_PRECISION",
        "ACCEL_TIMEOUT"};
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
                  (name == "ACCEL_TIMEOUT" && !o_.timeout.empty()) || name.rfind("ACCEL_SIM_", 0) == 0;
      }
      if (!replace) env.push_back(std::move(entry));
    }
    return env;
  }

  void start_group(int restart_count, int port, const SignalScope& signals) {
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
      if (!o_.timeout.empty()) set("ACCEL_TIMEOUT", o_.timeout);
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

  void signal_running(int sig) {
    for (auto& c : children_)
      if (c.running) {
        ::kill(c.pid, sig);
        c.sent = sig;
      }
  }

  void begin_stopping(int sig) {
    signal_running(sig);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o_.grace_period));
    }
  }

  bool any_running() const {
    for (const auto& c : children_)
      if (c.running) return true;
    return false;
  }

  // The event loop of one attempt: until every child of the group is reaped.
  void supervise(int attempt, const SignalScope& signals) {
    int forwarded = 0;
    bool escalated = false;
    while (true) {
      if (g_signal != 0 && forwarded == 0) {
        forwarded = g_signal;
        int running = 0;
        for (const auto& c : children_) running += c.running ? 1 : 0;
        say("received " + signal_name(forwarded) + "; forwarding it to the " + std::to_string(running) +
            " running processes (SIGKILL after " + number_text(o_.grace_period) + " s; again to kill now)");
        begin_stopping(forwarded);
      }
      if (g_signal_count >= 2 && !escalated) {
        escalated = true;
        say("received a second signal: SIGKILL to the running processes");
        kill_running();
      }
      g_child_changed = 0;
      for (auto& c : children_) {
        if (!c.running) continue;
        int status = 0;
        pid_t r = ::waitpid(c.pid, &status, WNOHANG);
        if (r != c.pid) continue;
        c.running = false;
        c.status = status;
        drain(c);
        if (!succeeded(status) && failed_ < 0 && !stopping_ && g_signal == 0) {
          failed_ = c.local_rank;
          std::string why = "rank " + std::to_string(c.rank) + " failed (" + describe_status(status) + ")";
          if (attempt < o_.max_restarts)
            say(why + "; restarting the group (attempt " + std::to_string(attempt + 1) + " of " +
                std::to_string(o_.max_restarts) + ")");
          else if (any_running())
            say(why + "; stopping the other processes");
          begin_stopping(SIGTERM);
        }
      }
      if (stopping_ && !killed_ && Clock::now() >= deadline_) kill_running();
      if (!any_running()) break;

      std::vector<pollfd> fds;
      std::vector<std::pair<Child*, bool>> owners;  // (child, is stderr)
      for (auto& c : children_) {
        if (c.out.fd >= 0) {
          fds.push_back({c.out.fd, POLLIN, 0});
          owners.emplace_back(&c, false);
        }
        if (c.err.fd >= 0) {
          fds.push_back({c.err.fd, POLLIN, 0});
          owners.emplace_back(&c, true);
        }
      }
      // a SIGCHLD wakes ppoll; the cap is a safety net only
      auto wait = std::chrono::milliseconds(1000);
      if (stopping_ && !killed_) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()) +
                    std::chrono::milliseconds(1);
        if (left < wait) wait = std::max(left, std::chrono::milliseconds(0));
      }
      timespec ts{static_cast<time_t>(wait.count() / 1000), static_cast<long>(wait.count() % 1000) * 1000000L};
      int ready = ::ppoll(fds.data(), fds.size(), &ts, &signals.wait_mask());
      if (ready <= 0) continue;  // EINTR (a signal) or the timeout
      for (size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents != 0) read_some(*owners[i].first, owners[i].second);
    }
  }

  // The launcher's children that are none of the ranks: descendants a rank left running when
  // it ended (reparented here, the subreaper), zombies included.
  static std::vector<pid_t> orphans() {
    std::vector<pid_t> pids;
    std::ifstream in("/proc/self/task/" + std::to_string(::getpid()) + "/children");
    for (long p; in >> p;) pids.push_back(static_cast<pid_t>(p));
    return pids;
  }

  // After an attempt's ranks are reaped: SIGTERM to what they left running, SIGKILL after the
  // grace period, every one reaped (their own children, orphaned in turn, come here too), so
  // that nothing an attempt started writes into ACCEL_SIM_OUT after the next attempt's start
  // empties it, or outlives the launcher.
  void stop_orphans() {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o_.grace_period));
    std::vector<pid_t> signalled;
    bool killed = false;
    for (;;) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      const std::vector<pid_t> left = orphans();
      if (left.empty()) return;
      const bool late = Clock::now() >= deadline;
      for (pid_t p : left) {
        if (late) {
          ::kill(p, SIGKILL);
        } else if (std::find(signalled.begin(), signalled.end(), p) == signalled.end()) {
          ::kill(p, SIGTERM);
          signalled.push_back(p);
        }
      }
      if (late && !killed) {
        killed = true;
        say("stopped " + std::to_string(left.size()) + " process(es) the ranks left running, with SIGKILL after " +
            number_text(o_.grace_period) + " s");
      }
      ::usleep(10000);
    }
  }

  void kill_running() {
    for (auto& c : children_)
      if (c.running) {
        ::kill(c.pid, SIGKILL);
        c.sent = SIGKILL;
        c.killed_after_grace = true;
      }
    killed_ = true;
  }

  // Reads one chunk; returns false at end of file or error (the stream is closed).
  bool read_some(Child& c, bool is_err) {
    Stream& s = is_err ? c.err : c.out;
    if (s.fd < 0) return false;
    char buf[kReadChunk];
    ssize_t got = ::read(s.fd, buf, sizeof buf);
    if (got > 0) {
      take(c, is_err, buf, static_cast<size_t>(got));
      return true;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    flush_partial(c, is_err);
    close_stream(s);
    return false;
  }

  // Everything a reaped child wrote is already in its pipes; a descendant still holding
  // them open may write more, which is read while the group lives.
  // (Bounded: a descendant that keeps writing cannot hold the launcher here.)
  void drain(Child& c) {
    for (bool is_err : {false, true})
      for (int i = 0; i < 256 && read_some(c, is_err); ++i) {
      }
  }

  void finish_output() {
    for (auto& c : children_) {
      drain(c);
      for (bool is_err : {false, true}) {
        flush_partial(c, is_err);
        close_stream(is_err ? c.err : c.out);
      }
      if (c.log) std::fflush(c.log);
    }
  }

  void take(Child& c, bool is_err, const char* p, size_t n) {
    Stream& s = is_err ? c.err : c.out;
    std::string out;
    size_t begin = 0;
    for (size_t i = 0; i < n; ++i) {
      if (p[i] == '\r' && terminal_ && !is_err && !(i + 1 < n && p[i + 1] == '\n')) {
        // a progress bar's update (ended by a carriage return): redrawn in place under the
        // process's rank, on the launcher's terminal only (never in the log)
        s.partial.append(p + begin, i - begin);
        if (!s.partial.empty()) {
          out += "\r[" + std::to_string(c.rank) + "] " + s.partial + "\033[K";
          bar_open_ = true;
        }
        s.partial.clear();
        begin = i + 1;
        continue;
      }
      if (p[i] != '\n') continue;
      if (bar_open_) {  // the next line takes the bar's place
        out += "\r\033[K";
        bar_open_ = false;
      }
      if (s.partial.empty()) {
        line(c, is_err, p + begin, i - begin, out);
      } else {
        s.partial.append(p + begin, i - begin);
        line(c, is_err, s.partial.data(), s.partial.size(), out);
        s.partial.clear();
      }
      begin = i + 1;
    }
    s.partial.append(p + begin, n - begin);
    if (s.partial.size() >= kMaxLine) {
      line(c, is_err, s.partial.data(), s.partial.size(), out);
      s.partial.clear();
    }
    write_all(is_err ? 2 : 1, out);
    if (c.log) std::fflush(c.log);
  }

  void flush_partial(Child& c, bool is_err) {
    Stream& s = is_err ? c.err : c.out;
    if (s.partial.empty()) return;
    std::string out;
    line(c, is_err, s.partial.data(), s.partial.size(), out);
    s.partial.clear();
    write_all(is_err ? 2 : 1, out);
  }

  // One line of a child's output: prefixed to the launcher's stream, as it is to the log.
  void line(Child& c, bool is_err, const char* p, size_t n, std::string& out) {
    out += "[" + std::to_string(c.rank) + "]";
    if (n > 0) {
      out += ' ';
      out.append(p, n);
    }
    out += '\n';
    if (c.log) {
      std::fwrite(p, 1, n, c.log);
      std::fputc('\n', c.log);
    }
    if (is_err) {
      c.last_err.emplace_back(p, n);
      if (c.last_err.size() > kLastLines) c.last_err.pop_front();
    }
  }

  std::string status_of(const Child& c) const {
    if (c.pid < 0) return "rank " + std::to_string(c.rank) + ": not started";
    std::string s = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + "): ";
    const int st = c.status;
    if (WIFSIGNALED(st) && c.sent != 0 && WTERMSIG(st) == c.sent) {
      if (c.killed_after_grace)
        return s + "killed by the launcher (SIGKILL, still running after the " + number_text(o_.grace_period) +
               " s grace period)";
      return s + "stopped by the launcher (" + signal_name(c.sent) + ")";
    }
    std::string d = succeeded(st) ? "exited 0" : describe_status(st);
    if (c.sent != 0) d += " after the launcher's " + signal_name(c.sent);
    return s + d;
  }

  int report_failure(int attempt) {
    std::string report;
    if (!start_error_.empty()) {
      report = "accel launch: FAILED after " + seconds_text(elapsed()) + restarts_text(attempt) + ": " +
               start_error_ + "\n";
    } else {
      const Child& f = children_[static_cast<size_t>(failed_)];
      report = "accel launch: FAILED after " + seconds_text(elapsed()) + restarts_text(attempt) + ": rank " +
               std::to_string(f.rank) + " (pid " + std::to_string(f.pid) + ") " + describe_status(f.status) + "\n";
      if (f.last_err.empty()) {
        report += "  rank " + std::to_string(f.rank) + " wrote nothing to stderr\n";
      } else {
        report += "  the last lines rank " + std::to_string(f.rank) + " wrote to stderr:\n";
        for (const auto& l : f.last_err) report += "    " + l + "\n";
      }
    }
    if (children_.size() > 1 || !start_error_.empty()) {
      report += "  the processes:\n";
      for (const auto& c : children_) report += "    " + status_of(c) + "\n";
    }
    write_all(2, report);
    return 1;
  }

  int report_interrupted(int sig) {
    std::string report = "accel launch: interrupted by " + signal_name(sig) + " after " + seconds_text(elapsed()) + "\n";
    report += "  the processes:\n";
    for (const auto& c : children_) report += "    " + status_of(c) + "\n";
    write_all(2, report);
    return 128 + sig;
  }

  // ---- --backend sim: the merged report --------------------------------------------------

  uint64_t sim_capacity() const { return o_.sim_gpu_mem.empty() ? 0 : accel::text::parse_bytes(o_.sim_gpu_mem, "--sim-gpu-mem"); }

  // "8xH100: 8 processes, 80.00 GiB of memory per GPU"
  std::string sim_setup() const {
    const int n = o_.nproc_per_node;
    const uint64_t cap = sim_capacity();
    return o_.sim_topology + ": " + std::to_string(n) + (n == 1 ? " process, " : " processes, ") +
           (cap == 0 ? std::string("unlimited memory") : accel::text::format_bytes(cap) + " of memory") + " per GPU";
  }

  // How a process ended, without pids or times: "exit 0", "exit 3", "SIGKILL", "not started".
  static std::string exit_text(const Child& c) {
    if (c.pid < 0) return "not started";
    if (WIFEXITED(c.status)) return "exit " + std::to_string(WEXITSTATUS(c.status));
    if (WIFSIGNALED(c.status)) return signal_name(WTERMSIG(c.status));
    return "wait status " + std::to_string(c.status);
  }

  struct SimRow {
    int rank = 0;
    std::string status, error, exit;
    SimRankFile file;
  };

  // A rank's row: its report file's status and error, with what the launcher knows of the
  // process (how it ended; whether the launcher stopped it, and why).
  SimRow sim_row(const Child& c, int interrupted_by) const {
    SimRow row;
    row.rank = c.rank;
    row.exit = exit_text(c);
    row.file = read_rank_file(sim_dir_, c.rank);
    const SimRankFile& f = row.file;
    if (c.pid < 0) {
      row.status = "not started";
      row.error = start_error_;
      return row;
    }
    const bool ok_exit = succeeded(c.status);
    const bool by_launcher = c.sent != 0 && WIFSIGNALED(c.status) && WTERMSIG(c.status) == c.sent;
    const bool own_failure = f.read && (f.status == "failed" || f.status == "killed");
    // stopped: killed by the launcher's signal, or ended by it with a code and no failure of its own
    const bool stopped = by_launcher || (c.sent != 0 && WIFEXITED(c.status) && !ok_exit && !own_failure);
    if (own_failure && !by_launcher) {
      row.status = f.status;
      row.error = f.error;
    } else if (stopped) {
      row.status = "stopped";
      if (interrupted_by != 0)
        row.error = "stopped by the launcher (" + signal_name(interrupted_by) + " to the launcher)";
      else if (failed_ >= 0)
        row.error = "stopped by the launcher after rank " +
                    std::to_string(children_[static_cast<size_t>(failed_)].rank) + " failed";
      else
        row.error = "stopped by the launcher after a process could not be started";
      if (c.killed_after_grace)
        row.error += " (SIGKILL after the " + number_text(o_.grace_period) + " s grace period)";
      if (!f.read) row.error += "; " + f.problem;
      else if (!f.error.empty()) row.error += "; its report: " + f.status + ": " + f.error;
    } else if (f.read && ok_exit) {
      row.status = f.status;  // "ok"
      row.error = f.error;
    } else if (f.read) {
      row.status = "failed";
      row.error = "the process " + describe_status(c.status) + " after writing a report that says ok";
      if (!f.error.empty()) row.error += " (" + f.error + ")";
    } else {
      row.status = "no report";
      row.error = f.problem;
    }
    return row;
  }

  // Prints the simulation's report, writes --sim-report and --sim-trace; returns `rc`, or 1
  // instead of 0 when a file could not be written.
  int sim_report(int rc, int attempt, int interrupted_by) {
    if (!sim_) return rc;
    std::vector<SimRow> rows;
    for (const auto& c : children_) rows.push_back(sim_row(c, interrupted_by));

    // the slowest rank (the first of equals) predicts the run's time per optimizer step
    const SimRow* slowest = nullptr;
    bool all_ok = true;
    for (const auto& r : rows) {
      all_ok = all_ok && r.status == "ok";
      if (r.file.read && (!slowest || r.file.virtual_seconds > slowest->file.virtual_seconds)) slowest = &r;
    }
    const bool predicted = slowest && slowest->file.steps > 0;
    const double per_step = predicted ? slowest->file.virtual_seconds / static_cast<double>(slowest->file.steps) : 0.0;

    // the table: columns as wide as their widest cell; numbers right-aligned, status left
    std::vector<std::vector<std::string>> cells = {{"rank", "peak memory", "virtual s", "steps", "s/step", "status"}};
    for (const auto& r : rows) {
      std::string status = r.status;
      if (r.exit != "exit 0" && r.status != "not started") status += " (" + r.exit + ")";
      if (!r.error.empty()) status += ": " + one_line(r.error);
      if (r.file.read)
        cells.push_back({std::to_string(r.rank), accel::text::format_bytes(r.file.peak_bytes), fixed(r.file.virtual_seconds, 6),
                         std::to_string(r.file.steps),
                         r.file.steps > 0 ? fixed(r.file.virtual_seconds / static_cast<double>(r.file.steps), 6) : "-",
                         status});
      else
        cells.push_back({std::to_string(r.rank), "-", "-", "-", "-", status});
    }
    std::vector<size_t> width(cells.front().size(), 0);
    for (const auto& row : cells)
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    std::string text = "accel launch: simulated " + sim_setup() + restarts_text(attempt) + "\n";
    for (const auto& row : cells) {
      std::string line;
      for (size_t i = 0; i + 1 < row.size(); ++i) line += "  " + std::string(width[i] - row[i].size(), ' ') + row[i];
      line += "  " + row.back();
      text += line + "\n";
    }
    const std::string world = std::to_string(rows.size()) + (rows.size() == 1 ? " GPU" : " GPUs");
    if (predicted) {
      text += "accel launch: predicted " + fixed(per_step, 6) + " s per optimizer step on " + world + " of " +
              o_.sim_topology + " (the slowest rank, " + std::to_string(slowest->rank) + ": " +
              fixed(slowest->file.virtual_seconds, 6) + " virtual s over " + std::to_string(slowest->file.steps) +
              (slowest->file.steps == 1 ? " step" : " steps") + ")" +
              (all_ok ? "" : "; the run did not finish: from what the ranks reported") + "\n";
    } else if (slowest) {
      text += "accel launch: no prediction per optimizer step: the slowest rank (" + std::to_string(slowest->rank) +
              ") reported no optimizer step\n";
    } else {
      text += "accel launch: no prediction per optimizer step: no rank wrote a report\n";
    }

    bool write_failed = false;
    if (!o_.sim_report.empty()) {
      Json ranks = Json::array();
      for (const auto& r : rows) {
        const SimRankFile& f = r.file;
        Json j = Json::object();
        j["rank"] = r.rank;
        j["status"] = r.status;
        j["error"] = r.error;
        j["exit"] = r.exit;
        j["peak_bytes"] = f.peak_bytes;
        j["virtual_seconds"] = f.virtual_seconds;
        j["steps"] = f.steps;
        j["seconds_per_step"] = f.steps > 0 ? Json(f.virtual_seconds / static_cast<double>(f.steps)) : Json(nullptr);
        j["compute_seconds"] = f.compute_seconds;
        j["comm_seconds"] = f.comm_seconds;
        j["collectives"] = f.collectives;
        j["bytes_sent"] = f.bytes_sent;
        j["report"] = f.read ? "" : f.problem;
        ranks.push_back(std::move(j));
      }
      Json doc = Json::object();
      doc["topology"] = o_.sim_topology;
      doc["world_size"] = rows.size();
      doc["gpu_mem_bytes"] = sim_capacity();
      doc["restarts"] = attempt;
      doc["outcome"] = interrupted_by != 0 ? "interrupted" : rc == 0 ? "ok" : "failed";
      doc["ranks"] = std::move(ranks);
      doc["predicted_seconds_per_step"] = predicted ? Json(per_step) : Json(nullptr);
      doc["slowest_rank"] = slowest ? Json(slowest->rank) : Json(nullptr);
      std::string error = write_atomically(o_.sim_report, doc.dump(2) + "\n");
      if (error.empty()) {
        text += "accel launch: the report is in " + o_.sim_report + "\n";
      } else {
        text += "accel launch: --sim-report: " + error + "\n";
        write_failed = true;
      }
    }
    if (!o_.sim_trace.empty()) {
      // every rank's events in rank order; a rank's missing or malformed trace is left out
      Json events = Json::array();
      std::string missing;
      for (const auto& c : children_) {
        const std::string name = "trace-" + std::to_string(c.rank) + ".json";
        std::string content;
        Json j;
        if (read_file(sim_dir_ + "/" + name, content)) j = Json::parse(content, nullptr, /*allow_exceptions=*/false);
        if (j.is_array()) {
          for (auto& e : j) events.push_back(std::move(e));
        } else {
          missing += (missing.empty() ? "" : ", ") + std::to_string(c.rank) +
                     (content.empty() && !j.is_discarded() ? "" : " (malformed)");
        }
      }
      Json doc = Json::object();
      doc["traceEvents"] = std::move(events);
      doc["displayTimeUnit"] = "ms";
      std::string error = write_atomically(o_.sim_trace, doc.dump() + "\n");
      if (error.empty()) {
        text += "accel launch: the trace is in " + o_.sim_trace + " (" + std::to_string(doc["traceEvents"].size()) +
                " events" + (missing.empty() ? "" : "; no trace from rank " + missing) + ")\n";
      } else {
        text += "accel launch: --sim-trace: " + error + "\n";
        write_failed = true;
      }
    }
    write_all(2, text);
    return write_failed && rc == 0 ? 1 : rc;
  }

  Options o_;
  Clock::time_point start_;
  bool sim_ = false;            // --backend sim
  std::string sim_dir_;         // ACCEL_SIM_OUT
  bool sim_dir_is_temp_ = false;
  std::vector<Child> children_;
  int failed_ = -1;  // local rank of the first failure of this attempt
  std::string start_error_;
  bool stopping_ = false, killed_ = false;
  const bool terminal_ = ::isatty(STDOUT_FILENO) != 0;  // the processes' progress bars are redrawn in place
  bool bar_open_ = false;                               // a bar is on the terminal's last line
  Clock::time_point deadline_;
};

}  // namespace

CLI::App* add_command(CLI::App& app, Options& o) {
  auto* sub = app.add_subcommand(
      "launch",
      "start N processes of a program with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...): "
      "accel launch -n N [options] PROGRAM [ARGS...]");
  sub->add_option("-n,--nproc-per-node,--nproc_per_node", o.nproc_per_node, "processes on this node")->required();
  sub->add_option("--nnodes", o.nnodes, "nodes (each runs its own accel launch)")->capture_default_str();
  sub->add_option("--node-rank,--node_rank", o.node_rank, "this node's index, 0..nnodes-1")->capture_default_str();
  sub->add_option("--master-addr,--master_addr", o.master_addr, "address of node 0 (the rendezvous)")
      ->capture_default_str();
  sub->add_option("--master-port,--master_port", o.master_port, "its port; 0: a free one (one node only)")
      ->capture_default_str();
  sub->add_option("--backend", o.backend, "ACCEL_BACKEND for the processes (auto, gloo, nccl, sim: simulated GPUs)");
  sub->add_option("--strategy", o.strategy, "ACCEL_STRATEGY (no, ddp, zero1, zero2, zero3, ...)");
  sub->add_option("--mixed-precision", o.mixed_precision, "ACCEL_MIXED_PRECISION (no, bf16, fp16)");
  sub->add_option("--timeout", o.timeout, "ACCEL_TIMEOUT: the collectives' timeout in seconds (may be fractional)");
  sub->add_option("--max-restarts", o.max_restarts, "restart the whole group up to K times after a failure")
      ->capture_default_str();
  sub->add_option("--log-dir", o.log_dir, "also write each rank's output to DIR/rank_<R>.log");
  sub->add_option("--grace-period", o.grace_period, "seconds between SIGTERM and SIGKILL when stopping")
      ->capture_default_str();
  sub->add_option("--sim-gpu-mem", o.sim_gpu_mem,
                  "--backend sim: each simulated GPU's memory (80GiB, 16GB, ...); default: unlimited")
      ->type_name("SIZE");
  sub->add_option("--sim-topology", o.sim_topology,
                  "--backend sim: the simulated machine (8xH100, 8xA100, 8xPCIe, Nx8xH100-IB); default: 8xH100")
      ->type_name("NAME");
  sub->add_option("--sim-trace", o.sim_trace, "--backend sim: write every rank's timeline to FILE (Chrome trace)")
      ->type_name("FILE");
  sub->add_option("--sim-faults", o.sim_faults,
                  "--backend sim: faults to inject (kill:RANK@collective:K, kill:RANK@step:K, delay:RANK:SECONDS)")
      ->type_name("SPEC");
  sub->add_option("--sim-report", o.sim_report, "--backend sim: write the merged report to FILE as JSON")
      ->type_name("FILE");
  // PROGRAM and everything after it, options included, go to the program: the subcommand
  // stops parsing at its first positional argument (prefix_command) and leaves the rest in
  // remaining(). The positional below is for --help and for `--`: CLI11 keeps a `--` in
  // the subcommand only while it has a positional to fill; its validator refuses every
  // value, so the program's name is never consumed and stays first among the remaining.
  sub->add_option("PROGRAM", o.command, "the program (looked up in PATH), then its arguments")
      ->type_name("[ARGS...]")
      ->check(CLI::Validator([](std::string&) { return std::string("left to the launcher"); }, ""));
  sub->validate_positionals();
  sub->prefix_command();
  return sub;
}

int run(const CLI::App& sub, Options o) {
  o.command = sub.remaining();
  const bool separated = !o.command.empty() && o.command.front() == "--";
  if (separated) o.command.erase(o.command.begin());
  // the children's stdout and stderr must not land on a pipe's descriptor: keep 0..2 open
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
  try {
    std::vector<std::string> empty_sim_flags;  // given, but as ''
    for (const char* flag : {"--sim-gpu-mem", "--sim-topology", "--sim-trace", "--sim-faults", "--sim-report"})
      if (sub.count(flag) > 0 && sub.get_option(flag)->as<std::string>().empty()) empty_sim_flags.push_back(flag);
    validate(o, separated, empty_sim_flags);
    check_program(o.command.front());
    if (o.node_rank == 0 && o.master_port != 0) check_port_free(o.master_addr, static_cast<int>(o.master_port));
    if (o.master_port == 0) resolve(o.master_addr);
    Launcher launcher(std::move(o));
    launcher.open_logs();
    return launcher.run();
  } catch (const UsageError& e) {
    say(e.what());
    return 2;
  }
}

}  // namespace accel::launch
