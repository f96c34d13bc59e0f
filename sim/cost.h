// The simulator's cost model: alpha-beta costs per collective algorithm and link, with
// topology presets calibrated against published nccl-tests measurements
// (docs/sim-calibration.md, reference rows in sim/calibration/nccl_tests.csv). Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accel::sim {

enum class CollKind { AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, Barrier, SendRecv };
const char* coll_name(CollKind k);

// A link class. `alpha` and `bandwidth` are the ring algorithm's costs on it with NCCL's
// Simple protocol: the latency of one ring step (seconds) and the bus bandwidth
// (nccl-tests' busbw, bytes/second) a ring sustains on large messages. They serve every
// collective that has no calibration entry of its own (Topology::calibration).
struct Link {
  std::string name;
  double alpha = 0.0;
  double bandwidth = 0.0;
  // NCCL's low-latency protocols (LL/LL128): seconds per step, and the fraction of the
  // algorithm's Simple-protocol bandwidth they reach. 0 = not modelled on this link.
  double ll_alpha = 0.0;
  double ll_efficiency = 0.0;
};

// One calibrated algorithm: the alpha-beta parameters of `algorithm` for collective `kind`
// over `nodes` nodes (1 = inside one node), fitted to the dataset named (an id of
// sim/calibration/nccl_tests.csv). `bandwidth` is the bus bandwidth for "ring" and
// "nvls_tree", and the per-GPU NVLink rate of the multimem operations for "nvls".
struct Calibration {
  CollKind kind = CollKind::AllReduce;
  std::string algorithm;  // "ring", "nvls", "nvls_tree"
  int nodes = 1;
  double alpha = 0.0;      // seconds per algorithm step
  double bandwidth = 0.0;  // bytes/second
  std::string dataset;
};

struct Topology {
  std::string name;          // the preset's name
  std::string description;
  int gpus_per_node = 8;
  Link intra;                // between GPUs of one node (NVLink/NVSwitch, PCIe)
  Link inter;                // between nodes (InfiniBand); single-node presets copy `intra`
  // Fixed cost per collective call (kernel launch, protocol setup), seconds.
  double launch_overhead = 0.0;
  // Dense bf16 tensor-core peak of one GPU (FLOP/s, the vendor's figure without sparsity)
  // and the fraction of it a training step sustains (model FLOPs utilisation). The
  // runtime's FLOP estimates are charged at gpu_flops * mfu.
  double gpu_flops = 0.0;
  double mfu = 0.4;
  // Between a GPU and its host's memory, per direction, bytes/s, from the spec sheet (PCIe
  // 5.0 x16: 63 GB/s; 4.0 x16: 31.5 GB/s; Grace Hopper's NVLink-C2C: 450 GB/s): what
  // offloaded optimizer state and weights cross
  // (docs/memory.md). 0: no host link modelled.
  double host_link_bandwidth = 0.0;
  // One GPU's memory as CUDA reports it to PyTorch (the "total capacity" of its out-of-memory
  // message), bytes: a simulated rank's device budget unless the caller sets one (docs/
  // simulator.md, "Device memory"). 0: unlimited.
  uint64_t gpu_memory = 0;
  // --- added by the calibration (docs/sim-calibration.md) ---
  int nodes = 1;                        // nodes in the preset
  // PCIe hosts: GPUs behind one switch / CPU socket; a ring over more crosses the CPU
  // interconnect and is limited to cross_domain_bandwidth (bus bandwidth). 0 = one domain.
  int gpus_per_domain = 0;
  double cross_domain_bandwidth = 0.0;
  // Network adapters: count per node and the rate one GPU pair gets through one (p2p).
  int nics_per_node = 0;
  double nic_bandwidth = 0.0;
  // Per-collective, per-algorithm, per-node-count parameters (see Calibration).
  std::vector<Calibration> calibration;
  // --- the spec presets (topology_from_spec): NCCL's tuner as the cost model ---
  struct Tuner {
    bool on = false;           // collectives are priced by NCCL's tuner, not `calibration`
    int compute_capability = 90;
    bool nvlink = true;
    bool nvls = false;
    double link_gbs = 0;       // PlatformSpec::nccl_link_bandwidth, GB/s
    double net_gbs = 0;        // the node's NICs together, GB/s (line rate / 8)
    double cross_domain_factor = 1.0;
    double k_ll = 0, k_ll128 = 0, k_simple = 0, eta_intra = 0, eta_net = 0, eta_nvls = 0, eta_ll = 0;
  } tuner;
};

