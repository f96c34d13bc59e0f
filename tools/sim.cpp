// `accel sim bench` (nccl-tests for the simulator) and `accel sim topologies` (the cost
// model's presets). Torch-free.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/text.h"
#include "comm/communicator.h"
#include "comm/kernels.h"
#include "sim/replay.h"
#include "sim/world.h"
#include "tools/commands.h"

namespace accel::tools {
namespace {

using accel::comm::DataType;
using accel::comm::RedOp;
using accel::sim::CollKind;

const std::map<std::string, CollKind>& kinds() {
  static const std::map<std::string, CollKind> k = {{"all_reduce", CollKind::AllReduce},
                                                    {"reduce_scatter", CollKind::ReduceScatter},
                                                    {"all_gather", CollKind::AllGather},
                                                    {"broadcast", CollKind::Broadcast},
                                                    {"reduce", CollKind::Reduce}};
  return k;
}

DataType parse_dtype(const std::string& s) {
  for (int i = 0; i < accel::comm::kNumDataTypes; ++i)
    if (s == accel::comm::dtype_name(static_cast<DataType>(i))) return static_cast<DataType>(i);
  throw accel::Error(accel::Status::InvalidArgument, "unknown dtype '" + s + "' (float32, float16, bfloat16, int32, ...)");
}

RedOp parse_redop(const std::string& s) {
  for (int i = 0; i < accel::comm::kNumRedOps; ++i)
    if (s == accel::comm::op_name(static_cast<RedOp>(i))) return static_cast<RedOp>(i);
  throw accel::Error(accel::Status::InvalidArgument, "unknown reduction '" + s + "' (sum, prod, max, min, avg)");
}

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  for (int n : out)
    if (n < 1) throw accel::Error(accel::Status::InvalidArgument, "rank counts must be >= 1");
  if (out.empty()) throw accel::Error(accel::Status::InvalidArgument, "no rank count in '" + s + "'");
  return out;
}

// Measured seconds per operation for `bytes` (nccl-tests' size) on n ranks, or -1 when the
// buffers would not fit the --max-measure budget.
double measure(CollKind kind, uint64_t bytes, int n, DataType t, RedOp op, const BenchArgs& a, uint64_t max_measure) {
  const size_t es = accel::comm::dtype_size(t);
  // per-rank send and recv buffer sizes for nccl-tests' "size" convention
  uint64_t send_b = bytes, recv_b = bytes;
  if (kind == CollKind::ReduceScatter) recv_b = bytes / n;
  if (kind == CollKind::AllGather) send_b = bytes / n;
  if ((send_b + recv_b) * static_cast<uint64_t>(n) > max_measure) return -1;
  accel::sim::WorldOptions wo;
  wo.world_size = n;
  wo.topology = a.topology;
  wo.timeout_seconds = 600;
  wo.algorithms = a.algo;
  accel::sim::World world(wo);
  double per_op = -1;
  auto rep = world.run([&](accel::sim::Rank& rk) {
    std::vector<char> send(send_b), recv(recv_b);
    std::memset(send.data(), rk.rank() + 1, send.size());
    std::memset(recv.data(), 0, recv.size());
    const size_t count = send_b / es;
    auto& c = rk.comm();
    auto once = [&] {
      switch (kind) {
        case CollKind::AllReduce: c.all_reduce(send.data(), recv.data(), count, t, op)->wait(); break;
        case CollKind::ReduceScatter: c.reduce_scatter(send.data(), recv.data(), recv_b / es, t, op)->wait(); break;
        case CollKind::AllGather: c.all_gather(send.data(), recv.data(), count, t)->wait(); break;
        case CollKind::Broadcast: c.broadcast(send.data(), recv.data(), count, t, 0)->wait(); break;
        case CollKind::Reduce: c.reduce(send.data(), recv.data(), count, t, op, 0)->wait(); break;
        default: break;
      }
    };
    for (int i = 0; i < a.warmup; ++i) once();
    c.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) once();
    c.barrier();
    if (rk.rank() == 0) per_op = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.iters;
  });
  if (!rep.ok()) throw accel::Error(accel::Status::Internal, rep.first_error());
  return per_op;
}

}  // namespace

