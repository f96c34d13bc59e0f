// Alpha-beta costs for collectives over topology presets: ring (every collective), NVLink
// SHARP ("nvls", all-reduce inside an H100 node) and NVLS tree ("nvls_tree", all-reduce
// across H100 nodes), each with NCCL's Simple and low-latency (LL) protocols. The
// parameters were fitted to published nccl-tests results; the model, the fit, the sources
// and the error reached are in docs/sim-calibration.md, the reference rows in
// sim/calibration/nccl_tests.csv (checked by tests/sim/test_calibration.cpp).
#include "sim/cost.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "base/status.h"

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

constexpr double us = 1e-6;
constexpr double GB = 1e9;  // nccl-tests' GB/s are 10^9 bytes per second

// Every preset: the fixed cost of one call (launch, proxy and protocol setup). The rest of
// the small-message floor (~25-35 us in the data) is in the LL protocol's steps.
constexpr double kLaunch = 10 * us;
// PCIe x16 between a GPU and its host, per direction: lanes x transfer rate x 128/130 / 8
// (5.0: 32 GT/s, 4.0: 16 GT/s), the spec sheet's rate (no measurement fitted yet).
constexpr double kPcie5x16 = 63.0 * GB, kPcie4x16 = 31.5 * GB;
// NVLink-C2C between a Grace Hopper superchip's GPU and its CPU: 900 GB/s in both directions
// together (NVIDIA's GH200 datasheet), 450 GB/s each way.
constexpr double kNvlinkC2C = 450.0 * GB;
// A GPU's memory as CUDA reports it to PyTorch, the "total capacity" of PyTorch's
// out-of-memory message: less than the board's HBM by what the driver reserves. The
// figures are those such messages show, in GiB (boards of one kind differ by ~0.2 GiB):
// H100 SXM and A100 SXM 80 GB 79.15, H200 141 GB 139.80, A100 40 GB 39.39, RTX 4090 (the
// 8xPCIe calibration's card) 23.68; GH200's 96 GB of HBM3 by the H100's ratio, 94.98
// (estimated: no such message found).
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr uint64_t gpu_gib(double gib) { return static_cast<uint64_t>(gib * kGiB); }
constexpr uint64_t kH100Memory = gpu_gib(79.15), kH200Memory = gpu_gib(139.80), kA100Memory = gpu_gib(79.15),
                   kA100Memory40 = gpu_gib(39.39), kRtx4090Memory = gpu_gib(23.68),
                   kGH200Memory = gpu_gib(79.15 * 96.0 / 80.0);

// ---------------------------------------------------------------------------------------
// The presets. Each number names the dataset of sim/calibration/nccl_tests.csv it was
// fitted to (minimax relative error over its rows of 16 MiB .. 8 GiB; docs/sim-calibration.md).

Link nvlink4() {
  // ring over NVLink 4 / NVSwitch: fitted to H2-AG (all_gather, NCCL 2.28.7), 353 GB/s busbw,
  // a little below the "~370 GB/s effective NVLink bandwidth" NVIDIA quotes for ring
  // (nccl-tests #212, #309). LL: fitted to H1's 1-8 MiB rows (NCCL uses RING/LL there).
  Link l;
  l.name = "NVLink4";
  l.alpha = 4.73 * us;
  l.bandwidth = 353 * GB;
  l.ll_alpha = 1.53 * us;
  l.ll_efficiency = 0.815;
  return l;
}

void add(Topology& t, CollKind kind, const char* algorithm, int nodes, double alpha, double bandwidth,
         const char* dataset) {
  t.calibration.push_back({kind, algorithm, nodes, alpha, bandwidth, dataset});
}

// A preset of one node of 8 GPUs linked by `intra`; `inter` copies it (for ranks past the node).
Topology one_node(const char* name, const char* description, double gpu_flops, const Link& intra) {
  Topology t;
  t.name = name;
  t.description = description;
  t.gpus_per_node = 8;
  t.gpu_flops = gpu_flops;
  t.intra = intra;
  t.inter = t.intra;
  t.launch_overhead = kLaunch;
  return t;
}

void h100_node_calibration(Topology& t) {
  // NVLink SHARP all-reduce (NCCL's default on one H100 node from 2 MB up): each GPU moves
  // (n+1)/n of the buffer each way through the switch's multimem operations at 298.6 GB/s,
  // i.e. busbw 464.5 GB/s on 8 GPUs (H1 plateau 479.7); 2 steps (reduce, multicast).
  add(t, CollKind::AllReduce, "nvls", 1, 28.49 * us, 298.6 * GB, "H1");
  add(t, CollKind::AllGather, "ring", 1, 4.73 * us, 353 * GB, "H2-AG");
  add(t, CollKind::ReduceScatter, "ring", 1, 3.17 * us, 351 * GB, "H2-RS");
}

Topology h100_node() {
  Topology t = one_node("8xH100",
                        "one node of 8 H100 SXM GPUs, NVLink 4 through NVSwitch with NVLink SHARP (DGX/HGX H100)",
                        989e12,  // H100 SXM, dense BF16
                        nvlink4());
  h100_node_calibration(t);
  t.host_link_bandwidth = kPcie5x16;
  t.gpu_memory = kH100Memory;
  return t;
}

Topology a100_node() {
  // ring over NVLink 3: A1 (OCI BM.GPU4.8, all_reduce 1 MiB .. 8 GiB, plateau 235 GB/s);
  // LL fitted to A1's 1-8 MiB rows and its small-message floor (64 B .. 32 KiB: ~32 us).
  Topology t = one_node("8xA100",
                        "one node of 8 A100 SXM 80 GB GPUs, NVLink 3 through NVSwitch (DGX/HGX A100), no NVLink SHARP",
                        312e12,  // A100 SXM, dense BF16
                        {"NVLink3", 8.29 * us, 235.9 * GB, 1.84 * us, 0.261});
  add(t, CollKind::AllReduce, "ring", 1, 8.29 * us, 235.9 * GB, "A1");
  t.host_link_bandwidth = kPcie4x16;
  t.gpu_memory = kA100Memory;
  return t;
}

