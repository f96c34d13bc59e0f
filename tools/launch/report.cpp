// `accel launch`: the report of a group that failed (after its restarts) or was interrupted:
// which rank failed and how, its last lines on stderr, how each process ended.
#include "tools/launch/internal.h"

#include <sys/wait.h>

#include <string>

namespace accel::launch {

std::string Launcher::status_of(const Child& c) const {
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

int Launcher::report_failure(int attempt) {
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

int Launcher::report_interrupted(int sig) {
  std::string report = "accel launch: interrupted by " + signal_name(sig) + " after " + seconds_text(elapsed()) + "\n";
  report += "  the processes:\n";
  for (const auto& c : children_) report += "    " + status_of(c) + "\n";
  write_all(2, report);
  return 128 + sig;
}

}  // namespace accel::launch