// The presets: "8xH100" (one NVLink node), "8xA100", "8xPCIe", "Nx8xH100-IB" (N nodes of
// 8xH100 over 400 Gb/s InfiniBand, e.g. "4x8xH100-IB"), calibrated on their own data; and,
// predicted from their spec sheet (topology_from_spec with spec_coefficients()), "8xH200",
// "Nx8xH100-RoCE" (16 x 200G RoCE per node), "Nx8xH100-EFA" (32 x 100G EFA per node, AWS
// p5), "Nx8xA100-IB" (8 x HDR 200G per node), "4xGH200" (4 Grace Hopper superchips, NVLink 4
// all-to-all, host memory over NVLink-C2C at 450 GB/s a direction) and "Nx4xGH200-Slingshot"
// (N such nodes, 4 x 200G HPE Slingshot 11 per node, as CSCS's Alps), "Nx8xH200-IB" and
// "Nx8xH200-RoCE" (8xH200 nodes with the H100's networks), "Nx8xA100-EFA" (4 x 100G EFA per
// node, AWS p4d/p4de); "8xA100-40GB" is "8xA100" with the 40 GB board's memory. Throws
// Error(InvalidArgument) naming the known presets.
Topology topology_preset(const std::string& name);
std::vector<std::string> topology_preset_names();

// A platform as its spec sheet describes it: nothing here is fitted.
struct PlatformSpec {
  std::string name;          // the preset's name
  std::string description;
  std::string link_name;     // "NVLink4", "NVLink3", "PCIe4"
  double link_bandwidth = 0; // per GPU, per direction, bytes/s (NVLink 4: 450e9)
  bool nvls = false;         // NVLink SHARP (NVSwitch gen 3)
  int gpus_per_node = 8;
  int gpus_per_domain = 0;   // PCIe: GPUs per PCIe domain (0 = one domain)
  double cross_domain_factor = 1.0;  // ring bandwidth left when a ring crosses domains
  int nodes = 1;
  int nics_per_node = 0;
  double nic_line_rate = 0;  // one NIC, bytes/s (400 Gb/s = 50e9)
  double gpu_flops = 0;      // dense BF16 peak of one GPU
  double host_link_bandwidth = 0;  // GPU <-> host memory, per direction, bytes/s
  uint64_t gpu_memory = 0;         // Topology::gpu_memory
  // --- what NCCL's tuner sees (docs/sim-calibration.md, "NCCL's tuner as the spine") ---
  int compute_capability = 90;     // 90 Hopper, 80 Ampere, 89 Ada: the row of NCCL's tables
  bool nvlink = true;              // GPUs talk over NVLink (LL128 allowed), else PCIe
  // The GPU's link as NCCL's topology rates it, bytes/s (src/graph/topo.h): NVLink links x
  // SMxx_NVLINK_BW (H100 18 x 20.6 GB/s, A100 12 x 20.0), PCIe by generation and width (Gen4
  // x16 24 GB/s). A NIC counts its line rate / 8.
  double nccl_link_bandwidth = 0;
};

// The coefficients fitted on top of NCCL's tuner, shared by all platforms (sim/calibration/
// fit.py). For the (algorithm, protocol) NCCL's tuner picks, with its latency L (us) and
// bandwidth B (GB/s) for this call, a collective takes
//   launch + k_proto * L + bytes / (eta * B)
// with k_proto one of k_ll, k_ll128, k_simple; eta = eta_nvls for NVLS and NVLSTree, eta_net
// across nodes, eta_intra inside one node, times eta_ll for the LL and LL128 protocols.
struct SpecCoefficients {
  double k_ll = 0, k_ll128 = 0, k_simple = 0;
  double eta_intra = 0, eta_net = 0, eta_nvls = 0, eta_ll = 0;
};
// The coefficients fitted on every platform of sim/calibration/nccl_tests.csv (the "(none)"
// row of sim/calibration/holdout.csv).
SpecCoefficients spec_coefficients();
// The spec of a preset (every name topology_preset accepts). Throws like topology_preset.
PlatformSpec platform_spec(const std::string& name);
// The topology a spec and coefficients give: NCCL's tuner on the graph the spec implies
// (Topology::tuner), no per-platform calibration.
Topology topology_from_spec(const PlatformSpec& spec, const SpecCoefficients& c);

// One (algorithm, protocol) NCCL's tuner considers for a call: its latency (us) and algorithm
// bandwidth (GB/s) as src/graph/tuning.cc computes them (ncclTopoTuneModel, then
// ncclTopoGetAlgoTime's tree correction and ring plateau), and the time it estimates from them.
struct TunerCandidate {
  std::string algorithm;  // "ring", "tree", "nvls", "nvls_tree"
  std::string protocol;   // "LL", "LL128", "Simple"
  double latency_us = 0;
  double bandwidth_gbs = 0;
  double nccl_us = 0;     // latency_us + bytes / (1000 * bandwidth_gbs): what NCCL minimises
};
// The candidates for `kind` over `nranks` ranks of a spec topology (topo.tuner.on), in the
// order the model tries them (ring, tree, NVLS or NVLSTree; LL, LL128, Simple). `nvls` as for
// collective_cost. Empty for a topology without a tuner, one rank, or
// send/recv.
std::vector<TunerCandidate> nccl_tuner_table(const Topology& topo, CollKind kind, uint64_t bytes, int nranks,
                                             bool nvls = true);