Topology pcie_node() {
  // Weak data (docs/sim-calibration.md, "8xPCIe"): the ring bandwidth inside one domain is
  // P3 (4x RTX 4090, PCIe Gen4, P2P on: 25.9 GB/s busbw); a ring over both domains crosses
  // the CPU interconnect and reaches 0.8 of that (P2: 8 GPUs 28 against 4 GPUs 35 GB/s on
  // a dual-socket Gen5 host), 20.7 GB/s. alpha: the 4-GPU Gen5 latency of P1 (ASUS box:
  // 2 MB in 152 us, 32 MB in 1790 us -> ~43 us at 6 steps).
  Topology t = one_node("8xPCIe",
                        "one node of 8 GPUs on PCIe 4.0 x16, no NVLink, two domains (CPU sockets or switches) of 4 GPUs",
                        165e12,  // RTX 4090 (the calibration's GPUs), dense BF16 with FP32 accumulate
                        {"PCIe4", 5.5 * us, 25.87 * GB, 1.5 * us, 0.5});
  t.gpus_per_domain = 4;
  t.cross_domain_bandwidth = 20.7 * GB;
  add(t, CollKind::AllReduce, "ring", 1, 5.5 * us, 25.87 * GB, "P3");
  t.host_link_bandwidth = kPcie4x16;
  t.gpu_memory = kRtx4090Memory;
  return t;
}

Topology h100_ib(int nodes) {
  Topology t = h100_node();
  t.name = std::to_string(nodes) + "x8xH100-IB";
  t.description = std::to_string(nodes) +
                  " nodes of 8 H100 SXM (NVLink 4), one 400 Gb/s NDR InfiniBand NIC per GPU, rail-optimised fabric";
  t.nodes = nodes;
  // The network as a ring sees it: ring step ~6.4 us across nodes (N7-AG 6.48, N10-AG 6.28)
  // and the bus bandwidth of 8 NICs with out-of-the-box NCCL, 320 GB/s (8 GiB plateaus of
  // N6 324.5, N7 330.9, N8 320.7, N10 316.3; 8 x 40 GB/s). It is the ceiling beyond the
  // calibrated node counts. LL: fitted to N1, N7 and N8's 1-8 MiB rows.
  t.inter = {"IB-NDR400x8", 6.4 * us, 320 * GB, 3.68 * us, 0.218};
  t.nics_per_node = 8;
  t.nic_bandwidth = 48 * GB;  // one NDR NIC: "46-48 GB/s" (nccl-tests #290); N10 1 GPU/node 48.9
  // All-reduce across nodes: NCCL's NVLSTree (NVLS inside each node, a tree across nodes).
  // Two nodes exchange each half once, so the busbw exceeds the NICs' (N1: 468 GB/s);
  // from 4 nodes on it is NIC-bound like a ring.
  add(t, CollKind::AllReduce, "nvls_tree", 2, 29.85 * us, 429.7 * GB, "N1");
  add(t, CollKind::AllReduce, "nvls_tree", 4, 28.77 * us, 299.0 * GB, "N7-AR");
  add(t, CollKind::AllReduce, "nvls_tree", 8, 33.22 * us, 312.0 * GB, "N8-default");
  add(t, CollKind::AllReduce, "nvls_tree", 10, 52.99 * us, 350.3 * GB, "N10-AR");
  // All-gather and reduce-scatter across nodes: ring.
  add(t, CollKind::AllGather, "ring", 4, 6.48 * us, 298.7 * GB, "N7-AG");
  add(t, CollKind::AllGather, "ring", 10, 6.28 * us, 277.0 * GB, "N10-AG");
  add(t, CollKind::ReduceScatter, "ring", 10, 8.43 * us, 299.5 * GB, "N10-RS");
  return t;
}

int nodes_spanned(const Topology& t, int nranks) { return (nranks + t.gpus_per_node - 1) / t.gpus_per_node; }

struct Params {
  double alpha = 0.0;
  double bandwidth = 0.0;
};

// The calibrated parameters of (kind, algorithm) over `nodes` nodes. One node: the entry for
// one node. Several: linear interpolation in the node count between calibrated counts; the
// nearest count below the first; beyond the last, its alpha per step with the bandwidth
// capped by the network's ring bandwidth (t.inter.bandwidth, the NIC limit).
bool calibrated(const Topology& t, CollKind kind, const std::string& algorithm, int nodes, Params* out) {
  const Calibration* below = nullptr;
  const Calibration* above = nullptr;
  for (const auto& c : t.calibration) {
    if (c.kind != kind || c.algorithm != algorithm) continue;
    if ((c.nodes == 1) != (nodes == 1)) continue;  // inside a node and across nodes are separate regimes
    if (c.nodes == nodes) {
      *out = {c.alpha, c.bandwidth};
      return true;
    }
    if (c.nodes < nodes && (!below || c.nodes > below->nodes)) below = &c;
    if (c.nodes > nodes && (!above || c.nodes < above->nodes)) above = &c;
  }
  if (!below && !above) return false;
  if (below && above) {
    const double w = double(nodes - below->nodes) / (above->nodes - below->nodes);
    *out = {below->alpha + w * (above->alpha - below->alpha), below->bandwidth + w * (above->bandwidth - below->bandwidth)};
  } else if (above) {
    *out = {above->alpha, above->bandwidth};
  } else {
    *out = {below->alpha, std::min(below->bandwidth, t.inter.bandwidth > 0 ? t.inter.bandwidth : below->bandwidth)};
  }
  return true;
}

// A point-to-point path: inside a node the GPU's link (NVLink or PCIe) at the rate a ring
// sees; across nodes one NIC.
Params p2p_path(const Topology& t, bool across_nodes) {
  if (!across_nodes) return {t.intra.alpha, t.intra.bandwidth};
  return {t.inter.alpha, t.nic_bandwidth > 0 ? t.nic_bandwidth : t.inter.bandwidth};
}

