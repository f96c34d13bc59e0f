// `accel launch`: the launcher's attempts (a restart after a failure, up to --max-restarts)
// and the event loop of one attempt: the children reaped, signals forwarded, the group stopped
// (SIGTERM, then SIGKILL after the grace period), what the ranks left running stopped too.
#include "tools/launch/internal.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace accel::launch {

Launcher::Launcher(Options o) : o_(std::move(o)), start_(Clock::now()), sim_(is_sim(o_)) {
  const int n = o_.nproc_per_node;
  children_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    children_[i].local_rank = i;
    children_[i].rank = o_.node_rank * n + i;
  }
}

Launcher::~Launcher() {
  for (auto& c : children_) {
    close_stream(c.out);
    close_stream(c.err);
    if (c.log) std::fclose(c.log);
  }
  if (sim_dir_is_temp_) {
    empty_dir(sim_dir_);
    ::rmdir(sim_dir_.c_str());
  }
  if (!status_dir_.empty()) {
    empty_dir(status_dir_);
    ::rmdir(status_dir_.c_str());
  }
}

int Launcher::run() {
  SignalScope signals;
  const int n = o_.nproc_per_node;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned descendants come to the launcher (stop_orphans)
  make_sim_dir();
  make_status_dir();
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
    if (!status_dir_.empty()) empty_dir(status_dir_);
    start_group(attempt, port, signals);
    supervise(attempt, signals);
    stop_orphans(signals);
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

double Launcher::elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

std::string Launcher::restarts_text(int attempt) {
  if (attempt == 0) return "";
  return " (after " + std::to_string(attempt) + (attempt == 1 ? " restart)" : " restarts)");
}

void Launcher::close_stream(Stream& s) {
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
}

void Launcher::signal_running(int sig) {
  for (auto& c : children_)
    if (c.running) {
      ::kill(c.pid, sig);
      c.sent = sig;
    }
}

void Launcher::begin_stopping(int sig) {
  signal_running(sig);
  if (!stopping_) {
    stopping_ = true;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(o_.grace_period));
  }
}

bool Launcher::any_running() const {
  for (const auto& c : children_)
    if (c.running) return true;
  return false;
}

// The event loop of one attempt: until every child of the group is reaped.
void Launcher::supervise(int attempt, const SignalScope& signals) {
  int forwarded = 0;
  while (true) {
    if (g_signal != 0 && forwarded == 0) {
      forwarded = g_signal;
      int running = 0;
      for (const auto& c : children_) running += c.running ? 1 : 0;
      say("received " + signal_name(forwarded) + "; forwarding it to the " + std::to_string(running) +
          " running processes (SIGKILL after " + number_text(o_.grace_period) + " s; again to kill now)");
      begin_stopping(forwarded);
    }
    if (g_second_signal != 0 && second_signal_ == 0) {
      say("received a second signal (" + signal_name(g_second_signal) +
          "): SIGKILL to the processes and everything they started");
      kill_everything();
    }
    g_child_changed = 0;
    for (auto& c : children_) {
      if (!c.running) continue;
      int status = 0;
      pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      c.running = false;
      c.status = status;
      write_end(c);
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
std::vector<pid_t> Launcher::orphans() {
  std::vector<pid_t> pids;
  std::ifstream in("/proc/self/task/" + std::to_string(::getpid()) + "/children");
  for (long p; in >> p;) pids.push_back(static_cast<pid_t>(p));
  return pids;
}

namespace {

// Every descendant of this process (children of any of their threads), parents first.
std::vector<pid_t> descendants() {
  std::vector<pid_t> out{::getpid()};
  std::unordered_set<pid_t> seen(out.begin(), out.end());
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string task_dir = "/proc/" + std::to_string(out[i]) + "/task";
    DIR* d = ::opendir(task_dir.c_str());
    if (!d) continue;  // gone meanwhile
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(task_dir + "/" + e->d_name + "/children");
      for (long p; in >> p;)
        if (seen.insert(static_cast<pid_t>(p)).second) out.push_back(static_cast<pid_t>(p));
    }
    ::closedir(d);
  }
  out.erase(out.begin());
  return out;
}

}  // namespace

// After an attempt's ranks are reaped: SIGTERM to what they left running, SIGKILL after the
// grace period (at once after a second signal, which may come while this waits), every one
// reaped (their own children, orphaned in turn, come here too), so that nothing an attempt
// started writes into ACCEL_SIM_OUT after the next attempt's start empties it, or outlives
// the launcher.
void Launcher::stop_orphans(const SignalScope& signals) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(o_.grace_period));
  std::vector<pid_t> signalled;
  bool killed = false;
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    const std::vector<pid_t> left = orphans();
    if (left.empty()) return;
    if (g_second_signal != 0 && second_signal_ == 0) {
      say("received a second signal (" + signal_name(g_second_signal) +
          "): SIGKILL to everything the processes left running");
      kill_everything();
    }
    const bool late = second_signal_ != 0 || Clock::now() >= deadline;
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
      say("stopped " + std::to_string(left.size()) + " process(es) the ranks left running, with SIGKILL " +
          (second_signal_ != 0 ? "at the second signal" : "after " + number_text(o_.grace_period) + " s"));
    }
    // 10 ms, during which a signal may come (they are blocked outside ppoll)
    timespec pause{0, 10 * 1000 * 1000};
    ::ppoll(nullptr, 0, &pause, &signals.wait_mask());
  }
}

void Launcher::kill_running() {
  for (auto& c : children_)
    if (c.running) {
      ::kill(c.pid, SIGKILL);
      c.sent = SIGKILL;
      c.killed_after_grace = true;
    }
  killed_ = true;
}

// A second SIGINT/SIGTERM/SIGHUP: SIGKILL now to the running ranks and to every process
// they started (whatever its process group or session); what is orphaned meanwhile comes to
// the launcher, the subreaper, and stop_orphans kills it at once too.
void Launcher::kill_everything() {
  second_signal_ = g_second_signal != 0 ? static_cast<int>(g_second_signal) : SIGKILL;
  for (auto& c : children_)
    if (c.running) {
      ::kill(c.pid, SIGKILL);
      c.sent = SIGKILL;
      c.killed_by_second = second_signal_;
    }
  for (pid_t p : descendants()) ::kill(p, SIGKILL);
  killed_ = true;
}

}  // namespace accel::launch
