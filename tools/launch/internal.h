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

//
// What the files under tools/launch/ share (none of it is seen outside them; tools/launch.h
// is the entry the rest of the tool includes):
//   messages.cpp    writing to a descriptor; the texts of times, numbers, signals, wait statuses
//   options.cpp     the checks of the flags and of PROGRAM, before anything starts
//   ports.cpp       --master-addr and --master-port: resolving, a free port, a port in use
//   files.cpp       --log-dir's directories; emptying, reading and writing files
//   signals.cpp     the handlers and their flags (SignalScope)
//   start.cpp       starting a group: the logs, ACCEL_SIM_OUT, the environment, fork and exec
//   supervise.cpp   the attempts (restarts) and the event loop; stopping the group
//   relay.cpp       the children's output, line by line, prefixed with the rank
//   report.cpp      the report of a failed or interrupted group
//   sim_report.cpp  --backend sim: the ranks' files merged into one report and one trace
//   command.cpp     the subcommand's flags (CLI11) and launch::run
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/text.h"
#include "tools/launch.h"

namespace accel::launch {

using Clock = std::chrono::steady_clock;

constexpr size_t kLastLines = 10;        // stderr lines kept per rank for the failure report
constexpr size_t kMaxLine = 64 * 1024;   // a longer run of bytes without a newline is cut into lines
constexpr size_t kReadChunk = 64 * 1024;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- messages.cpp ------------------------------------------------------------------------

void write_all(int fd, const char* p, size_t n);
void write_all(int fd, const std::string& s);
void say(const std::string& s);

using text::errno_text;  // base/text.h

std::string signal_name(int sig);
std::string seconds_text(double s);
std::string number_text(double v);
// "exited with code 3", "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status);
bool succeeded(int status);

// ---- options.cpp: checks before anything starts -------------------------------------------

// PROGRAM as execvp() would find it: a name with a slash is a path, otherwise each PATH
// directory in turn (an empty entry is the current directory; no PATH: /bin:/usr/bin).
// Returns the file it found; throws UsageError saying why there is none.
std::string check_program(const std::string& program);
bool is_sim(const Options& o);
void validate(Options& o, bool separated, const std::vector<std::string>& empty_sim_flags);

// ---- ports.cpp ----------------------------------------------------------------------------

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

Address resolve(const std::string& host);
int pick_free_port(const std::string& host);
void check_port_free(const std::string& host, int port);

// ---- files.cpp ----------------------------------------------------------------------------

void make_dirs(const std::string& dir);
// Removes everything inside `dir` (not following symbolic links).
void empty_dir(const std::string& dir);
bool read_file(const std::string& path, std::string& out);
// Writes `content` to a temporary file beside `path`, then renames it over `path`
// (base/files.h): a reader sees the old file or the whole new one. Returns "" or why it failed.
std::string write_atomically(const std::string& path, const std::string& content);

// ---- sim_report.cpp -----------------------------------------------------------------------

// What one rank wrote to ACCEL_SIM_OUT/rank-<R>.json (docs/launch.md lists the fields).
struct SimRankFile {
  bool read = false;    // present and well-formed
  std::string problem;  // otherwise, why not
  std::string status, error;
  uint64_t peak_bytes = 0, capacity_bytes = 0, collectives = 0, bytes_sent = 0;
  double virtual_seconds = 0, compute_seconds = 0, comm_seconds = 0;
  uint64_t steps = 0;
};

// ---- signals (signals.cpp) ----------------------------------------------------------------

extern volatile sig_atomic_t g_child_changed;  // wakes ppoll; children are reaped every turn anyway
extern volatile sig_atomic_t g_signal;         // the first SIGINT/SIGTERM/SIGHUP received
extern volatile sig_atomic_t g_signal_count;   // how many of them
extern volatile sig_atomic_t g_second_signal;  // the second of them (0: none yet): SIGKILL to everything

constexpr int kHandled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
constexpr size_t kNumHandled = std::size(kHandled);

// Installs the handlers with the signals blocked (they arrive only inside ppoll) and SIGPIPE
// ignored (a closed output must not kill the launcher); restores everything when destroyed.
// SIGINT, SIGTERM or SIGHUP ignored when the launcher starts (nohup; a background job of a
// script) stays ignored, for the launcher and for its processes.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
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
  // why the launcher sent SIGKILL: still running after the grace period, or a second
  // SIGINT/SIGTERM/SIGHUP to the launcher (the signal's number)
  bool killed_after_grace = false;
  int killed_by_second = 0;
  Stream out, err;
  std::deque<std::string> last_err;
  FILE* log = nullptr;
};