int sim_bench(const BenchArgs& a) {
  auto it = kinds().find(a.op);
  if (it == kinds().end()) throw accel::Error(accel::Status::InvalidArgument, "unknown collective '" + a.op + "'");
  const CollKind kind = it->second;
  const DataType t = parse_dtype(a.dtype);
  const RedOp op = parse_redop(a.redop);
  const accel::sim::Topology topo = accel::sim::topology_preset(a.topology);
  const uint64_t lo = accel::text::parse_bytes(a.min_bytes), hi = accel::text::parse_bytes(a.max_bytes);
  const uint64_t predict_hi = std::max(hi, accel::text::parse_bytes(a.predict_to));
  const uint64_t max_measure = accel::text::parse_bytes(a.max_measure);
  if (lo == 0 || lo > hi) throw accel::Error(accel::Status::InvalidArgument, "need 0 < --min-bytes <= --max-bytes");
  if (a.factor <= 1.0) throw accel::Error(accel::Status::InvalidArgument, "--factor must be > 1");
  const size_t es = accel::comm::dtype_size(t);
  const char* env_algo = std::getenv("NCCL_ALGO");
  const accel::sim::AlgorithmFilter only = accel::sim::parse_algorithms(!a.algo.empty() ? a.algo : env_algo ? env_algo : "");
  for (int n : parse_ranks(a.ranks)) {
    if (!a.json) {
      std::printf("# accel sim bench: %s, %d ranks, %s, %s, topology %s (%s)\n", a.op.c_str(), n, a.dtype.c_str(),
                  a.redop.c_str(), topo.name.c_str(), topo.description.c_str());
      std::printf("# measured: wall time of the simulator on this machine (real bytes); predicted: the cost model on %s\n",
                  topo.name.c_str());
      std::printf("# %12s %12s %14s %14s %16s %11s %11s\n", "size(B)", "count", "measured(us)", "predicted(us)",
                  "algorithm", "algbw(GB/s)", "busbw(GB/s)");
    }
    for (double b = static_cast<double>(lo); b <= static_cast<double>(predict_hi) * 1.0000001; b *= a.factor) {
      // a size every rank's share divides evenly
      uint64_t bytes = static_cast<uint64_t>(b);
      uint64_t unit = es * static_cast<uint64_t>(n);
      bytes = std::max<uint64_t>(unit, bytes / unit * unit);
      const bool reduces = kind == CollKind::AllReduce || kind == CollKind::ReduceScatter || kind == CollKind::Reduce;
      auto est = accel::sim::collective_cost(topo, kind, bytes, n, !reduces || accel::comm::nvls_supported(t, op), only);
      const double algbw = static_cast<double>(bytes) / est.seconds / 1e9;
      const double busbw = algbw * accel::sim::busbw_factor(kind, n);
      const double measured = bytes <= hi ? measure(kind, bytes, n, t, op, a, max_measure) : -1;
      const uint64_t count = (kind == CollKind::AllGather || kind == CollKind::ReduceScatter) ? bytes / es / n : bytes / es;
      if (a.json) {
        std::printf("{\"bench\":\"sim_bench\",\"op\":\"%s\",\"ranks\":%d,\"dtype\":\"%s\",\"topology\":\"%s\",\"bytes\":%llu,"
                    "\"count\":%llu,\"measured_us\":%s,\"predicted_us\":%.3f,\"algorithm\":\"%s\",\"protocol\":\"%s\","
                    "\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f}\n",
                    a.op.c_str(), n, a.dtype.c_str(), topo.name.c_str(), static_cast<unsigned long long>(bytes),
                    static_cast<unsigned long long>(count),
                    measured < 0 ? "null" : std::to_string(measured * 1e6).c_str(), est.seconds * 1e6,
                    est.algorithm.c_str(), est.protocol.c_str(), algbw, busbw);
      } else {
        char m[32];
        if (measured < 0)
          std::snprintf(m, sizeof m, "%s", "-");
        else
          std::snprintf(m, sizeof m, "%.1f", measured * 1e6);
        const std::string way = est.algorithm + (est.protocol.empty() ? "" : "/" + est.protocol);
        std::printf("  %12llu %12llu %14s %14.1f %16s %11.2f %11.2f\n", static_cast<unsigned long long>(bytes),
                    static_cast<unsigned long long>(count), m, est.seconds * 1e6, way.c_str(), algbw, busbw);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

int sim_topologies() {
  for (const auto& name : accel::sim::topology_preset_names()) {
    // "Nx8x..." presets: describe the two-node one
    auto t = accel::sim::topology_preset(name.rfind("Nx", 0) == 0 ? "2" + name.substr(1) : name);
    const std::string mem = t.gpu_memory ? accel::text::format_bytes(t.gpu_memory) + " a GPU" : "unlimited memory";
    std::printf("%-14s %s; %s\n", name.c_str(), t.description.c_str(), mem.c_str());
  }
  return 0;
}

int sim_step(const StepArgs& a) {
  accel::sim::ReplayRecording rec;
  const bool recorded = !a.program.empty();
  if (recorded) rec = accel::sim::read_recording(a.program);
  const int ranks = a.ranks > 0 ? a.ranks : recorded ? rec.world_size : 8;
  std::string topology = a.topology;
  if (topology.empty()) {
    if (recorded && ranks <= rec.world_size)
      topology = rec.topology;
    else
      topology = ranks <= 8 ? "8xH100" : std::to_string((ranks + 7) / 8) + "x8xH100-IB";
  }
  const accel::sim::Topology topo = accel::sim::topology_preset(topology);
  const uint64_t bucket = accel::text::parse_bytes(a.bucket);
  accel::sim::ReplayOptions o;
  if (recorded) {
    o = accel::sim::replay_options(rec, ranks, topology);
  } else {
    ACCEL_CHECK(std::isfinite(a.params) && a.params > 0 && std::isfinite(a.tokens) && a.tokens > 0,
                accel::Status::InvalidArgument, "--params and --tokens must be positive");
    o.world_size = ranks;
    o.topology = topology;
    o.programs.push_back(accel::sim::step_program(topo, a.strategy, a.params, a.tokens, a.layers, bucket));
  }
  for (const std::string& s : a.slow) {
    const auto colon = s.find(':');
    char* end = nullptr;
    const long r = colon == std::string::npos ? -1 : std::strtol(s.c_str(), &end, 10);
    const double f = colon == std::string::npos ? 0 : std::strtod(s.c_str() + colon + 1, nullptr);
    ACCEL_CHECK(colon != std::string::npos && end == s.c_str() + colon && r >= 0 && r < ranks && f > 0,
                accel::Status::InvalidArgument, "--slow '", s, "': want RANK:FACTOR, a rank in [0, ", ranks,
                ") and a factor > 0 (e.g. 7:1.5)");
    o.slowdown.emplace_back(static_cast<int>(r), f);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const accel::sim::ReplayReport rep = accel::sim::replay(o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!rep.ok) throw accel::Error(rep.status, rep.error);
  accel::sim::StepEstimate est;  // the closed form: for the patterns only
  double compute = 0;
  if (recorded) {
    for (const auto& st : o.programs[0].steps)
      if (st.kind == accel::sim::ReplayStep::Compute) compute += st.seconds;
  } else {
    est = accel::sim::estimate_step(topo, a.strategy, a.params, a.tokens, ranks, a.layers, bucket);
    compute = est.compute;
  }
  std::string algos;
  for (const auto& x : rep.algorithms) algos += (algos.empty() ? "" : ", ") + x;
  if (a.json) {
    std::printf("{\"strategy\":\"%s\",\"ranks\":%d,\"topology\":\"%s\",\"predicted_step_s\":%.6f,"
                "\"slowest_rank\":%d,\"fastest_rank_s\":%.6f,\"compute_s\":%.6f,\"comm_s\":%.6f,"
                "\"collectives\":%llu,\"algorithms\":\"%s\",",
                recorded ? "recorded" : a.strategy.c_str(), ranks, topo.name.c_str(), rep.predicted_seconds,
                rep.slowest_rank, rep.fastest_seconds, compute, rep.comm_seconds,
                static_cast<unsigned long long>(rep.collectives), algos.c_str());
    if (recorded)
      std::printf("\"recorded_ranks\":%d,\"recorded_topology\":\"%s\",\"recorded_predicted_s\":%.9f,"
                  "\"replayed_predicted_s\":%.9f,\"approximate\":\"%s\",",
                  rec.world_size, rec.topology.c_str(), rec.predicted_seconds, rep.predicted_seconds,
                  rec.approximate.c_str());
    else
      std::printf("\"params\":%.6g,\"tokens\":%.6g,\"analytic_step_s\":%.6f,", a.params, a.tokens, est.total);
    std::printf("\"wall_s\":%.3f,\"events\":%llu}\n", wall, static_cast<unsigned long long>(rep.events));
    return 0;
  }
  if (recorded)
    std::printf("# accel sim step: %s (recorded on %d ranks of %s: %.6f s), replayed on %d ranks of %s (%s)\n",
                a.program.c_str(), rec.world_size, rec.topology.c_str(), rec.predicted_seconds, ranks,
                topo.name.c_str(), topo.description.c_str());
  else
    std::printf("# accel sim step: %s, %d ranks on %s (%s), %.3g parameters, %.0f tokens per rank\n",
                a.strategy.c_str(), ranks, topo.name.c_str(), topo.description.c_str(), a.params, a.tokens);
  std::printf("%s %10.4f s  (the slowest rank, %d; the fastest ends at %.4f s)\n",
              recorded ? "predicted, replayed" : "predicted step     ", rep.predicted_seconds, rep.slowest_rank,
              rep.fastest_seconds);
  if (recorded)
    std::printf("compute            %10.4f s  per rank (as recorded)\n", compute);
  else
    std::printf("compute            %10.4f s  per rank (forward and backward at %.0f%% of %.0f TFLOP/s)\n", compute,
                topo.mfu * 100, topo.gpu_flops / 1e12);
  std::printf("communication      %10.4f s  on the stream (%llu collectives: %s)\n", rep.comm_seconds,
              static_cast<unsigned long long>(rep.collectives), algos.c_str());
  if (!recorded) std::printf("closed form        %10.4f s  (estimate_step: overlap by formula)\n", est.total);
  if (recorded && !rec.approximate.empty()) std::printf("not replayed       %s\n", rec.approximate.c_str());
  std::printf("simulated in       %10.3f s  here (%llu calls and computes replayed)\n", wall,
              static_cast<unsigned long long>(rep.events));
  return 0;
}

}  // namespace accel::tools
