// `accel launch`: the report of a group that failed (after its restarts) or was interrupted:
// which rank failed and how, its last lines on stderr, how each process ended (ranks that
// ended the same way on one line).
#include "tools/launch/internal.h"

#include <sys/wait.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace accel::launch {

std::string Launcher::status_of(const Child& c) const {
  if (c.pid < 0) return "not started";
  const int st = c.status;
  if (WIFSIGNALED(st) && c.sent != 0 && WTERMSIG(st) == c.sent) {
    if (c.killed_by_second != 0)
      return "killed by the launcher (SIGKILL, at a second " + signal_name(c.killed_by_second) + " to the launcher)";
    if (c.killed_after_grace)
      return "killed by the launcher (SIGKILL, still running after the " + number_text(o_.grace_period) +
             " s grace period)";
    return "stopped by the launcher (" + signal_name(c.sent) + ")";
  }
  std::string d = succeeded(st) ? "exited 0" : describe_status(st);
  if (c.sent != 0) d += " after the launcher's " + signal_name(c.sent);
  return d;
}

namespace {

constexpr size_t kMaxRanges = 8;  // a group's rank list is cut after this many ranges

// "0-3, 5, 7-9" for ranks in increasing order; past kMaxRanges ranges, "..., (N ranks)".
std::string ranges_text(const std::vector<int>& ranks) {
  std::string out;
  size_t ranges = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (ranges == kMaxRanges) return out + ", ... (" + std::to_string(ranks.size()) + " ranks)";
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    ++ranges;
    i = j + 1;
  }
  return out;
}

}  // namespace

// One line per state, in the order of the states' first ranks: "rank 3 (pid 4244): exited 0"
// for a state of one rank, "ranks 508-99999: not started" for several (a group's pids are
// left out: -n 100000 gives a few lines, not 100000).
std::string Launcher::processes_text() const {
  std::vector<std::pair<std::string, std::vector<size_t>>> groups;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < children_.size(); ++i) {
    std::string state = status_of(children_[i]);
    auto [it, added] = index.emplace(state, groups.size());
    if (added) groups.emplace_back(std::move(state), std::vector<size_t>());
    groups[it->second].second.push_back(i);
  }
  std::string text = "  the processes:\n";
  for (const auto& [state, members] : groups) {
    if (members.size() == 1) {
      const Child& c = children_[members.front()];
      text += "    rank " + std::to_string(c.rank) + (c.pid < 0 ? "" : " (pid " + std::to_string(c.pid) + ")") + ": " +
              state + "\n";
    } else {
      std::vector<int> ranks;
      for (size_t i : members) ranks.push_back(children_[i].rank);
      text += "    ranks " + ranges_text(ranks) + ": " + state + "\n";
    }
  }
  return text;
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
  if (children_.size() > 1 || !start_error_.empty()) report += processes_text();
  write_all(2, report);
  return 1;
}

int Launcher::report_interrupted(int sig) {
  std::string report = "accel launch: interrupted by " + signal_name(sig) + " after " + seconds_text(elapsed()) + "\n";
  report += processes_text();
  write_all(2, report);
  return 128 + sig;
}

}  // namespace accel::launch