// One way to run a collective: time = fixed + per_byte * bytes.
struct Candidate {
  double fixed = 0.0;
  double per_byte = 0.0;
  const char* algorithm = "";
  const char* protocol = "";
};

int ring_steps(CollKind kind, int n) {
  return kind == CollKind::AllReduce || kind == CollKind::Barrier ? 2 * (n - 1) : n - 1;
}

// The per-rank data volume of a ring, as a multiple of the collective's size.
double ring_volume(CollKind kind, int n) {
  switch (kind) {
    case CollKind::AllReduce:
    case CollKind::Barrier: return 2.0 * (n - 1) / n;
    case CollKind::ReduceScatter:
    case CollKind::AllGather: return static_cast<double>(n - 1) / n;
    default: return 1.0;  // broadcast, reduce: a pipelined ring forwards the whole buffer
  }
}

// The ring's Simple-protocol parameters for `kind` inside one node.
Params intra_ring(const Topology& t, CollKind kind, int ranks_in_node) {
  Params p{t.intra.alpha, t.intra.bandwidth};
  calibrated(t, kind, "ring", 1, &p);
  if (t.gpus_per_domain > 0 && ranks_in_node > t.gpus_per_domain && t.cross_domain_bandwidth > 0)
    p.bandwidth = std::min(p.bandwidth, t.cross_domain_bandwidth);
  return p;
}

void push_with_ll(std::vector<Candidate>& out, const Topology& t, const Link& ll_link, int steps, double alpha,
                  double volume, double bandwidth, const char* algorithm, const char* ll_algorithm) {
  out.push_back({t.launch_overhead + steps * alpha, volume / bandwidth, algorithm, "Simple"});
  if (ll_link.ll_efficiency > 0)
    out.push_back({t.launch_overhead + steps * ll_link.ll_alpha, volume / (ll_link.ll_efficiency * bandwidth),
                   ll_algorithm, "LL"});
}

std::vector<Candidate> candidates(const Topology& t, CollKind kind, int n, bool nvls = true) {
  std::vector<Candidate> out;
  const int nodes = nodes_spanned(t, n);
  const CollKind k = kind == CollKind::Barrier ? CollKind::AllReduce : kind;
  if (kind == CollKind::SendRecv) {
    const Params p = p2p_path(t, nodes > 1);
    out.push_back({t.launch_overhead + p.alpha, 1.0 / p.bandwidth, "direct", "Simple"});
    return out;
  }
  const int steps = ring_steps(k, n);
  const double volume = ring_volume(k, n);
  const Params ring1 = intra_ring(t, k, std::min(n, t.gpus_per_node));
  if (nodes == 1) {
    push_with_ll(out, t, t.intra, steps, ring1.alpha, volume, ring1.bandwidth, "ring", "ring");
    Params nv;
    if (nvls && k == CollKind::AllReduce && calibrated(t, k, "nvls", 1, &nv))  // NVLS: Simple protocol only
      out.push_back({t.launch_overhead + 2 * nv.alpha, (n + 1.0) / n / nv.bandwidth, "nvls", "Simple"});
    return out;
  }
  Params tree;
  if (nvls && k == CollKind::AllReduce && calibrated(t, k, "nvls_tree", nodes, &tree)) {
    // NCCL's choice for all-reduce across NVLS nodes: NVLSTree (Simple); small messages run
    // its Tree with the LL protocol. Steps: NVLS reduce and multicast, then up and down a
    // tree of depth ceil(log2 nodes).
    const int tree_steps = 2 + 2 * static_cast<int>(std::ceil(std::log2(static_cast<double>(nodes))));
    push_with_ll(out, t, t.inter, tree_steps, tree.alpha, volume, tree.bandwidth, "nvls_tree", "tree");
    return out;
  }
  Params ring{t.inter.alpha, t.inter.bandwidth};
  if (!calibrated(t, k, "ring", nodes, &ring)) calibrated(t, CollKind::AllGather, "ring", nodes, &ring);
  ring.bandwidth = std::min(ring.bandwidth, ring1.bandwidth);  // a ring is as fast as its slowest link
  push_with_ll(out, t, t.inter, steps, ring.alpha, volume, ring.bandwidth, "ring", "ring");
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// NCCL's tuner: src/graph/tuning.cc of NCCL 2.2x (ncclTunerConstantsDefaults,
// ncclTopoTuneModel, ncclTopoGetAlgoTime; the version with PAT and nvlsEfficiency), on the
// graph a spec implies. sim/calibration/fit.py holds the same tables (nccl_table); the
// coefficients fitted on top are SpecCoefficients. docs/sim-calibration.md, "NCCL's tuner as
// the spine".

namespace {

enum TunerAlgo { kTree, kRing, kNvls, kNvlsTree, kTunerAlgos };
enum TunerProto { kLL, kLL128, kSimple, kTunerProtos };
enum TunerHw { kNvlink, kPci, kNet };
const char* const kTunerAlgoName[kTunerAlgos] = {"tree", "ring", "nvls", "nvls_tree"};
const char* const kTunerProtoName[kTunerProtos] = {"LL", "LL128", "Simple"};

// latencies, us
constexpr double kBaseLat[kTunerAlgos][kTunerProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}};
constexpr double kHwLat[3][kTunerAlgos][kTunerProtos] = {
    /* NVLink */ {{.6, 1.25, 4.0}, {.6, 1.9, 3.4}, {0, 0, 25}, {0, 0, 25}},
    /* PCI */ {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 0}, {0, 0, 0}},
    /* NET */ {{5.0, 8.5, 14}, {2.7, 4.0, 14.0}, {0, 0, 18}, {0, 0, 20.9}}};
