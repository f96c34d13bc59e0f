// The simulator's settings as text: fault injection (parsing the fault list, arming it on the
// ranks, firing the kills) and sizes (parse_bytes, format_bytes). Torch-free.
#include "sim/faults.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace accel::sim {

uint64_t parse_bytes(const std::string& text, const char* what) {
  // digits, an optional fraction, optional spaces, an optional unit; nothing else
  auto refuse = [&](const std::string& why) {
    fail(Status::InvalidArgument, what, " '", text, "' ", why,
         " (a positive number and a unit: 64MiB, 1.5GiB, 80GB, 1000000; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const size_t int_digits = i;
  size_t frac_digits = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, ++frac_digits;
    if (frac_digits == 0) refuse("is not a size");
  }
  if (int_digits == 0) refuse("is not a size");
  const std::string number = text.substr(0, i);
  while (i < text.size() && text[i] == ' ') ++i;
  const std::string unit = text.substr(i);
  static const std::map<std::string, double> units = {
      {"", 1},           {"B", 1},         {"KiB", 1024.0},    {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12},
      {"K", 1024.0},     {"M", 1048576.0}, {"G", 1073741824.0}};
  auto it = units.find(unit);
  if (it == units.end()) refuse("has an unknown unit '" + unit + "'");
  const double bytes = std::strtod(number.c_str(), nullptr) * it->second;  // digits only: strtod cannot fail
  if (!(bytes < 18446744073709551616.0)) refuse("is too large (at most 16 EiB)");
  const uint64_t out = static_cast<uint64_t>(bytes + 0.5);
  if (out == 0) refuse("is zero (for no limit pass no size at all)");
  return out;
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  else if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1ull << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(b) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

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
