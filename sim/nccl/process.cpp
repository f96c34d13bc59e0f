// The simulated NCCL library (sim/nccl/internal.h): small helpers, and the process — its
// settings (ACCEL_SIM_*), and its report and trace files.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/files.h"
#include "base/text.h"
#include "sim/nccl/internal.h"

namespace files = accel::files;

namespace accel::simnccl {

// ---------------------------------------------------------------------------------------
// Small helpers

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void copy_text(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

namespace {

// Writes `text` to `path` through a temporary file and a rename (base/files.h): a reader (the
// launcher) never sees half. The first failure is said on stderr (the launcher then reports
// the file missing or stale, and why is here); the report is rewritten at every step.
void write_atomically(const std::string& path, const std::string& text) {
  static std::atomic<bool> said{false};
  if (files::Result r = files::write_atomic(path, text, files::Durability::Replace); !r && !said.exchange(true))
    std::fprintf(stderr, "accel-nccl-sim: %s\n", r.message.c_str());
}

}  // namespace

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

// ---------------------------------------------------------------------------------------
// The process: settings, clocks, memory, trace, report (one rank per process)

const char* kind_name(int k) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "send", "recv"};
  return k >= 0 && k <= kRecv ? names[k] : "?";
}
sim::CollKind coll_kind(int k) {
  switch (k) {
    case kAllReduce: return sim::CollKind::AllReduce;
    case kReduceScatter: return sim::CollKind::ReduceScatter;
    case kAllGather: return sim::CollKind::AllGather;
    case kBroadcast: return sim::CollKind::Broadcast;
    case kReduce: return sim::CollKind::Reduce;
    default: return sim::CollKind::SendRecv;
  }
}

// Reads ACCEL_SIM_* once.
void Process::configure() {
  if (configured) return;
  configured = true;
  try {
    // the simulator's one parser (sim/settings.h); the world's size is not known yet
    if (!env("ACCEL_SIM_TOPOLOGY").empty()) topology_name = env("ACCEL_SIM_TOPOLOGY");
    gpu_mem_text = env("ACCEL_SIM_GPU_MEM");
    faults_text = env("ACCEL_SIM_FAULTS");
    sim::SettingsText given;
    given.topology = topology_name;
    if (!gpu_mem_text.empty()) given.device_memory = gpu_mem_text;
    // faults fire on the first attempt only: a restarted group resumes past them
    const std::string restart = env("ACCEL_RESTART_COUNT");
    if (restart.empty() || restart == "0") given.faults = faults_text;
    sim::SettingNames names;
    names.device_memory = "ACCEL_SIM_GPU_MEM";
    sim::Settings parsed = sim::parse_settings(given, names);
    topo = parsed.topology;
    capacity = parsed.device_capacity;
    faults = std::move(parsed.faults);
    out_dir = env("ACCEL_SIM_OUT");
    trace = env("ACCEL_SIM_TRACE") == "1";
    try {
      algorithms = sim::parse_algorithms(env("NCCL_ALGO"));
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("NCCL_ALGO: ") + e.what());
    }
  } catch (const std::exception& e) {
    config_error = e.what();
  }
}

// The report file (ACCEL_SIM_OUT/rank-R.json); and, with `trace_too`, the trace
// (trace-R.json), which grows with the run: written at exit or at a fault only.
void Process::write_files(bool trace_too) {
  if (out_dir.empty() || rank < 0) return;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"rank\":%d,\"world_size\":%d,\"topology\":\"%s\",\"status\":\"%s\",\"error\":\"%s\","
                "\"peak_bytes\":%llu,\"capacity_bytes\":%llu,\"virtual_seconds\":%.9f,\"compute_seconds\":%.9f,"
                "\"comm_seconds\":%.9f,\"steps\":%lld,\"collectives\":%llu,\"bytes_sent\":%llu}\n",
                rank, world, text::json_escape(topology_name).c_str(), status.c_str(), "%s",
                static_cast<unsigned long long>(peak), static_cast<unsigned long long>(capacity), now(), compute_t,
                comm_t, static_cast<long long>(steps), static_cast<unsigned long long>(collectives),
                static_cast<unsigned long long>(bytes_sent));
  std::string text = buf;
  const auto at = text.find("%s");
  text.replace(at, 2, text::json_escape(error));
  write_report(out_dir + "/rank-" + std::to_string(rank) + ".json", std::move(text));
  if (!trace || !trace_too) return;
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << rank << ",\"args\":{\"name\":\"rank " << rank << "\"}},\n"
     << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << rank << ",\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
     << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << rank << ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
  // in time order per lane: the host and the stream thread append in whatever order they ran
  std::vector<sim::TraceEvent> ev = events;
  std::stable_sort(ev.begin(), ev.end(), [](const sim::TraceEvent& x, const sim::TraceEvent& y) {
    return std::tie(x.lane, x.ts, x.dur, x.name) < std::tie(y.lane, y.ts, y.dur, y.name);
  });
  for (const auto& e : ev)
    os << ",\n{\"ph\":\"X\",\"name\":\"" << text::json_escape(e.name) << "\",\"cat\":\"" << (e.lane ? "comm" : "compute")
       << "\",\"pid\":" << rank << ",\"tid\":" << e.lane << ",\"ts\":" << e.ts * 1e6 << ",\"dur\":" << e.dur * 1e6
       << ",\"args\":{" << e.args << "}}";
  os << "]\n";
  write_atomically(out_dir + "/trace-" + std::to_string(rank) + ".json", os.str());
}

void Process::write_report(const std::string& path, std::string text) {
  constexpr size_t kPage = 4096;  // the write starts at offset 0: within the file's first page
  if (report_fd >= 0 && std::max(text.size(), report_bytes) <= kPage) {
    if (text.size() < report_bytes) text.insert(text.size() - 1, report_bytes - text.size(), ' ');  // before the '\n'
    const ssize_t k = ::pwrite(report_fd, text.data(), text.size(), 0);
    if (k == static_cast<ssize_t>(text.size())) {
      report_bytes = text.size();
      return;
    }
  }
  if (report_fd >= 0) ::close(report_fd);  // a long report (an error's text), or a failed write: made anew
  report_fd = -1;
  write_atomically(path, text);
  report_fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  report_bytes = text.size();
}

Process& proc() {
  static Process* p = new Process();  // never destroyed: threads may outlive static destruction
  return *p;
}

}  // namespace accel::simnccl