// bandwidth caps, GB/s: [Ampere, Hopper][1 node, 2 nodes, more]. LL across nodes depends on the
// host CPU: the x86 Intel row (DGX H100 and A100 hosts).
constexpr double kLLMaxOneNode[2] = {87.7, 141.0};
constexpr double kLLMaxIntel[3] = {39.0, 39.0, 20.4};
constexpr double kRingLL128PerCh[2][3] = {{20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}};
constexpr double kTreeLL128PerCh[2][3] = {{20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}};
constexpr double kTreePerCh[2][3] = {{24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}};
constexpr double kNvlsTreePerCh[2][3] = {{24.0, 23.6, 17.8}, {0.0, 57.7, 45.5}};
constexpr double kNvlsEfficiency[2] = {0.0, 0.85};
// per protocol, by log2(bytes / 64) from 64 B to 256 MiB
constexpr double kTreeCorrection[kTunerProtos][24] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};
// The graph NCCL's search finds, as the spec implies it: 16 channels (NVLS: nvlsChannels, "NVLS
// should not need more than 16 channels"), sharing the GPU's link inside a node and the node's
// NICs across nodes.
constexpr int kChannels = 16;
constexpr double kNetOverheadUs = 1.0;  // getNetOverhead, x86 Intel (x3 for Simple)

int log2i(uint64_t x) {
  int l = 0;
  while (x > 1) {
    x >>= 1;
    ++l;
  }
  return l;
}

struct TunerEntry {
  TunerAlgo algo;
  TunerProto proto;
  double lat_us, bw_gbs;
};

// ncclTopoTuneModel and ncclTopoGetAlgoTime for one call (all-reduce, reduce-scatter,
// all-gather, broadcast, reduce).
std::vector<TunerEntry> tuner_entries(const Topology& t, CollKind kind, uint64_t bytes, int n, bool nvls) {
  const Topology::Tuner& g = t.tuner;
  const int arch = g.compute_capability >= 90 ? 1 : 0;
  const int nodes = (n + t.gpus_per_node - 1) / t.gpus_per_node;
  const int ppn = n / nodes;
  double intra = g.link_gbs;
  if (t.gpus_per_domain > 0 && std::min(n, t.gpus_per_node) > t.gpus_per_domain) intra *= g.cross_domain_factor;
  const double inter = nodes > 1 ? g.net_gbs : intra;
  const TunerHw intra_hw = g.nvlink ? kNvlink : kPci;
  const bool all_reduce = kind == CollKind::AllReduce;
  const bool rs_ag = kind == CollKind::ReduceScatter || kind == CollKind::AllGather;
  const int nsteps = all_reduce ? 2 * (n - 1) : rs_ag ? n - 1 : n;
  const int idx = std::min(nodes, 3) - 1;
  const double ll_max = nodes == 1 ? kLLMaxOneNode[arch] : kLLMaxIntel[idx];
  std::vector<TunerAlgo> algos = {kRing};
  if (all_reduce) {
    algos.push_back(kTree);
    if (g.nvls && nvls) algos.push_back(nodes == 1 ? kNvls : kNvlsTree);
  }
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<TunerEntry> out;
  for (TunerAlgo a : algos) {
    for (int pi = 0; pi < kTunerProtos; ++pi) {
      const TunerProto p = static_cast<TunerProto>(pi);
      if ((a == kNvls || a == kNvlsTree) && p != kSimple) continue;
      if (p == kLL128 && !g.nvlink) continue;  // LL128 only over NVLink (typeIntra <= PATH_NVB)
      // the graph's per-channel rates (src/graph/search.cc, ncclTopoCompute): the search starts
      // with bwIntra = bwInter and raises both together for a ring; only a tree's bwIntra may
      // grow, to twice bwInter
      const double g_inter = std::min(inter, intra);
      const double g_intra = nodes == 1 ? intra : std::min(intra, (a == kTree ? 2.0 : 1.0) * g_inter);
      double bw = nodes <= 2 ? g_intra : g_inter;
      if (a == kNvls || a == kNvlsTree) {
        const double ib = intra * kNvlsEfficiency[arch] * (kChannels - 1) / kChannels * 2.0;
        const double xb = nodes > 1 ? inter * ((nodes <= 2 && a == kNvlsTree) ? 2.0 : 1.0) : inf;
        const double cap = a == kNvlsTree ? kChannels * kNvlsTreePerCh[arch][idx] : inf;
        bw = std::min({ib, xb, cap});
      }
      double bus = bw;
      if (a == kRing && p == kLL) bus = std::min(ll_max, bus * .5);
      if (a == kRing && p == kLL128) bus = std::min(bus * 0.92, kChannels * kRingLL128PerCh[arch][idx]);
      if (a == kTree) bus = std::min(bus * .92, kChannels * kTreePerCh[arch][idx]);
      if (a == kTree && p == kLL) bus = std::min(bus / 3.8, ll_max);
      if (a == kTree && p == kLL128)
        bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), kChannels * kTreeLL128PerCh[arch][idx]);
      double algbw = bus * (a == kTree ? .5 : static_cast<double>(n) / nsteps);
      double lat = kBaseLat[a][p];
      const double intra_lat = kHwLat[intra_hw][a][p];
      const double inter_lat = kHwLat[kNet][ppn == 1 ? kTree : a][p];
      if (a == kRing) {
        if (!all_reduce && !rs_ag) {
          // broadcast, reduce: a chain of nsteps hops (tuning.cc's branch without sameChannels;
          // Simple counts the tree's hop latency)
          lat += nsteps * kHwLat[nodes == 1 ? intra_hw : kNet][p == kSimple ? kTree : kRing][p];
        } else {
          double il = intra_lat;
          if (nodes > 1) il = std::max(il, kNetOverheadUs * (p == kSimple ? 3 : 1));
          const int ninter = nodes == 1 ? 0 : all_reduce ? 2 * (nodes - 1) : nodes - 1;
          lat += (nsteps - ninter) * il + ninter * inter_lat;
        }
      } else if (a == kTree) {
        lat += 2 * ((ppn - 1) * intra_lat + log2i(nodes) * inter_lat);
      } else if (a == kNvls) {
        lat = intra_lat;
      } else {
        lat += intra_lat + 2 * log2i(nodes) * inter_lat;
      }
      const int ls = log2i(bytes >> 6);
      if (a == kTree && ls < 23) algbw *= kTreeCorrection[p][ls];
      if (a == kRing && p == kSimple && nodes > 1 && all_reduce &&
          bytes / (static_cast<uint64_t>(kChannels) * n) >= 64)
        lat *= 1.4;  // "plateau effect of ring" (compute capability >= 8.0)
      out.push_back({a, p, lat, algbw});
    }
  }
  return out;
}

