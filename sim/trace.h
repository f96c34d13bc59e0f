// The timeline: events on each rank's compute and communication lanes (virtual seconds),
// written as Chrome trace JSON (chrome://tracing, ui.perfetto.dev). Torch-free.
#pragma once

#include <string>
#include <vector>

namespace accel::sim {

struct TraceEvent {
  int rank;
  int lane;  // 0 compute, 1 communication
  std::string name;
  double ts, dur;  // seconds
  std::string args;
};

// The events (in any order; written sorted by rank, lane and start) with one process per
// rank and a thread per lane.
std::string chrome_trace_json(std::vector<TraceEvent> events, const std::string& topology, int world_size);

}  // namespace accel::sim
