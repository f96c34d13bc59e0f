// Fault injection: parsing the fault list, arming it on the ranks, firing the kills.
// Torch-free.
#include "sim/faults.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

#include "base/status.h"
#include "comm/communicator.h"

namespace accel::sim {

std::vector<Fault> parse_faults(const std::string& spec, int world_size) {
  std::vector<Fault> out;
  std::stringstream ss(spec);
  std::string item;
  const char* forms = "kill:RANK@collective:K, kill:RANK@step:K, delay:RANK:SECONDS";
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    Fault f;
    int rank = -1, used = 0;
    long long at = 0;
    double secs = 0;
    char what[16] = {0};
    const auto whole = [&] { return used == static_cast<int>(item.size()); };
    if (std::sscanf(item.c_str(), "kill:%d@%15[a-z]:%lld%n", &rank, what, &at, &used) == 3 && whole()) {
      std::string w = what;
      ACCEL_CHECK(w == "collective" || w == "step", Status::InvalidArgument, "faults: '", item,
                  "': kill at 'collective' or 'step'");
      f.kind = w == "step" ? Fault::Kind::KillAtStep : Fault::Kind::KillAtCollective;
      ACCEL_CHECK(at >= 1 || (f.kind == Fault::Kind::KillAtStep && at >= 0), Status::InvalidArgument, "faults: '",
                  item, "': K must be >= ", f.kind == Fault::Kind::KillAtStep ? 0 : 1, " (collectives are counted from 1), got ", at);
      f.at = at;
    } else if (std::sscanf(item.c_str(), "delay:%d:%lf%n", &rank, &secs, &used) == 2 && whole()) {
      f.kind = Fault::Kind::Delay;
      ACCEL_CHECK(std::isfinite(secs) && secs >= 0, Status::InvalidArgument, "faults: '", item,
                  "': SECONDS must be finite and >= 0, got ", secs);
      f.seconds = secs;
    } else {
      fail(Status::InvalidArgument, "faults: cannot read '", item, "' (", forms, ")");
    }
    ACCEL_CHECK(rank >= 0, Status::InvalidArgument, "faults: '", item, "': RANK must be >= 0, got ", rank);
    ACCEL_CHECK(world_size <= 0 || rank < world_size, Status::InvalidArgument, "faults: '", item, "' names rank ", rank,
                " of a ", world_size, "-rank world");
    f.rank = rank;
    out.push_back(f);
  }
  return out;
}

std::vector<RankFaults> arm_faults(const std::vector<Fault>& faults, int world_size) {
  std::vector<RankFaults> out(static_cast<size_t>(world_size));
  for (const auto& f : faults) {
    auto& d = out[static_cast<size_t>(f.rank)];
    if (f.kind == Fault::Kind::Delay) d.delay += f.seconds;
    if (f.kind == Fault::Kind::KillAtCollective) d.kill_at_collective = f.at;
    if (f.kind == Fault::Kind::KillAtStep) d.kill_at_step = f.at;
  }
  return out;
}

void RankFaults::at_collective(int rank, uint64_t seq) const {
  if (kill_at_collective > 0 && static_cast<int64_t>(seq) == kill_at_collective)
    throw comm::CommError(comm::Result::SystemError, "rank " + std::to_string(rank) +
                                                         " was killed by fault injection at its collective #" +
                                                         std::to_string(seq));
}

void RankFaults::at_step(int rank, int64_t step) const {
  if (kill_at_step >= 1 && step == kill_at_step)
    throw comm::CommError(comm::Result::SystemError, "rank " + std::to_string(rank) +
                                                         " was killed by fault injection at step " +
                                                         std::to_string(step));
}

}  // namespace accel::sim