double nccl_estimate_us(const TunerEntry& e, uint64_t bytes) {
  return e.lat_us + static_cast<double>(bytes) / (1000.0 * e.bw_gbs);
}

// What the call takes on the platform: NCCL's estimate with the fitted coefficients on top.
double tuner_seconds(const Topology& t, const TunerEntry& e, uint64_t bytes, int n) {
  const Topology::Tuner& g = t.tuner;
  const int nodes = (n + t.gpus_per_node - 1) / t.gpus_per_node;
  const double k = e.proto == kLL ? g.k_ll : e.proto == kLL128 ? g.k_ll128 : g.k_simple;
  double eta = (e.algo == kNvls || e.algo == kNvlsTree) ? g.eta_nvls : nodes > 1 ? g.eta_net : g.eta_intra;
  if (e.proto != kSimple) eta *= g.eta_ll;
  return t.launch_overhead + (k * e.lat_us + static_cast<double>(bytes) / (1000.0 * e.bw_gbs * eta)) * us;
}

}  // namespace

std::vector<TunerCandidate> nccl_tuner_table(const Topology& t, CollKind kind, uint64_t bytes, int n, bool nvls) {
  std::vector<TunerCandidate> out;
  if (!t.tuner.on || n <= 1 || kind == CollKind::SendRecv) return out;
  const CollKind k = kind == CollKind::Barrier ? CollKind::AllReduce : kind;
  for (const TunerEntry& e : tuner_entries(t, k, bytes, n, nvls))
    out.push_back({kTunerAlgoName[e.algo], kTunerProtoName[e.proto], e.lat_us, e.bw_gbs, nccl_estimate_us(e, bytes)});
  return out;
}

// ---------------------------------------------------------------------------------------
// Prediction from the spec sheet (docs/sim-calibration.md). The formulas are those of
// sim/calibration/fit.py's derived() and cost(); tests/sim/test_calibration.cpp checks that both
// give the same held-out errors.

SpecCoefficients spec_coefficients() {
  // fitted on all platforms: sim/calibration/holdout.csv, row "(none)"
  SpecCoefficients c;
  c.k_ll = 1.45435;
  c.k_ll128 = 1.87887;
  c.k_simple = 1.73313;
  c.eta_intra = 1.00832;
  c.eta_net = 0.896789;
  c.eta_nvls = 0.778447;
  c.eta_ll = 0.678413;
  return c;
}

namespace {

// NCCL's rating of a GPU's links (src/graph/topo.h): SM90_NVLINK_BW and SM80_NVLINK_BW per
// NVLink, GB/s; PCIe 4.0 x16 in NCCL's PCI table (Gen3 x16 = PCI_BW = 12)
constexpr double kNcclNvlinkHopper = 20.6, kNcclNvlinkAmpere = 20.0, kNcclPcie4x16 = 24.0;

PlatformSpec nvlink_node(const char* name, const char* description, const char* link, double link_gbs, bool nvls,
                         double flops, int compute_capability, int nvlinks) {
  PlatformSpec s;
  s.name = name;
  s.description = description;
  s.link_name = link;
  s.link_bandwidth = link_gbs * GB;
  s.nvls = nvls;
  s.gpu_flops = flops;
  s.compute_capability = compute_capability;
  s.nvlink = true;
  s.nccl_link_bandwidth = nvlinks * (compute_capability >= 90 ? kNcclNvlinkHopper : kNcclNvlinkAmpere) * GB;
  return s;
}

PlatformSpec h100_spec() {
  // NVLink 4: 18 links x 25 GB/s per direction = 450 GB/s per GPU; PCIe 5.0 x16 to the host
  PlatformSpec s = nvlink_node("8xH100", "one node of 8 H100 SXM GPUs, NVLink 4 through NVSwitch with NVLink SHARP",
                               "NVLink4", 450, true, 989e12, 90, 18);
  s.host_link_bandwidth = kPcie5x16;
  s.gpu_memory = kH100Memory;
  return s;
}

PlatformSpec a100_spec() {
  // NVLink 3: 12 links x 25 GB/s per direction = 300 GB/s per GPU; PCIe 4.0 x16 to the host
  PlatformSpec s = nvlink_node("8xA100", "one node of 8 A100 SXM GPUs, NVLink 3 through NVSwitch, no NVLink SHARP",
                               "NVLink3", 300, false, 312e12, 80, 12);
  s.host_link_bandwidth = kPcie4x16;
  s.gpu_memory = kA100Memory;
  return s;
}

PlatformSpec h200_spec() {
  // H200 SXM: the H100's NVLink 4 (450 GB/s) and NVSwitch with NVLink SHARP, same BF16 peak
  PlatformSpec s = h100_spec();
  s.name = "8xH200";
  s.description = "one node of 8 H200 SXM GPUs, NVLink 4 through NVSwitch with NVLink SHARP (HGX H200)";
  s.gpu_memory = kH200Memory;
  return s;
}

PlatformSpec multi_node(PlatformSpec s, const std::string& name, int nodes, int nics, double nic_gbit,
                        const std::string& fabric) {
  s.name = name;
  s.description = std::to_string(nodes) + " nodes: " + s.description + "; " + std::to_string(nics) + " x " +
                  std::to_string(static_cast<int>(nic_gbit)) + " Gb/s " + fabric + " per node";
  s.nodes = nodes;
  s.nics_per_node = nics;
  s.nic_line_rate = nic_gbit / 8 * GB;
  return s;
}

// "<nodes>x<per_node>x<gpu>-<fabric>", e.g. 4x8xH100-IB
bool parse_multi(const std::string& name, const char* gpu, int* nodes, std::string* fabric, int per_node = 8) {
  char rest[32] = {0};
  const std::string mid = "x" + std::to_string(per_node) + "x" + gpu + "-";
  const std::string fmt = "%d" + mid + "%31s";
  if (std::sscanf(name.c_str(), fmt.c_str(), nodes, rest) != 2 || *nodes < 1) return false;
  *fabric = rest;
  return name == std::to_string(*nodes) + mid + *fabric;
}

[[noreturn]] void unknown_preset(const std::string& name) {
  std::ostringstream os;
  os << "unknown topology '" << name << "'; presets:";
  for (const auto& n : topology_preset_names()) os << " " << n;
  os << " (N nodes, e.g. 4x8xH100-IB)";
  fail(Status::InvalidArgument, os.str());
}

}  // namespace

