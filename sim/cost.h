// The simulator's cost model: alpha-beta costs per collective algorithm and link, with
// topology presets calibrated against published nccl-tests measurements
// (docs/sim-calibration.md). Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accel::sim {

enum class CollKind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Barrier, SendRecv };
const char* coll_name(CollKind k);

// A link class: latency per algorithm step (alpha, seconds) and bandwidth (bytes/second).
struct Link {
  std::string name;
  double alpha = 0.0;
  double bandwidth = 0.0;
};

struct Topology {
  std::string name;          // the preset's name
  std::string description;
  int gpus_per_node = 8;
  Link intra;                // between GPUs of one node (NVLink/NVSwitch, PCIe)
  Link inter;                // between nodes (InfiniBand); unused on one node
  // Fixed cost per collective call (kernel launch, protocol setup), seconds.
  double launch_overhead = 0.0;
};

// The presets: "8xH100" (one NVLink node), "8xA100", "8xPCIe", "Nx8xH100-IB" (N nodes of
// 8xH100 over 400 Gb/s InfiniBand, e.g. "4x8xH100-IB"). Throws Error(InvalidArgument)
// naming the known presets.
Topology topology_preset(const std::string& name);
std::vector<std::string> topology_preset_names();

struct Estimate {
  double seconds = 0.0;
  std::string algorithm;     // "ring", "tree", "direct"
};

// The time of one collective over `nranks` ranks (consecutive ranks fill nodes first).
// `bytes` is nccl-tests' "size": the all-reduce / broadcast / reduce buffer, the all-gather
// output, the reduce-scatter input.
Estimate collective_cost(const Topology& topo, CollKind kind, uint64_t bytes, int nranks);

// A point-to-point transfer.
double p2p_cost(const Topology& topo, int src, int dst, uint64_t bytes);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor (all-reduce 2(n-1)/n,
// reduce-scatter and all-gather (n-1)/n, broadcast and reduce 1).
double busbw_factor(CollKind kind, int nranks);

// The bytes one rank sends for a collective with the algorithm's data volume (ring:
// all-reduce 2(n-1)/n * bytes, reduce-scatter / all-gather (n-1)/n * bytes, ...).
uint64_t bytes_sent_per_rank(CollKind kind, uint64_t bytes, int nranks);

}  // namespace accel::sim
