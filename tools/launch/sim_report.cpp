// `accel launch --backend sim`: the rank-<R>.json and trace-<R>.json files the processes
// wrote to ACCEL_SIM_OUT, merged into one report (a table; --sim-report: JSON) and one Chrome
// trace (--sim-trace).
#include "tools/launch/internal.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "sim/settings.h"

namespace accel::launch {

// ---- the simulation's files (--backend sim) ------------------------------------------

using Json = nlohmann::ordered_json;  // keys in the order written: the output is deterministic

namespace {

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

constexpr size_t kMaxCell = 240;  // a program's own error line, cut to this length in the table

// One line of a table cell: control characters (newlines) become spaces.
std::string one_line(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';
  return s;
}

}  // namespace

// ---- --backend sim: the merged report --------------------------------------------------

// Each simulated GPU's budget: --sim-gpu-mem, else the preset's GPU memory ("unlimited": 0).
uint64_t Launcher::sim_capacity() const {
  accel::sim::SettingsText t;
  t.topology = o_.sim_topology.empty() ? accel::sim::kDefaultTopology : o_.sim_topology;
  if (!o_.sim_gpu_mem.empty()) t.device_memory = o_.sim_gpu_mem;
  accel::sim::SettingNames names;
  names.topology = "--sim-topology";
  names.device_memory = "--sim-gpu-mem";
  return accel::sim::parse_settings(t, names).device_capacity;
}

// "8xH100: 8 processes, 79.15 GiB of memory per GPU"
std::string Launcher::sim_setup() const {
  const int n = o_.nproc_per_node;
  const uint64_t cap = sim_capacity();
  return o_.sim_topology + ": " + std::to_string(n) + (n == 1 ? " process, " : " processes, ") +
         (cap == 0 ? std::string("unlimited memory") : accel::text::format_bytes(cap) + " of memory") + " per GPU";
}

// How a process ended, without pids or times: "exit 0", "exit 3", "SIGKILL", "not started".
std::string Launcher::exit_text(const Child& c) {
  if (c.pid < 0) return "not started";
  if (WIFEXITED(c.status)) return "exit " + std::to_string(WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status)) return signal_name(WTERMSIG(c.status));
  return "wait status " + std::to_string(c.status);
}

// A rank's row: its report file's status and error, with what the launcher knows of the
// process (how it ended; whether the launcher stopped it, and why).
Launcher::SimRow Launcher::sim_row(const Child& c, int interrupted_by) const {
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
    if (c.killed_by_second != 0)
      row.error += " (SIGKILL at a second " + signal_name(c.killed_by_second) + " to the launcher)";
    else if (c.killed_after_grace)
      row.error += " (SIGKILL after the " + number_text(o_.grace_period) + " s grace period)";
    if (!f.read) row.error += "; " + f.problem;
    else if (!f.error.empty()) row.error += "; its report: " + f.status + ": " + f.error;
  } else if (f.read && ok_exit) {
    row.status = f.status;  // "ok"
    row.error = f.error;
  } else if (f.read) {
    // the simulator saw nothing wrong (its report says ok) but the program failed on its own
    // (an error it returned, accel_prepare's for one): what it last wrote to stderr says why
    row.status = "failed";
    if (!c.last_err.empty()) {
      row.error = c.last_err.back();
      if (row.error.size() > kMaxCell) row.error = row.error.substr(0, kMaxCell - 3) + "...";
    } else {
      row.error = "the process " + describe_status(c.status) + " and wrote nothing to stderr";
    }
  } else {
    row.status = "no report";
    row.error = f.problem;
  }
  return row;
}

// Prints the simulation's report, writes --sim-report and --sim-trace; returns `rc`, or 1
// instead of 0 when a file could not be written.
int Launcher::sim_report(int rc, int attempt, int interrupted_by) {
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

}  // namespace accel::launch