PlatformSpec platform_spec(const std::string& name) {
  if (name == "8xH100" || name == "h100") return h100_spec();
  if (name == "8xH200" || name == "h200") return h200_spec();
  if (name == "8xA100" || name == "a100") return a100_spec();
  int nodes = 0;
  std::string fabric;
  if (name == "4xGH200" || name == "gh200" ||
      (parse_multi(name, "GH200", &nodes, &fabric, 4) && fabric == "Slingshot")) {
    // GH200 Grace Hopper superchips, four to a node (HPE Cray EX254n, as CSCS's Alps; NVIDIA's
    // quad GH200 MGX): each Hopper GPU has the H100's 18 NVLink 4 links, 6 to each of the 3
    // others (all-to-all, no NVSwitch, so no NVLink SHARP), 450 GB/s per direction in all, and
    // the H100's dense BF16 peak. Its host memory (the Grace CPU's LPDDR5X) is reached over
    // NVLink-C2C at 900 GB/s, 450 GB/s per direction, instead of PCIe.
    PlatformSpec s = nvlink_node("4xGH200",
                                 "one node of 4 GH200 Grace Hopper superchips, NVLink 4 all-to-all (6 links a pair), "
                                 "host memory over NVLink-C2C",
                                 "NVLink4", 450, false, 989e12, 90, 18);
    s.gpus_per_node = 4;
    s.host_link_bandwidth = kNvlinkC2C;
    s.gpu_memory = kGH200Memory;
    // N such nodes over HPE Slingshot 11, one 200 Gb/s NIC per GPU (CSCS Alps: "four
    // Grace-Hopper modules and four corresponding network interface cards (NICs)")
    if (nodes > 0) return multi_node(s, name, nodes, 4, 200, "HPE Slingshot 11");
    return s;
  }
  if (name == "8xPCIe" || name == "pcie") {
    // PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s per direction; two domains
    // of 4 GPUs, a ring across them keeps 0.8 of its bandwidth (NVIDIA/nccl #1639)
    PlatformSpec s = nvlink_node("8xPCIe", "one node of 8 GPUs on PCIe 4.0 x16, two domains of 4 GPUs", "PCIe4", 31.5,
                                 false, 165e12, 89, 0);  // RTX 4090: Ada, compute capability 8.9
    s.nvlink = false;
    s.nccl_link_bandwidth = kNcclPcie4x16 * GB;
    s.gpus_per_domain = 4;
    s.cross_domain_factor = 0.8;
    s.host_link_bandwidth = kPcie4x16;
    s.gpu_memory = kRtx4090Memory;
    return s;
  }
  // "<N>x8x<gpu>-<fabric>": N nodes of a GPU's 8-GPU node over one of the networks it ships with
  struct Network {
    const char* gpu;
    PlatformSpec (*node)();
    const char* fabric;
    int nics;
    double nic_gbit;
    const char* label;
  };
  static const Network kNetworks[] = {
      {"H100", h100_spec, "IB", 8, 400, "NDR InfiniBand"},
      {"H100", h100_spec, "RoCE", 16, 200, "RoCE v2"},  // OCI BM.GPU.H100.8
      {"H100", h100_spec, "EFA", 32, 100, "AWS EFA"},   // AWS p5.48xlarge
      // HGX H200 nodes with the H100 generation's networks; RoCE as OCI's H100 shape, taken for
      // its H200 one, whose NICs the H6 table does not print (the tuner prices the node's
      // total, so 8 x 400G gives the same costs)
      {"H200", h200_spec, "IB", 8, 400, "NDR InfiniBand"},
      {"H200", h200_spec, "RoCE", 16, 200, "RoCE v2"},
      {"A100", a100_spec, "IB", 8, 200, "HDR InfiniBand"},
      {"A100", a100_spec, "EFA", 4, 100, "AWS EFA"},  // AWS p4d/p4de.24xlarge: 400 Gbps a node
  };
  for (const Network& n : kNetworks)
    if (parse_multi(name, n.gpu, &nodes, &fabric) && fabric == n.fabric)
      return multi_node(n.node(), name, nodes, n.nics, n.nic_gbit, n.label);
  unknown_preset(name);
}

