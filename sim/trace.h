// The timeline: events on each rank's compute, communication and host-link lanes (virtual seconds),
// written as Chrome trace JSON (chrome://tracing, ui.perfetto.dev). Torch-free.
#pragma once

#include <string>
#include <vector>

namespace accel::sim {

struct TraceEvent {
  int rank;
  int lane;  // 0 compute, 1 communication, 2 the host link's copies beside the compute (offload)
  std::string name;
  double ts, dur;  // seconds
  std::string args;
};

// The events (in any order; written sorted by rank, lane and start) with one process per
// rank and a thread per lane.
std::string chrome_trace_json(std::vector<TraceEvent> events, const std::string& topology, int world_size);

}  // namespace accel::sim
