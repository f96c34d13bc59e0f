// Fault injection: parsing the fault list, arming it on the ranks, firing the kills.
// Torch-free.
#include "sim/faults.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/status.h"
#include "comm/communicator.h"

namespace accel::sim {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Reads a whole number (digits only: no sign, no space) at s[pos..], advancing pos; false when
// there is no digit. A value past 2^62 saturates there (too large for any world or count).
bool read_count(const std::string& s, size_t& pos, int64_t& out) {
  const size_t begin = pos;
  out = 0;
  constexpr int64_t kCap = int64_t{1} << 62;
  for (; pos < s.size() && is_digit(s[pos]); ++pos) out = out > kCap / 10 ? kCap : out * 10 + (s[pos] - '0');
  return pos > begin;
}

// SECONDS as strtod reads it, the whole rest of the item: "0.5", "2", ".25", "1e-3" (and "-1",
// "inf", "nan", which the caller refuses by name); no space, no '+', no hexadecimal.
bool read_seconds(const std::string& s, size_t pos, double& out) {
  if (pos >= s.size() || is_space(s[pos]) || s[pos] == '+' || s.find_first_of("xX", pos) != std::string::npos)
    return false;
  const char* begin = s.c_str() + pos;
  char* end = nullptr;
  out = std::strtod(begin, &end);
  return end != begin && *end == '\0';
}

// "kill:" or "delay:" then RANK; pos is left after RANK.
bool read_rank(const std::string& item, const char* head, size_t& pos, int64_t& rank) {
  const size_t n = std::strlen(head);
  if (item.compare(0, n, head) != 0) return false;
  pos = n;
  return read_count(item, pos, rank);
}

}  // namespace

// The grammar (docs/simulator.md, "Faults"): ITEM (',' ITEM)*, where each ITEM is
//   kill:RANK@collective:K | kill:RANK@step:K | delay:RANK:SECONDS
// with no space inside; spaces and tabs around an item (after a comma) are ignored; an empty
// item (",,", a comma at either end) is refused. The same parser serves every door: the C
// ABI's accel_sim_options.faults, ACCEL_SIM_FAULTS and accel launch --sim-faults.
std::vector<Fault> parse_faults(const std::string& spec, int world_size) {
  std::vector<Fault> out;
  const char* forms = "kill:RANK@collective:K, kill:RANK@step:K, delay:RANK:SECONDS";
  size_t number = 0;
  for (size_t a = 0; a <= spec.size();) {
    const size_t b = std::min(spec.find(',', a), spec.size());
    size_t first = a, last = b;
    while (first < last && is_space(spec[first])) ++first;
    while (last > first && is_space(spec[last - 1])) --last;
    const std::string item = spec.substr(first, last - first);
    ++number;
    ACCEL_CHECK(!item.empty(), Status::InvalidArgument, "faults: '", spec, "': item ", number,
                " is empty (two commas in a row, or a comma at an end); give faults separated by single commas (",
                forms, ")");
    a = b + 1;
    Fault f;
    int64_t rank = -1;
    size_t pos = 0;
    if (read_rank(item, "kill:", pos, rank) && pos < item.size() && item[pos] == '@') {
      const size_t colon = item.find(':', pos + 1);
      const std::string w = item.substr(pos + 1, colon == std::string::npos ? std::string::npos : colon - pos - 1);
      int64_t at = 0;
      size_t k = colon == std::string::npos ? item.size() : colon + 1;
      if (colon == std::string::npos || !read_count(item, k, at) || k != item.size() || w.empty() ||
          w.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos)
        fail(Status::InvalidArgument, "faults: cannot read '", item, "' (", forms, ")");
      ACCEL_CHECK(w == "collective" || w == "step", Status::InvalidArgument, "faults: '", item,
                  "': kill at 'collective' or 'step'");
      f.kind = w == "step" ? Fault::Kind::KillAtStep : Fault::Kind::KillAtCollective;
      ACCEL_CHECK(at >= 1 || f.kind == Fault::Kind::KillAtStep, Status::InvalidArgument, "faults: '", item,
                  "': K must be >= 1 (collectives are counted from 1), got ", at);
      f.at = at;
    } else if (read_rank(item, "delay:", pos, rank) && pos < item.size() && item[pos] == ':') {
      double secs = 0;
      if (!read_seconds(item, pos + 1, secs))
        fail(Status::InvalidArgument, "faults: cannot read '", item, "' (", forms, ")");
      f.kind = Fault::Kind::Delay;
      ACCEL_CHECK(std::isfinite(secs) && secs >= 0, Status::InvalidArgument, "faults: '", item,
                  "': SECONDS must be finite and >= 0, got ", secs);
      f.seconds = secs;
    } else {
      fail(Status::InvalidArgument, "faults: cannot read '", item, "' (", forms, ")");
    }
    ACCEL_CHECK(rank < (int64_t{1} << 31) && (world_size <= 0 || rank < world_size), Status::InvalidArgument,
                "faults: '", item, "' names rank ", rank,
                world_size > 0 ? " of a " + std::to_string(world_size) + "-rank world" : std::string(" (too large)"));
    f.rank = static_cast<int>(rank);
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