Topology topology_from_spec(const PlatformSpec& s, const SpecCoefficients& c) {
  Topology t;
  t.name = s.name;
  t.description = s.description + " (predicted from its spec sheet)";
  t.gpus_per_node = s.gpus_per_node;
  t.gpu_flops = s.gpu_flops;
  t.host_link_bandwidth = s.host_link_bandwidth;
  t.gpu_memory = s.gpu_memory;
  t.launch_overhead = kLaunch;
  t.nodes = s.nodes;
  Topology::Tuner& n = t.tuner;
  n.on = true;
  n.compute_capability = s.compute_capability;
  n.nvlink = s.nvlink;
  n.nvls = s.nvls;
  n.link_gbs = s.nccl_link_bandwidth / GB;
  // a one-node preset asked for more ranks than a node: its link stands in for the network,
  // as intra does for inter on the calibrated presets
  n.net_gbs = s.nodes > 1 ? s.nics_per_node * s.nic_line_rate / GB : n.link_gbs;
  n.cross_domain_factor = s.cross_domain_factor;
  n.k_ll = c.k_ll;
  n.k_ll128 = c.k_ll128;
  n.k_simple = c.k_simple;
  n.eta_intra = c.eta_intra;
  n.eta_net = c.eta_net;
  n.eta_nvls = c.eta_nvls;
  n.eta_ll = c.eta_ll;
  // Point to point (p2p_cost): a GPU's link at the rate the tuner's ring gets from it, one
  // NIC's share across nodes. The collectives do not use these.
  const double ring_bw = c.eta_intra * s.nccl_link_bandwidth;
  t.intra = {s.link_name, c.k_simple * kHwLat[s.nvlink ? kNvlink : kPci][kRing][kSimple] * us, ring_bw, 0.0, 0.0};
  t.inter = t.intra;
  if (s.gpus_per_domain > 0) {
    t.gpus_per_domain = s.gpus_per_domain;
    t.cross_domain_bandwidth = s.cross_domain_factor * ring_bw;
  }
  if (s.nodes > 1) {
    const double net_bw = c.eta_net * s.nics_per_node * s.nic_line_rate;
    t.inter = {s.link_name + "+" + std::to_string(s.nics_per_node) + "NIC", c.k_simple * kHwLat[kNet][kRing][kSimple] * us,
               net_bw, 0.0, 0.0};
    t.nics_per_node = s.nics_per_node;
    t.nic_bandwidth = net_bw / s.gpus_per_node;  // a GPU's share
  }
  return t;
}

std::vector<std::string> topology_preset_names() {
  return {"8xH100",        "8xA100",       "8xPCIe",      "Nx8xH100-IB",  "8xH200",
          "Nx8xH100-RoCE", "Nx8xH100-EFA", "Nx8xA100-IB", "4xGH200",      "Nx4xGH200-Slingshot",
          "8xA100-40GB",   "Nx8xH200-IB",  "Nx8xH200-RoCE", "Nx8xA100-EFA"};
}

Topology topology_preset(const std::string& name) {
  if (name == "8xH100" || name == "h100") return h100_node();
  if (name == "8xA100" || name == "a100") return a100_node();
  if (name == "8xA100-40GB") {
    Topology t = a100_node();
    t.name = name;
    t.description = "one node of 8 A100 SXM 40 GB GPUs, NVLink 3 through NVSwitch (DGX/HGX A100 40GB), no NVLink SHARP";
    t.gpu_memory = kA100Memory40;
    return t;
  }
  if (name == "8xPCIe" || name == "pcie") return pcie_node();
  int nodes = 0;
  std::string fabric;
  if (parse_multi(name, "H100", &nodes, &fabric) && fabric == "IB") return h100_ib(nodes);
  // the presets without calibration data of their own: predicted from the spec sheet
  return topology_from_spec(platform_spec(name), spec_coefficients());
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

double algbw(uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0; }

double busbw(CollKind kind, uint64_t bytes, double seconds, int nranks) {
  return algbw(bytes, seconds) * busbw_factor(kind, nranks);
}

uint64_t bytes_sent_per_rank(CollKind kind, uint64_t bytes, int n) {
  if (n <= 1) return 0;
  switch (kind) {
    case CollKind::AllReduce:
    case CollKind::ReduceScatter:
    case CollKind::AllGather: return static_cast<uint64_t>(ring_volume(kind, n) * static_cast<double>(bytes));
    case CollKind::Broadcast:
    case CollKind::Reduce: return bytes;  // pipelined ring: every rank forwards the whole buffer once
    default: return 0;
  }
}

bool AlgorithmFilter::allows(const std::string& algorithm) const {
  if (names.empty() || algorithm == "direct" || algorithm == "local") return true;
  const bool listed = std::find(names.begin(), names.end(), algorithm) != names.end();
  return exclude ? !listed : listed;
}

AlgorithmFilter parse_algorithms(const std::string& spec) {
  AlgorithmFilter f;
  f.spec = spec;
  std::string s = spec;
  s.erase(std::remove_if(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); }), s.end());
  if (s.empty()) return f;
  if (s[0] == '^') {
    f.exclude = true;
    s.erase(0, 1);
  }
  std::stringstream in(s);
  for (std::string name; std::getline(in, name, ',');) {
    std::string low;
    for (unsigned char c : name) low += static_cast<char>(std::tolower(c));
    if (low == "ring" || low == "tree" || low == "nvls") {
      f.names.push_back(low);
    } else if (low == "nvlstree" || low == "nvls_tree") {
      f.names.push_back("nvls_tree");
    } else {
      ACCEL_CHECK(false, Status::InvalidArgument, "unknown algorithm '", name, "' in '", spec,
                  "': the simulator models Ring, Tree, NVLS and NVLSTree (NCCL_ALGO's names; ^ excludes)");
    }
  }
  ACCEL_CHECK(!f.names.empty(), Status::InvalidArgument, "no algorithm named in '", spec, "'");
  return f;
}

