// The Chrome trace writer.
#include "sim/trace.h"

#include <algorithm>
#include <sstream>
#include <tuple>

namespace accel::sim {

std::string chrome_trace_json(std::vector<TraceEvent> ev, const std::string& topology, int world_size) {
  std::stable_sort(ev.begin(), ev.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return std::tie(a.rank, a.lane, a.ts) < std::tie(b.rank, b.lane, b.ts);
  });
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"topology\":\"" << topology << "\",\"world_size\":" << world_size
     << "},\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  for (int r = 0; r < world_size; ++r) {
    sep();
    os << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << r << ",\"args\":{\"name\":\"rank " << r << "\"}}";
    sep();
    os << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << r << ",\"tid\":0,\"args\":{\"name\":\"compute\"}}";
    sep();
    os << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << r << ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
    // the host link's lane only where the rank's copies ran beside its compute (offload)
    if (std::any_of(ev.begin(), ev.end(), [r](const TraceEvent& e) { return e.rank == r && e.lane == 2; })) {
      sep();
      os << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << r << ",\"tid\":2,\"args\":{\"name\":\"host link\"}}";
    }
  }
  for (const auto& e : ev) {
    sep();
    os << "{\"ph\":\"X\",\"name\":\"" << e.name << "\",\"cat\":\"" << (e.lane == 2 ? "host" : e.lane ? "comm" : "compute") << "\",\"pid\":" << e.rank
       << ",\"tid\":" << e.lane << ",\"ts\":" << e.ts * 1e6 << ",\"dur\":" << e.dur * 1e6 << ",\"args\":{" << e.args
       << "}}";
  }
  os << "]}\n";
  return os.str();
}

}  // namespace accel::sim