struct Estimate {
  double seconds = 0.0;
  std::string algorithm;     // "ring", "nvls", "nvls_tree", "tree", "direct", "local"
  // "Simple", "LL" or "LL128" ("LL" stands for both low-latency protocols on the calibrated
  // presets; the spec presets name NCCL's choice), "" for local
  std::string protocol;
};

// The time of one collective over `nranks` ranks (consecutive ranks fill nodes first).
// `bytes` is nccl-tests' "size": the all-reduce / broadcast / reduce buffer, the all-gather
// output, the reduce-scatter input. The algorithm and protocol are those NCCL picks on the
// preset's hardware (the cheapest of the candidates the model knows for it).
// The algorithms a user allows, in NCCL_ALGO's syntax: a comma-separated list of names
// (case-insensitive: Ring, Tree, NVLS, NVLSTree), or "^" and a list to exclude. Empty: all.
// parse_algorithms throws Error(InvalidArgument) naming an unknown one.
struct AlgorithmFilter {
  std::vector<std::string> names;  // the cost model's names: "ring", "tree", "nvls", "nvls_tree"
  bool exclude = false;
  std::string spec;                // as the user wrote it
  bool empty() const { return names.empty(); }
  bool allows(const std::string& algorithm) const;
};
AlgorithmFilter parse_algorithms(const std::string& spec);

// `nvls`: whether NCCL could run this op and type on NVLink SHARP (comm::nvls_supported):
// without, NVLS and NVLSTree are not candidates (NCCL falls back to its ring or tree).
// `only`: the algorithms allowed (NCCL_ALGO, accel sim bench --algo); when it allows none of
// the candidates for this collective, Error(InvalidArgument) says which there were, as NCCL
// fails a call its NCCL_ALGO leaves no algorithm for.
Estimate collective_cost(const Topology& topo, CollKind kind, uint64_t bytes, int nranks, bool nvls = true,
                         const AlgorithmFilter& only = {});

// The bus bandwidth (bytes/second) collective_cost approaches for very large messages:
// busbw_factor / the smallest per-byte cost of the candidate algorithms.
double peak_busbw(const Topology& topo, CollKind kind, int nranks);

// A point-to-point transfer.
double p2p_cost(const Topology& topo, int src, int dst, uint64_t bytes);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor (all-reduce 2(n-1)/n,
// reduce-scatter and all-gather (n-1)/n, broadcast and reduce 1).
double busbw_factor(CollKind kind, int nranks);

// nccl-tests' figures for a collective of `bytes` (its "size") that took `seconds`:
// algbw = bytes / seconds and busbw = algbw * busbw_factor, in bytes/second.
double algbw(uint64_t bytes, double seconds);
double busbw(CollKind kind, uint64_t bytes, double seconds, int nranks);

// The bytes one rank sends for a collective with the algorithm's data volume (ring:
// all-reduce 2(n-1)/n * bytes, reduce-scatter / all-gather (n-1)/n * bytes, ...).
uint64_t bytes_sent_per_rank(CollKind kind, uint64_t bytes, int nranks);

// A training step's predicted time on `nranks` GPUs of `topo` (nodes filled first), for a
// dense model of `params` parameters and `tokens` tokens per GPU per step (weak scaling:
// the per-GPU batch stays, the global batch grows), bf16 mixed precision with AdamW.
// Compute: forward 2*params*tokens FLOPs, backward twice that, at gpu_flops * mfu.
// Communication as accel does it: DDP in buckets of `bucket_bytes`, ZeRO per unit (a layer
// of a model of `layers` equal layers):
//   "ddp"      all-reduce of the fp32 gradients (4 bytes/param), overlapped with backward
//   "zero1",   reduce-scatter of the bf16 gradients (2 bytes/param) overlapped with
//   "zero2"    backward, then the all-gather of the updated bf16 weights (not overlapped)
//   "zero3"    all-gather of the weights before each unit in forward (overlapped with
//              forward) and again in backward, with the gradients' reduce-scatter
//              (overlapped with backward); no all-gather after the step
// Overlap hides communication behind the compute it runs alongside, except the last
// piece, which has nothing left to hide behind.
struct StepEstimate {
  double compute = 0;   // seconds of forward + backward
  double comm = 0;      // seconds of communication in total
  double exposed = 0;   // communication not hidden behind compute
  double total = 0;     // compute + exposed
};
StepEstimate estimate_step(const Topology& topo, const std::string& strategy, double params, double tokens, int nranks,
                           int layers = 24, uint64_t bucket_bytes = 25ull << 20);

}  // namespace accel::sim