Estimate collective_cost(const Topology& t, CollKind kind, uint64_t bytes, int n, bool nvls, const AlgorithmFilter& only) {
  Estimate e;
  if (n <= 1) {
    e.algorithm = "local";
    e.seconds = kind == CollKind::Barrier ? 0.0 : t.launch_overhead;
    return e;
  }
  if (t.tuner.on && kind != CollKind::SendRecv) {
    // NCCL's choice among the algorithms allowed (NCCL_ALGO zeroes the others' bandwidth),
    // priced with the fitted coefficients
    const CollKind k = kind == CollKind::Barrier ? CollKind::AllReduce : kind;
    const uint64_t b = kind == CollKind::Barrier ? 0 : bytes;
    const std::vector<TunerEntry> entries = tuner_entries(t, k, b, n, nvls);
    const TunerEntry* best = nullptr;
    for (const TunerEntry& c : entries)
      if (only.allows(kTunerAlgoName[c.algo]) && (!best || nccl_estimate_us(c, b) < nccl_estimate_us(*best, b)))
        best = &c;
    if (!best) {
      std::string have;
      for (const TunerEntry& c : entries)
        if (have.find(kTunerAlgoName[c.algo]) == std::string::npos)
          have += std::string(have.empty() ? "" : ", ") + kTunerAlgoName[c.algo];
      ACCEL_CHECK(false, Status::InvalidArgument, "no algorithm for ", coll_name(kind), " of ", bytes, " bytes over ",
                  n, " ranks on ", t.name, ": the algorithms allowed ('", only.spec, "') exclude the cost model's (", have,
                  ")");
    }
    e.seconds = tuner_seconds(t, *best, b, n);
    e.algorithm = kTunerAlgoName[best->algo];
    e.protocol = kTunerProtoName[best->proto];
    return e;
  }
  const double S = static_cast<double>(bytes);
  bool first = true;
  const std::vector<Candidate> cands = candidates(t, kind, n, nvls);
  for (const Candidate& c : cands) {
    if (!only.allows(c.algorithm)) continue;
    const double seconds = c.fixed + c.per_byte * S;
    if (first || seconds < e.seconds) {
      e.seconds = seconds;
      e.algorithm = c.algorithm;
      e.protocol = c.protocol;
      first = false;
    }
  }
  if (first) {
    std::string have;
    for (const Candidate& c : cands)
      if (have.find(c.algorithm) == std::string::npos) have += std::string(have.empty() ? "" : ", ") + c.algorithm;
    ACCEL_CHECK(false, Status::InvalidArgument, "no algorithm for ", coll_name(kind), " of ", bytes, " bytes over ", n,
                " ranks on ", t.name, ": the algorithms allowed ('", only.spec, "') exclude the cost model's (", have,
                ")");
  }
  return e;
}

double peak_busbw(const Topology& t, CollKind kind, int n) {
  if (n <= 1) return 0.0;
  if (t.tuner.on && kind != CollKind::SendRecv) {
    // the limit of NCCL's choice as the size grows: its bandwidth at 1 TiB, latency left out
    const uint64_t huge = 1ull << 40;
    const CollKind k = kind == CollKind::Barrier ? CollKind::AllReduce : kind;
    const std::vector<TunerEntry> entries = tuner_entries(t, k, huge, n, true);
    const TunerEntry* best = nullptr;
    for (const TunerEntry& c : entries)
      if (!best || nccl_estimate_us(c, huge) < nccl_estimate_us(*best, huge)) best = &c;
    const Topology::Tuner& g = t.tuner;
    const int nodes = (n + t.gpus_per_node - 1) / t.gpus_per_node;
    double eta = (best->algo == kNvls || best->algo == kNvlsTree) ? g.eta_nvls : nodes > 1 ? g.eta_net : g.eta_intra;
    if (best->proto != kSimple) eta *= g.eta_ll;
    return busbw_factor(kind, n) * best->bw_gbs * eta * 1e9;
  }
  double per_byte = 0.0;
  bool first = true;
  for (const Candidate& c : candidates(t, kind, n)) {
    if (first || c.per_byte < per_byte) per_byte = c.per_byte;
    first = false;
  }
  return busbw_factor(kind, n) / per_byte;
}

double p2p_cost(const Topology& t, int src, int dst, uint64_t bytes) {
  // a point-to-point copy uses one direction of the path
  const Params p = p2p_path(t, src / t.gpus_per_node != dst / t.gpus_per_node);
  return t.launch_overhead + p.alpha + static_cast<double>(bytes) / p.bandwidth;
}

StepEstimate estimate_step(const Topology& topo, const std::string& strategy, double params, double tokens, int nranks,
                           int layers, uint64_t bucket_bytes) {
  ACCEL_CHECK(params > 0 && tokens > 0 && nranks >= 1 && layers >= 1 && bucket_bytes > 0, Status::InvalidArgument,
              "estimate_step needs positive params, tokens, ranks, layers and bucket size");
  ACCEL_CHECK(topo.gpu_flops > 0, Status::InvalidArgument, "topology '", topo.name, "' has no GPU FLOP rate");
  ACCEL_CHECK(strategy == "ddp" || strategy == "zero1" || strategy == "zero2" || strategy == "zero3",
              Status::InvalidArgument, "unknown strategy '", strategy, "' (ddp, zero1, zero2, zero3)");
  StepEstimate e;
  const double fwd = 2.0 * params * tokens / (topo.gpu_flops * topo.mfu), bwd = 2.0 * fwd;
  e.compute = fwd + bwd;
  // `total_bytes` moved as pieces of `piece` bytes: (all pieces, the last piece)
  auto pieces = [&](CollKind k, double total_bytes) {
    const double piece = k == CollKind::AllReduce ? static_cast<double>(bucket_bytes) : total_bytes / layers;
    const double n = std::ceil(total_bytes / piece - 1e-9);
    const double last = total_bytes - (n - 1) * piece;
    const double full = collective_cost(topo, k, static_cast<uint64_t>(piece), nranks).seconds;
    const double tail = collective_cost(topo, k, static_cast<uint64_t>(last), nranks).seconds;
    return std::make_pair((n - 1) * full + tail, tail);
  };
  auto hidden = [](std::pair<double, double> c, double window) { return std::max(c.first - window, c.second); };
  if (nranks == 1) {
    e.total = e.compute;
    return e;
  }
  if (strategy == "ddp") {
    auto ar = pieces(CollKind::AllReduce, 4.0 * params);
    e.comm = ar.first;
    e.exposed = hidden(ar, bwd);
  } else if (strategy == "zero3") {
    auto ag = pieces(CollKind::AllGather, 2.0 * params);
    auto rs = pieces(CollKind::ReduceScatter, 2.0 * params);
    e.comm = 2 * ag.first + rs.first;
    e.exposed = hidden(ag, fwd) + hidden({ag.first + rs.first, rs.second}, bwd);
  } else {
    auto rs = pieces(CollKind::ReduceScatter, 2.0 * params);
    auto ag = pieces(CollKind::AllGather, 2.0 * params);
    e.comm = rs.first + ag.first;
    e.exposed = hidden(rs, bwd) + ag.first;
  }
  e.total = e.compute + e.exposed;
  return e;
}

}  // namespace accel::sim