// ---- the launcher: one group of processes, its attempts and its reports --------------------

class Launcher {
 public:
  explicit Launcher(Options o);  // supervise.cpp
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  void open_logs();     // start.cpp
  void make_sim_dir();     // start.cpp
  void make_status_dir();  // start.cpp
  void write_end(const Child& c);  // start.cpp: c's end into the status directory
  int run();            // supervise.cpp: the attempts

 private:
  // supervise.cpp
  double elapsed() const;
  static std::string restarts_text(int attempt);
  static void close_stream(Stream& s);
  void signal_running(int sig);
  void begin_stopping(int sig);
  bool any_running() const;
  void supervise(int attempt, const SignalScope& signals);
  static std::vector<pid_t> orphans();
  void stop_orphans(const SignalScope& signals);
  void kill_running();
  void kill_everything();  // a second signal: SIGKILL to the ranks and all they started, at once

  // start.cpp
  std::vector<std::string> base_environment() const;
  // rank c's environment: the base's and the launcher's variables (rank: RANK, LOCAL_RANK)
  std::vector<std::string> environment(const std::vector<std::string>& base, const Child* c, int restart_count,
                                       int port) const;
  void start_group(int restart_count, int port, const SignalScope& signals);
  // --warm-start: the group forked from one template process; false (nothing started, the
  // reason said) when the program cannot be, and the group starts as usual
  bool start_warm(int restart_count, int port, const SignalScope& signals);

  // relay.cpp
  bool read_some(Child& c, bool is_err);
  void drain(Child& c);
  void finish_output();
  void take(Child& c, bool is_err, const char* p, size_t n);
  void flush_partial(Child& c, bool is_err);
  void line(Child& c, bool is_err, const char* p, size_t n, std::string& out);

  // report.cpp
  std::string status_of(const Child& c) const;  // how a process ended, without its rank
  std::string processes_text() const;           // the report's lines: ranks in the same state grouped
  int report_failure(int attempt);
  int report_interrupted(int sig);

  // sim_report.cpp
  uint64_t sim_capacity() const;
  std::string sim_setup() const;
  static std::string exit_text(const Child& c);
  struct SimRow {
    int rank = 0;
    std::string status, error, exit;
    SimRankFile file;
  };

  SimRow sim_row(const Child& c, int interrupted_by) const;
  int sim_report(int rc, int attempt, int interrupted_by);

  Options o_;
  Clock::time_point start_;
  bool sim_ = false;            // --backend sim
  std::string sim_dir_;         // ACCEL_SIM_OUT
  bool sim_dir_is_temp_ = false;
  // ACCEL_LAUNCH_STATUS_DIR: a temporary directory where each rank's end ("exited with code
  // 3") is written as the launcher reaps it, for its peers to name it (comm/guard.h); "" when
  // it could not be made
  std::string status_dir_;
  std::vector<Child> children_;
  int failed_ = -1;  // local rank of the first failure of this attempt
  std::string start_error_;
  bool stopping_ = false, killed_ = false;
  int second_signal_ = 0;  // a second SIGINT/SIGTERM/SIGHUP came (its number): everything was killed
  const bool terminal_ = ::isatty(STDOUT_FILENO) != 0;  // the processes' progress bars are redrawn in place
  bool bar_open_ = false;                               // a bar is on the terminal's last line
  Clock::time_point deadline_;
};

}  // namespace accel::launch
