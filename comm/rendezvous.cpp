// The rendezvous of real processes (see rendezvous.h).
#include "comm/rendezvous.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "base/status.h"

namespace accel::comm {

std::string pid_space() {
  std::string boot;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof buf, f)) boot = buf;
    std::fclose(f);
  }
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  char ns[64] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  if (boot.empty() || n <= 0) return "";
  return boot + "/" + std::string(ns, static_cast<size_t>(n));
}

namespace {

// What a process says of itself when it claims its rank: "key=value" fields, one per line.
std::string describe(const GroupConfig& c) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  std::ostringstream o;
  // the nonce tells two claims apart even from one process (threads in tests)
  o << "nonce=" << std::random_device{}() << "\npid=" << getpid() << "\nhost=" << host << "\npidspace=" << pid_space()
    << "\nworld_size=" << c.world_size
    << "\nbackend=" << c.backend << "\nlocal_rank=" << c.local_rank << "\nlocal_world_size=" << c.local_world_size << "\n";
  return o.str();
}

std::map<std::string, std::string> fields(const Bytes& b) {
  std::map<std::string, std::string> out;
  std::istringstream in(std::string(b.begin(), b.end()));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string who(const std::map<std::string, std::string>& f) {
  auto get = [&](const char* k) {
    auto it = f.find(k);
    return it == f.end() ? std::string("?") : it->second;
  };
  return "pid " + get("pid") + " on " + get("host");
}

std::string rank_key(int r) { return "accel/join/rank/" + std::to_string(r); }

// Names every field on which a joined process differs from this one.
void compare_worlds(Store& store, const GroupConfig& c, const std::map<std::string, std::string>& mine,
                    const std::vector<int>& ranks) {
  std::string diffs;
  for (int r : ranks) {
    if (r == c.rank) continue;
    const auto theirs = fields(store.get(rank_key(r)));
    for (const char* k : {"world_size", "backend"}) {
      auto it = theirs.find(k);
      const std::string v = it == theirs.end() ? "?" : it->second;
      if (v != mine.at(k))
        diffs += "; rank " + std::to_string(r) + " (" + who(theirs) + ") has " + k + " " + v + ", this process (rank " +
                 std::to_string(c.rank) + ") has " + mine.at(k);
    }
  }
  ACCEL_CHECK(diffs.empty(), Status::InvalidArgument, "the processes disagree on the world", diffs,
              " (check WORLD_SIZE and ACCEL_BACKEND on every process)");
}

}  // namespace

std::map<std::string, std::string> joined(Store& store, int rank) { return fields(store.get(rank_key(rank))); }

void meet(Store& store, const GroupConfig& c) {
  ACCEL_CHECK(c.world_size >= 1 && c.rank >= 0 && c.rank < c.world_size, Status::InvalidArgument, "rank ", c.rank,
              " is outside a world of ", c.world_size, " processes");
  const std::string me = describe(c);
  const Bytes mine(me.begin(), me.end());
  const Bytes now = store.compare_set("accel/join/claim/" + std::to_string(c.rank), Bytes{}, mine);
  if (now != mine)
    fail(Status::InvalidArgument, "rank ", c.rank, " is claimed by two processes: ", who(fields(now)), " and this one (",
         who(fields(mine)), "); give every process its own RANK");
  // then announced with set(), which wakes those waiting (c10d 1.13's compareSet does not)
  store.set(rank_key(c.rank), mine);
  std::vector<std::string> keys;
  std::vector<int> all;
  for (int r = 0; r < c.world_size; ++r) {
    keys.push_back(rank_key(r));
    all.push_back(r);
  }
  try {
    store.wait(keys, c.timeout);
  } catch (const CommError& e) {
    if (e.result() != Result::Timeout) throw;
    std::vector<int> came;
    std::string missing;
    for (int r = 0; r < c.world_size; ++r) {
      if (store.check(rank_key(r)))
        came.push_back(r);
      else
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    compare_worlds(store, c, fields(mine), came);  // a disagreement explains the absence better than a timeout
    std::string joined;
    for (int r : came)
      joined += (joined.empty() ? "" : ", ") + std::to_string(r) + " (" + who(fields(store.get(rank_key(r)))) + ")";
    throw CommError(Result::Timeout, "rank(s) " + missing + " of " + std::to_string(c.world_size) + " did not join within " +
                                         std::to_string(c.timeout.count()) + " ms (joined: " + joined +
                                         "): a process that failed to start, or a wrong WORLD_SIZE, MASTER_ADDR or MASTER_PORT");
  }
  compare_worlds(store, c, fields(mine), all);
}

}  // namespace accel::comm
