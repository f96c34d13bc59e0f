// Alpha-beta costs for collectives (ring; tree for all-reduce) over topology presets.
// The parameters are documented, with their sources and the error reached, in
// docs/sim-calibration.md.
#include "sim/cost.h"

#include <cmath>
#include <map>
#include <sstream>

#include "runtime/status.h"

namespace accel::sim {

const char* coll_name(CollKind k) {
  switch (k) {
    case CollKind::AllReduce: return "all_reduce";
    case CollKind::ReduceScatter: return "reduce_scatter";
    case CollKind::AllGather: return "all_gather";
    case CollKind::Broadcast: return "broadcast";
    case CollKind::Reduce: return "reduce";
    case CollKind::Barrier: return "barrier";
    case CollKind::SendRecv: return "sendrecv";
  }
  return "?";
}

namespace {

// `bandwidth` is the bus bandwidth (nccl-tests' busbw) the ring algorithm sustains on
// that link class for large messages; `alpha` the latency of one algorithm step.
Topology h100_node() {
  Topology t;
  t.name = "8xH100";
  t.description = "one node of 8 H100 SXM GPUs, NVLink 4 through NVSwitch (DGX/HGX H100)";
  t.gpus_per_node = 8;
  t.intra = {"NVLink4", 3.0e-6, 480e9};
  t.inter = t.intra;
  t.launch_overhead = 8e-6;
  return t;
}

Topology a100_node() {
  Topology t;
  t.name = "8xA100";
  t.description = "one node of 8 A100 SXM GPUs, NVLink 3 through NVSwitch (DGX/HGX A100)";
  t.gpus_per_node = 8;
  t.intra = {"NVLink3", 4.0e-6, 235e9};
  t.inter = t.intra;
  t.launch_overhead = 8e-6;
  return t;
}

Topology pcie_node() {
  Topology t;
  t.name = "8xPCIe";
  t.description = "one node of 8 GPUs on PCIe 4.0 switches, no NVLink";
  t.gpus_per_node = 8;
  t.intra = {"PCIe4", 10.0e-6, 22e9};
  t.inter = t.intra;
  t.launch_overhead = 10e-6;
  return t;
}

Topology h100_ib(int nodes) {
  Topology t = h100_node();
  t.name = std::to_string(nodes) + "x8xH100-IB";
  t.description = std::to_string(nodes) +
                  " nodes of 8 H100 SXM (NVLink 4), one 400 Gb/s NDR InfiniBand NIC per GPU, rail-optimised fabric";
  t.inter = {"IB-NDR400", 12.0e-6, 380e9};
  return t;
}

int nodes_spanned(const Topology& t, int nranks) { return (nranks + t.gpus_per_node - 1) / t.gpus_per_node; }

// The link class a ring over `nranks` consecutive ranks is limited by.
const Link& ring_link(const Topology& t, int nranks) { return nodes_spanned(t, nranks) > 1 ? t.inter : t.intra; }

}  // namespace

std::vector<std::string> topology_preset_names() { return {"8xH100", "8xA100", "8xPCIe", "Nx8xH100-IB"}; }

Topology topology_preset(const std::string& name) {
  if (name == "8xH100" || name == "h100") return h100_node();
  if (name == "8xA100" || name == "a100") return a100_node();
  if (name == "8xPCIe" || name == "pcie") return pcie_node();
  int nodes = 0;
  char rest[32] = {0};
  if (std::sscanf(name.c_str(), "%dx8xH100-%31s", &nodes, rest) == 2 && std::string(rest) == "IB" && nodes >= 1)
    return h100_ib(nodes);
  std::ostringstream os;
  os << "unknown topology '" << name << "'; presets:";
  for (const auto& n : topology_preset_names()) os << " " << n;
  os << " (N nodes, e.g. 4x8xH100-IB)";
  fail(Status::InvalidArgument, os.str());
}

double busbw_factor(CollKind kind, int n) {
  if (n <= 1) return 1.0;
  switch (kind) {
    case CollKind::AllReduce: return 2.0 * (n - 1) / n;
    case CollKind::ReduceScatter:
    case CollKind::AllGather: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

uint64_t bytes_sent_per_rank(CollKind kind, uint64_t bytes, int n) {
  if (n <= 1) return 0;
  switch (kind) {
    case CollKind::AllReduce: return static_cast<uint64_t>(2.0 * (n - 1) / n * static_cast<double>(bytes));
    case CollKind::ReduceScatter:
    case CollKind::AllGather: return static_cast<uint64_t>(static_cast<double>(n - 1) / n * static_cast<double>(bytes));
    case CollKind::Broadcast:
    case CollKind::Reduce: return bytes;  // pipelined ring: every rank forwards the whole buffer once
    default: return 0;
  }
}

Estimate collective_cost(const Topology& t, CollKind kind, uint64_t bytes, int n) {
  Estimate e;
  if (n <= 1) {
    e.algorithm = "local";
    e.seconds = kind == CollKind::Barrier ? 0.0 : t.launch_overhead;
    return e;
  }
  const Link& link = ring_link(t, n);
  const double S = static_cast<double>(bytes);
  const double steps_ring_ar = 2.0 * (n - 1);
  switch (kind) {
    case CollKind::AllReduce:
    case CollKind::Barrier: {
      // ring: 2(n-1) steps, each rank moves 2(n-1)/n * S at the bus bandwidth
      const double ring = t.launch_overhead + steps_ring_ar * link.alpha + busbw_factor(CollKind::AllReduce, n) * S / link.bandwidth;
      // tree (double binary tree): 2 log2(n) steps of latency, half the ring's bandwidth
      const double depth = std::ceil(std::log2(static_cast<double>(n)));
      const double tree = t.launch_overhead + 2.0 * depth * link.alpha + 2.0 * S / link.bandwidth;
      if (tree < ring) {
        e.seconds = tree;
        e.algorithm = "tree";
      } else {
        e.seconds = ring;
        e.algorithm = "ring";
      }
      return e;
    }
    case CollKind::ReduceScatter:
    case CollKind::AllGather:
      e.seconds = t.launch_overhead + (n - 1) * link.alpha + busbw_factor(kind, n) * S / link.bandwidth;
      e.algorithm = "ring";
      return e;
    case CollKind::Broadcast:
    case CollKind::Reduce:
      e.seconds = t.launch_overhead + (n - 1) * link.alpha + S / link.bandwidth;
      e.algorithm = "ring";
      return e;
    case CollKind::SendRecv:
      e.seconds = t.launch_overhead + link.alpha + S / link.bandwidth;
      e.algorithm = "direct";
      return e;
  }
  return e;
}

double p2p_cost(const Topology& t, int src, int dst, uint64_t bytes) {
  const bool same_node = src / t.gpus_per_node == dst / t.gpus_per_node;
  const Link& link = same_node ? t.intra : t.inter;
  // a point-to-point copy uses one direction of the link: per-GPU uni-directional bandwidth
  return t.launch_overhead + link.alpha + static_cast<double>(bytes) / link.bandwidth;
}

}  // namespace accel::sim
