// The simulator's cost model against published nccl-tests results
// (sim/calibration/nccl_tests.csv, docs/sim-calibration.md).
//
// Every primary dataset must be reproduced within 15% at every size >= 16 MiB; every platform,
// held out and predicted from its spec sheet (sim/calibration/fit.py, holdout.csv), within 10%
// or the bound docs/sim-calibration.md documents (LeaveOnePlatformOut...). The same
// binary prints the markdown tables of docs/sim-calibration.md:
//   ACCEL_CALIBRATION_MD=/tmp/tables.md ./build/tests/sim/test_calibration --gtest_filter=Calibration.MarkdownTables
// (without the variable it prints them to stdout).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/cost.h"

#ifndef ACCEL_CALIBRATION_CSV
#error "ACCEL_CALIBRATION_CSV (the path of sim/calibration/nccl_tests.csv) must be defined"
#endif

namespace accel::sim {
namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;
constexpr double kTarget = 0.15;             // the target, sizes >= 16 MiB
constexpr double kUnreachableBound = 0.18;   // primary-unreachable datasets
constexpr uint64_t kTargetFrom = 16 * MiB;

struct Row {
  std::string dataset, role, preset, collective, source;
  CollKind kind = CollKind::AllReduce;
  int nranks = 0, nodes = 0;
  uint64_t size = 0;
  double time_us = 0.0;
  bool has_bw = false;
  double algbw = 0.0, busbw = 0.0;  // GB/s as printed
};

CollKind parse_kind(const std::string& s) {
  if (s == "all_reduce") return CollKind::AllReduce;
  if (s == "all_gather") return CollKind::AllGather;
  if (s == "reduce_scatter") return CollKind::ReduceScatter;
  if (s == "broadcast") return CollKind::Broadcast;
  if (s == "reduce") return CollKind::Reduce;
  throw std::runtime_error("unknown collective '" + s + "'");
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream is(line);
  while (std::getline(is, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

const std::vector<Row>& rows() {
  static const std::vector<Row> all = [] {
    std::ifstream in(ACCEL_CALIBRATION_CSV);
    if (!in) throw std::runtime_error(std::string("cannot open ") + ACCEL_CALIBRATION_CSV);
    std::vector<Row> out;
    std::string line;
    bool header = true;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (header) {
        header = false;
        if (line.rfind("dataset,role,preset,collective,nranks,nodes,size_bytes,time_us,algbw_gbps,busbw_gbps,source", 0) != 0)
          throw std::runtime_error("unexpected header: " + line);
        continue;
      }
      auto c = split(line);
      if (c.size() != 11) throw std::runtime_error("expected 11 columns: " + line);
      Row r;
      r.dataset = c[0];
      r.role = c[1];
      r.preset = c[2];
      r.collective = c[3];
      r.kind = parse_kind(c[3]);
      r.nranks = std::stoi(c[4]);
      r.nodes = std::stoi(c[5]);
      r.size = std::stoull(c[6]);
      r.time_us = std::stod(c[7]);
      r.has_bw = !c[8].empty() && !c[9].empty();
      if (r.has_bw) {
        r.algbw = std::stod(c[8]);
        r.busbw = std::stod(c[9]);
      }
      r.source = c[10];
      out.push_back(r);
    }
    return out;
  }();
  return all;
}

bool asserted(const Row& r) { return r.role == "primary" || r.role == "primary-unreachable"; }

double model_us(const Row& r) {
  return collective_cost(topology_preset(r.preset), r.kind, r.size, r.nranks).seconds * 1e6;
}

double error(const Row& r) { return model_us(r) / r.time_us - 1.0; }

// Datasets in file order, with their rows.
std::vector<std::pair<std::string, std::vector<Row>>> datasets() {
  std::vector<std::pair<std::string, std::vector<Row>>> out;
  for (const Row& r : rows()) {
    if (out.empty() || out.back().first != r.dataset) out.push_back({r.dataset, {}});
    out.back().second.push_back(r);
  }
  return out;
}

double max_abs_error(const std::vector<Row>& rs, uint64_t from) {
  double m = 0.0;
  for (const Row& r : rs)
    if (r.size >= from) m = std::max(m, std::fabs(error(r)));
  return m;
}

// The smallest maximum relative error that ANY concave function of the size can reach on
// these rows. collective_cost is the minimum over algorithms of alpha + beta * bytes, hence
// concave: for sizes x_i < x_j < x_k, f(x_j) >= w f(x_i) + (1-w) f(x_k) with
// w = (x_k - x_j) / (x_k - x_i); with f within (1 +- e) of the measured t that needs
// (1+e) t_j >= (1-e) L, L = w t_i + (1-w) t_k, so e >= (L - t_j) / (L + t_j).
double concave_lower_bound(const std::vector<Row>& rs) {
  double bound = 0.0;
  for (size_t i = 0; i < rs.size(); ++i)
    for (size_t j = i + 1; j < rs.size(); ++j)
      for (size_t k = j + 1; k < rs.size(); ++k) {
        const double xi = double(rs[i].size), xj = double(rs[j].size), xk = double(rs[k].size);
        const double w = (xk - xj) / (xk - xi);
        const double L = w * rs[i].time_us + (1 - w) * rs[k].time_us;
        bound = std::max(bound, (L - rs[j].time_us) / (L + rs[j].time_us));
      }
  return bound;
}

std::vector<Row> from(const std::vector<Row>& rs, uint64_t min_size) {
  std::vector<Row> out;
  for (const Row& r : rs)
    if (r.size >= min_size) out.push_back(r);
  return out;
}

std::string pct(double e) {
  std::ostringstream os;
  os << std::showpos << std::fixed << std::setprecision(1) << e * 100 << "%";
  return os.str();
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string human(uint64_t b) {
  std::ostringstream os;
  if (b % GiB == 0) os << b / GiB << " GiB";
  else if (b % MiB == 0) os << b / MiB << " MiB";
  else os << b << " B (≈" << (b + MiB / 2) / MiB << " MiB)";
  return os.str();
}

// ---------------------------------------------------------------------------------------

TEST(Calibration, ReferenceRowsAreConsistentAndCoverThePresets) {
  ASSERT_GT(rows().size(), 200u);
  std::set<std::string> primaries;
  for (const Row& r : rows()) {
    SCOPED_TRACE(r.dataset + " " + std::to_string(r.size));
    EXPECT_TRUE(r.role == "primary" || r.role == "primary-unreachable" || r.role == "crosscheck") << r.role;
    EXPECT_NO_THROW(topology_preset(r.preset));
    EXPECT_GE(r.size, 1 * MiB);
    EXPECT_LE(r.size, 8 * GiB);
    EXPECT_GT(r.time_us, 0.0);
    if (r.preset != "8xPCIe") {
      const int per_node = topology_preset(r.preset).gpus_per_node;
      EXPECT_EQ(r.nodes, (r.nranks + per_node - 1) / per_node);
    }
    if (r.has_bw) {
      // as nccl-tests prints them: algbw = size / time, busbw = algbw * factor (GB/s), to
      // the rounding of the printed digits -- the copy is faithful
      const double alg = r.size / (r.time_us * 1e-6) / 1e9;
      EXPECT_NEAR(r.algbw, alg, 0.011 + 2e-4 * alg);
      EXPECT_NEAR(r.busbw, r.algbw * busbw_factor(r.kind, r.nranks), 0.02 + 2e-4 * r.busbw);
      EXPECT_NEAR(r.busbw, busbw(r.kind, r.size, r.time_us * 1e-6, r.nranks) / 1e9, 0.03 + 3e-4 * r.busbw);
    } else {
      EXPECT_EQ(r.role, "crosscheck");  // only nccl-tests rows can be primary
    }
    if (asserted(r)) primaries.insert(r.preset + " " + r.collective);
  }
  // the presets: one 8xH100 node, one 8xA100 node, 8 PCIe GPUs, N nodes over IB
  for (const char* need : {"8xH100 all_reduce", "8xH100 all_gather", "8xH100 reduce_scatter", "8xA100 all_reduce",
                           "8xPCIe all_reduce", "2x8xH100-IB all_reduce", "4x8xH100-IB all_reduce",
                           "4x8xH100-IB all_gather", "8x8xH100-IB all_reduce", "10x8xH100-IB all_reduce",
                           "10x8xH100-IB reduce_scatter"})
    EXPECT_TRUE(primaries.count(need)) << need;
}

TEST(Calibration, PrimaryDatasetsWithinFifteenPercentFromSixteenMiB) {
  int checked = 0;
  std::cout << "max |model/measured - 1|, sizes >= 16 MiB (all sizes):\n";
  for (const auto& [id, rs] : datasets()) {
    const Row& r0 = rs.front();
    const double big = max_abs_error(rs, kTargetFrom), all = max_abs_error(rs, 0);
    const bool any_big = std::any_of(rs.begin(), rs.end(), [](const Row& r) { return r.size >= kTargetFrom; });
    std::cout << "  " << std::left << std::setw(20) << r0.role << std::setw(11) << id << std::setw(14) << r0.preset
              << std::setw(15) << r0.collective << std::right << std::setw(9)
              << (any_big ? fixed(big * 100, 1) + "%" : "-") << "  (" << fixed(all * 100, 1) << "%)\n";
    if (r0.role == "crosscheck") continue;
    RecordProperty("max_error_" + r0.preset + "_" + r0.collective + "_" + id, fixed(big * 100, 2) + "%");
    const double bound = r0.role == "primary" ? kTarget : kUnreachableBound;
    for (const Row& r : rs) {
      if (r.size < kTargetFrom) continue;
      ++checked;
      const double e = error(r);
      EXPECT_LE(std::fabs(e), bound) << id << " (" << r.preset << " " << r.collective << ") at " << human(r.size)
                                     << ": measured " << r.time_us << " us, model " << model_us(r) << " us";
    }
  }
  EXPECT_GT(checked, 90);
}

TEST(Calibration, UnreachableDatasetsAreProvablyUnreachable) {
  int n = 0;
  for (const auto& [id, rs] : datasets()) {
    if (rs.front().role != "primary-unreachable") continue;
    ++n;
    const double bound = concave_lower_bound(from(rs, kTargetFrom));
    std::cout << id << ": no concave model comes closer than " << fixed(bound * 100, 2) << "% (ours: "
              << fixed(max_abs_error(rs, kTargetFrom) * 100, 2) << "%)\n";
    EXPECT_GT(bound, kTarget) << id << " is reachable within 15%: make it primary";
  }
  // and every primary dataset is within reach (the bound is below the target)
  for (const auto& [id, rs] : datasets()) {
    if (rs.front().role == "primary") {
      EXPECT_LE(concave_lower_bound(from(rs, kTargetFrom)), kTarget) << id;
    }
  }
  EXPECT_EQ(n, 1);
}

// ---------------------------------------------------------------------------------------
// Sanity of the model

const std::vector<std::string>& presets() {
  static const std::vector<std::string> p = {"8xH100",      "8xA100",      "8xPCIe",       "1x8xH100-IB",
                                             "2x8xH100-IB", "3x8xH100-IB", "4x8xH100-IB",  "6x8xH100-IB",
                                             "8x8xH100-IB", "10x8xH100-IB", "16x8xH100-IB", "128x8xH100-IB",
                                             "8xH200",      "2x8xH100-RoCE", "4x8xH100-EFA", "4x8xA100-IB",
                                             "16x8xA100-IB", "4xGH200",     "2x4xGH200-Slingshot",
                                             "2x8xH200-RoCE", "4x8xH200-IB", "2x8xA100-EFA"};
  return p;
}

const CollKind kKinds[] = {CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter, CollKind::Broadcast,
                           CollKind::Reduce};

TEST(Calibration, BusbwInNcclTestsSense) {
  EXPECT_NEAR(busbw_factor(CollKind::AllReduce, 8), 2.0 * 7 / 8, 1e-15);
  EXPECT_NEAR(busbw_factor(CollKind::AllReduce, 16), 2.0 * 15 / 16, 1e-15);
  EXPECT_NEAR(busbw_factor(CollKind::ReduceScatter, 80), 79.0 / 80, 1e-15);
  EXPECT_NEAR(busbw_factor(CollKind::AllGather, 32), 31.0 / 32, 1e-15);
  EXPECT_EQ(busbw_factor(CollKind::Broadcast, 8), 1.0);
  EXPECT_EQ(busbw_factor(CollKind::Reduce, 8), 1.0);
  // nccl-tests' own example: 8 GiB all-reduce over 8 ranks in 31335.8 us (H1)
  EXPECT_NEAR(algbw(8 * GiB, 31335.8e-6) / 1e9, 274.13, 0.01);
  EXPECT_NEAR(busbw(CollKind::AllReduce, 8 * GiB, 31335.8e-6, 8) / 1e9, 479.72, 0.01);
  // on the model's own estimates
  for (const auto& name : presets()) {
    const Topology t = topology_preset(name);
    for (CollKind k : kKinds)
      for (int n : {2, 8, 8 * t.nodes}) {
        if (n < 2) continue;
        for (uint64_t s : {1 * MiB, 256 * MiB, 8 * GiB}) {
          const double sec = collective_cost(t, k, s, n).seconds;
          EXPECT_DOUBLE_EQ(algbw(s, sec), s / sec);
          EXPECT_DOUBLE_EQ(busbw(k, s, sec, n), s / sec * busbw_factor(k, n));
        }
        // large messages approach the algorithm's bus bandwidth from below
        const double peak = peak_busbw(t, k, n);
        const double b = busbw(k, 1024 * GiB, collective_cost(t, k, 1024 * GiB, n).seconds, n);
        EXPECT_LE(b, peak * (1 + 1e-12)) << name << " " << coll_name(k) << " n=" << n;
        EXPECT_GT(b, 0.99 * peak) << name << " " << coll_name(k) << " n=" << n;
      }
  }
  // what NCCL reports on these machines
  EXPECT_NEAR(peak_busbw(topology_preset("8xH100"), CollKind::AllReduce, 8) / 1e9, 464.5, 0.1);  // NVLS
  EXPECT_NEAR(peak_busbw(topology_preset("8xH100"), CollKind::AllGather, 8) / 1e9, 353.0, 0.1);  // ring
  EXPECT_NEAR(peak_busbw(topology_preset("8xA100"), CollKind::AllReduce, 8) / 1e9, 235.9, 0.1);
  EXPECT_NEAR(peak_busbw(topology_preset("8xPCIe"), CollKind::AllReduce, 4) / 1e9, 25.87, 0.01);
  EXPECT_NEAR(peak_busbw(topology_preset("8xPCIe"), CollKind::AllReduce, 8) / 1e9, 20.7, 0.01);
  // beyond the calibrated node counts, the NICs: 8 x 400 Gb/s = 400 GB/s line rate
  for (int nodes : {16, 32, 128})
    EXPECT_LE(peak_busbw(topology_preset(std::to_string(nodes) + "x8xH100-IB"), CollKind::AllReduce, 8 * nodes), 400e9);
}

TEST(Calibration, AlgorithmsAreWhatNcclPicks) {
  const Topology h = topology_preset("8xH100");
  // the NCCL tuner on one H100 node: RING/LL up to ~1 MB, NVLS/SIMPLE above (nccl-tests #309)
  EXPECT_EQ(collective_cost(h, CollKind::AllReduce, 64 * 1024, 8).algorithm, "ring");
  EXPECT_EQ(collective_cost(h, CollKind::AllReduce, 64 * 1024, 8).protocol, "LL");
  EXPECT_EQ(collective_cost(h, CollKind::AllReduce, 256 * MiB, 8).algorithm, "nvls");
  EXPECT_EQ(collective_cost(h, CollKind::AllReduce, 256 * MiB, 8).protocol, "Simple");
  EXPECT_EQ(collective_cost(h, CollKind::AllGather, 256 * MiB, 8).algorithm, "ring");
  EXPECT_EQ(collective_cost(topology_preset("8xA100"), CollKind::AllReduce, 256 * MiB, 8).algorithm, "ring");
  const Topology ib = topology_preset("4x8xH100-IB");
  EXPECT_EQ(collective_cost(ib, CollKind::AllReduce, 256 * MiB, 32).algorithm, "nvls_tree");
  EXPECT_EQ(collective_cost(ib, CollKind::AllReduce, 64 * 1024, 32).algorithm, "tree");
  EXPECT_EQ(collective_cost(ib, CollKind::AllReduce, 64 * 1024, 32).protocol, "LL");
  EXPECT_EQ(collective_cost(ib, CollKind::AllGather, 256 * MiB, 32).algorithm, "ring");
  EXPECT_EQ(collective_cost(ib, CollKind::AllReduce, 256 * MiB, 8).algorithm, "nvls");  // one node of it
}

TEST(Calibration, TimeGrowsWithSize) {
  for (const auto& name : presets()) {
    const Topology t = topology_preset(name);
    for (CollKind k : kKinds)
      for (int n : {2, 3, 4, 5, 8, 12, 8 * t.nodes, 8 * t.nodes + 3}) {
        // The spec presets follow NCCL's choice, which is NCCL's estimate, not the fitted
        // cost: where NCCL switches to what its estimate prefers, algbw may dip a little, as
        // the published tables do at their switch points (N7-AR at 256 MiB, N10-AG at 255 MiB).
        const double dip = t.tuner.on ? 0.02 : 1e-12;
        double prev_t = 0.0, prev_alg = 0.0;
        for (uint64_t s = 1024; s <= 16 * GiB; s *= 2) {
          const double sec = collective_cost(t, k, s, n).seconds;
          EXPECT_GT(sec, prev_t) << name << " " << coll_name(k) << " n=" << n << " " << s;
          EXPECT_GE(algbw(s, sec), prev_alg * (1 - dip)) << name << " " << coll_name(k) << " n=" << n << " " << s;
          prev_t = sec;
          prev_alg = algbw(s, sec);
        }
      }
  }
}

TEST(Calibration, MultiNodeSlowerThanOneNodePerByte) {
  const Topology one = topology_preset("8xH100");
  for (int nodes : {2, 3, 4, 6, 8, 10, 16, 128}) {
    const Topology t = topology_preset(std::to_string(nodes) + "x8xH100-IB");
    for (CollKind k : kKinds)
      for (uint64_t s = 1 * MiB; s <= 8 * GiB; s *= 2) {
        const double single = collective_cost(one, k, s, 8).seconds;
        const double multi = collective_cost(t, k, s, 8 * nodes).seconds;
        EXPECT_LT(algbw(s, multi), algbw(s, single)) << nodes << " nodes, " << coll_name(k) << " " << human(s);
      }
    // and a point-to-point copy across nodes (one NIC) is slower than inside a node
    EXPECT_GT(p2p_cost(t, 0, 8, 1 * GiB), p2p_cost(t, 0, 1, 1 * GiB));
  }
}

// ---------------------------------------------------------------------------------------
// Leave one platform out: the spec model's coefficients fitted on every platform but one
// (sim/calibration/fit.py -> sim/calibration/holdout.csv) predict the platform left out from
// its spec sheet. A platform is a preset: GPU and intra-node link, fabric, node count.

// Datasets that are not out-of-the-box nccl-tests (tuned, forced, or not nccl-tests): the
// same list as fit.py's EXCLUDED.
bool excluded(const std::string& id) {
  static const std::set<std::string> x = {"N2-ring", "N8-tuned", "N11", "P1-asus4", "P1-asus8", "P1-epyc8"};
  return x.count(id) > 0;
}

struct HeldOut {
  std::string platform;
  SpecCoefficients c;
  double python_max_error = 0.0;
};

// The data rows of sim/calibration/<name> (comments and blank lines skipped), split at commas,
// after checking its header and column count.
std::vector<std::vector<std::string>> calibration_csv(const std::string& name, const std::string& header) {
  std::string path = ACCEL_CALIBRATION_CSV;
  path = path.substr(0, path.rfind('/') + 1) + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  const size_t columns = split(header).size();
  std::vector<std::vector<std::string>> out;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (first) {
      first = false;
      if (line != header) throw std::runtime_error("unexpected header: " + line);
      continue;
    }
    auto c = split(line);
    if (c.size() != columns) throw std::runtime_error("expected " + std::to_string(columns) + " columns: " + line);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<HeldOut> held_out_fits() {
  std::vector<HeldOut> out;
  for (const auto& c : calibration_csv(
           "holdout.csv", "held_out,k_ll,k_ll128,k_simple,eta_intra,eta_net,eta_nvls,eta_ll,max_error")) {
    HeldOut h;
    h.platform = c[0];
    h.c.k_ll = std::stod(c[1]);
    h.c.k_ll128 = std::stod(c[2]);
    h.c.k_simple = std::stod(c[3]);
    h.c.eta_intra = std::stod(c[4]);
    h.c.eta_net = std::stod(c[5]);
    h.c.eta_nvls = std::stod(c[6]);
    h.c.eta_ll = std::stod(c[7]);
    h.python_max_error = std::stod(c[8]);
    out.push_back(h);
  }
  return out;
}

// model busbw / measured busbw - 1 (positive: the model is optimistic)
double busbw_error(const Topology& t, const Row& r) {
  const double model = collective_cost(t, r.kind, r.size, r.nranks).seconds * 1e6;
  return r.time_us / model - 1.0;
}

// The held-out error each platform is held to at every size >= 16 MiB: the 10% target
// where it is met; otherwise the bound docs/sim-calibration.md states, with the effect the
// model lacks ("Held-out errors").
constexpr double kHeldOutTarget = 0.10;
const std::map<std::string, double>& held_out_bounds() {
  static const std::map<std::string, double> b = {
      {"8xH100", 0.24},        {"8xA100", 0.16},        {"8xPCIe", kHeldOutTarget},
      {"2x8xH100-IB", 0.17},   {"4x8xH100-IB", 0.24},   {"8x8xH100-IB", kHeldOutTarget},
      {"10x8xH100-IB", 0.50},  {"2x8xH100-RoCE", kHeldOutTarget}, {"2x8xH100-EFA", 0.78},
      {"4x8xA100-IB", 0.55},   {"2x4xGH200-Slingshot", 0.33},      {"2x8xH200-RoCE", kHeldOutTarget},
      {"2x8xA100-EFA", 0.47},
  };
  return b;
}

// sim/calibration/holdout_rows.csv: every published row of every platform, predicted by the
// coefficients fitted without its platform (fit.py). Each row's error is the C++ model's too,
// and the file covers every row: the per-row table of issue 38 item 3 stays current.
struct HeldOutRow {
  std::string platform, dataset, collective;
  int nranks = 0;
  uint64_t size = 0;
  double measured = 0, model = 0, error = 0;
};

std::vector<HeldOutRow> held_out_rows() {
  std::vector<HeldOutRow> out;
  for (const auto& c : calibration_csv(
           "holdout_rows.csv", "held_out,dataset,collective,nranks,size_bytes,measured_busbw_gbps,model_busbw_gbps,error")) {
    HeldOutRow h;
    h.platform = c[0];
    h.dataset = c[1];
    h.collective = c[2];
    h.nranks = std::stoi(c[3]);
    h.size = std::stoull(c[4]);
    h.measured = std::stod(c[5]);
    h.model = std::stod(c[6]);
    h.error = std::stod(c[7]);
    out.push_back(h);
  }
  return out;
}

// What the spec model reaches, held out (docs/sim-calibration.md, "Per row"): of 199 rows >= 16
// MiB and 52 of 1-16 MiB. Without H6 and A4 (2x8xH200-RoCE, 2x8xA100-EFA, never fitted on),
// 139 of 187 and 19 of 48; without G1 as well (2x4xGH200-Slingshot, added with the tuner), 138
// of 183 and 19 of 44, where the previous alpha-beta spec model (sim/calibration/alpha_beta.py)
// reached 130 and 13.
constexpr int kHeldOutRowsWithin10 = 147, kHeldOutRowsWithin20 = 19;

TEST(Calibration, HeldOutRowsAreTheModelsEveryRow) {
  std::map<std::string, SpecCoefficients> coeffs;
  for (const HeldOut& h : held_out_fits()) coeffs[h.platform] = h.c;
  const auto file = held_out_rows();
  size_t expected = 0;
  for (const Row& r : rows())
    if (!excluded(r.dataset) && r.has_bw && coeffs.count(r.preset)) ++expected;
  EXPECT_EQ(file.size(), expected) << "holdout_rows.csv is stale: python3 sim/calibration/fit.py";
  int big = 0, big_ok = 0, mid = 0, mid_ok = 0;
  for (const HeldOutRow& h : file) {
    ASSERT_TRUE(coeffs.count(h.platform)) << h.platform;
    const Topology t = topology_from_spec(platform_spec(h.platform), coeffs.at(h.platform));
    const Row* row = nullptr;
    for (const Row& r : rows())
      if (r.dataset == h.dataset && r.collective == h.collective && r.nranks == h.nranks && r.size == h.size) row = &r;
    ASSERT_NE(row, nullptr) << h.dataset << " " << h.size;
    EXPECT_NEAR(busbw_error(t, *row), h.error, 2e-4) << h.dataset << " at " << human(h.size)
                                                     << ": sim/cost.cpp and sim/calibration/fit.py disagree";
    if (h.size >= kTargetFrom) {
      ++big;
      big_ok += std::fabs(h.error) <= 0.10;
    } else if (h.size >= 1 * MiB) {
      ++mid;
      mid_ok += std::fabs(h.error) <= 0.20;
    }
  }
  // issue 38 item 3's targets (every row), not met (docs/sim-calibration.md): the counts the
  // model reaches are asserted, so that a change to the model or the data cannot lose rows
  // unnoticed; raise them when a change gains some
  EXPECT_GE(big_ok, kHeldOutRowsWithin10) << "of " << big << " rows >= 16 MiB within 10%";
  EXPECT_GE(mid_ok, kHeldOutRowsWithin20) << "of " << mid << " rows of 1-16 MiB within 20%";
  RecordProperty("held_out_rows_16MiB_within_10pct", std::to_string(big_ok) + "/" + std::to_string(big));
  RecordProperty("held_out_rows_1_16MiB_within_20pct", std::to_string(mid_ok) + "/" + std::to_string(mid));
  std::cout << "held-out rows >= 16 MiB within 10%: " << big_ok << "/" << big << "; 1-16 MiB within 20%: " << mid_ok
            << "/" << mid << "\n";
}

TEST(Calibration, LeaveOnePlatformOutPredictsFromTheSpecSheet) {
  const auto fits = held_out_fits();
  std::set<std::string> platforms;
  for (const Row& r : rows())
    if (!excluded(r.dataset) && r.has_bw && r.size >= kTargetFrom) platforms.insert(r.preset);
  std::set<std::string> seen;
  bool all_fit = false;
  for (const HeldOut& h : fits) {
    if (h.platform == "(none)") {
      // the coefficients sim/cost.cpp ships are the ones fitted on every platform
      const SpecCoefficients s = spec_coefficients();
      EXPECT_NEAR(s.k_ll, h.c.k_ll, 1e-6);
      EXPECT_NEAR(s.k_ll128, h.c.k_ll128, 1e-6);
      EXPECT_NEAR(s.k_simple, h.c.k_simple, 1e-6);
      EXPECT_NEAR(s.eta_intra, h.c.eta_intra, 1e-6);
      EXPECT_NEAR(s.eta_net, h.c.eta_net, 1e-6);
      EXPECT_NEAR(s.eta_nvls, h.c.eta_nvls, 1e-6);
      EXPECT_NEAR(s.eta_ll, h.c.eta_ll, 1e-6);
      all_fit = true;
      continue;
    }
    seen.insert(h.platform);
    SCOPED_TRACE(h.platform);
    ASSERT_TRUE(held_out_bounds().count(h.platform)) << "no documented bound";
    const double bound = held_out_bounds().at(h.platform);
    const Topology t = topology_from_spec(platform_spec(h.platform), h.c);
    double worst = 0.0;
    int n = 0;
    for (const Row& r : rows()) {
      if (r.preset != h.platform || excluded(r.dataset) || !r.has_bw || r.size < kTargetFrom) continue;
      ++n;
      const double e = busbw_error(t, r);
      worst = std::max(worst, std::fabs(e));
      EXPECT_LE(std::fabs(e), bound) << r.dataset << " at " << human(r.size) << ": measured " << r.busbw
                                     << " GB/s busbw, predicted " << r.busbw * (1 + e);
    }
    EXPECT_GT(n, 0);
    // fit.py's model and this one agree (the same formulas in two languages)
    EXPECT_NEAR(worst, h.python_max_error, 1e-4) << "sim/cost.cpp and sim/calibration/fit.py disagree";
    RecordProperty("held_out_max_error_" + h.platform, fixed(worst * 100, 1) + "%");
    // a bound above the target is documented only where the target is missed
    if (bound > kHeldOutTarget) {
      EXPECT_GT(worst, kHeldOutTarget) << "meets the 10% target now: lower its bound to the target";
      EXPECT_LE(bound - worst, 0.011) << "the documented bound is looser than the error";
    }
  }
  EXPECT_TRUE(all_fit);
  EXPECT_EQ(seen, platforms) << "every platform with data is held out once";
}

// The spec presets' spine is NCCL's tuner: its tables (src/graph/tuning.cc, NCCL 2.2x) on the
// graph the spec implies. The values below are worked out by hand from those tables.
const TunerCandidate* find(const std::vector<TunerCandidate>& c, const char* algo, const char* proto) {
  for (const TunerCandidate& x : c)
    if (x.algorithm == algo && x.protocol == proto) return &x;
  return nullptr;
}

// The spec presets added with H6 and A4: an H200 node is an H100 node with more memory, so
// across nodes it is priced as the H100 on the same network; p4de's A100s have 4 x 100G EFA.
TEST(Calibration, H200AndA100EfaPresetsAreTheirSpecSheets) {
  for (const char* fabric : {"IB", "RoCE"}) {
    const Topology h200 = topology_preset(std::string("4x8xH200-") + fabric);
    // 4x8xH100-IB's preset is calibrated on its own data: compare with its spec model
    const Topology h100 = topology_from_spec(platform_spec(std::string("4x8xH100-") + fabric), spec_coefficients());
    EXPECT_EQ(h200.nodes, 4);
    EXPECT_EQ(h200.nics_per_node, h100.nics_per_node) << fabric;
    EXPECT_DOUBLE_EQ(h200.tuner.net_gbs, h100.tuner.net_gbs) << fabric;
    for (uint64_t s : {1 * MiB, 64 * MiB, 4 * GiB})
      EXPECT_DOUBLE_EQ(collective_cost(h200, CollKind::AllReduce, s, 32).seconds,
                       collective_cost(h100, CollKind::AllReduce, s, 32).seconds);
  }
  EXPECT_DOUBLE_EQ(topology_preset("2x8xH200-IB").tuner.net_gbs, 8 * 400 / 8.0);
  const Topology efa = topology_preset("2x8xA100-EFA");
  EXPECT_EQ(efa.nics_per_node, 4);
  EXPECT_DOUBLE_EQ(efa.tuner.net_gbs, 4 * 100 / 8.0);
  EXPECT_EQ(efa.tuner.compute_capability, 80);
  EXPECT_FALSE(efa.tuner.nvls);
  for (const char* bad : {"2x8xH200-EFA", "2x8xA100-RoCE", "2x8xH200", "0x8xH200-IB"})
    EXPECT_THROW(topology_preset(bad), Error) << bad;
}

TEST(Calibration, SpecPresetsFollowNcclsTuner) {
  const Topology h100 = topology_from_spec(platform_spec("8xH100"), spec_coefficients());
  // all-reduce on one H100 node: ring and tree with LL, LL128 and Simple, and NVLS (Simple)
  auto ar = nccl_tuner_table(h100, CollKind::AllReduce, 64 * MiB, 8);
  ASSERT_EQ(ar.size(), 7u);
  ASSERT_NE(find(ar, "nvls", "Simple"), nullptr);
  EXPECT_EQ(find(ar, "nvls", "LL"), nullptr);
  // ring/LL: baseLat 6.6 + 14 steps x 0.6 (NVLink); ring/Simple 8.4 + 14 x 3.4; NVLS 25
  EXPECT_NEAR(find(ar, "ring", "LL")->latency_us, 15.0, 1e-9);
  EXPECT_NEAR(find(ar, "ring", "Simple")->latency_us, 56.0, 1e-9);
  EXPECT_NEAR(find(ar, "nvls", "Simple")->latency_us, 25.0, 1e-9);
  // ring/LL bandwidth: min(llMaxBw 141 (Hopper, one node), 18 x 20.6 x 0.5) x 8/14;
  // NVLS: 18 x 20.6 x nvlsEfficiency 0.85 x 15/16 x 2 (all-reduce) x 8/14
  EXPECT_NEAR(find(ar, "ring", "LL")->bandwidth_gbs, 141.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(find(ar, "nvls", "Simple")->bandwidth_gbs, 18 * 20.6 * 0.85 * 15 / 16 * 2 * 8 / 14, 1e-9);
  // tree/Simple at 64 MiB: log2(64 MiB / 64) = 20, Simple correction 0.8; bandwidth min(370.8 x .92,
  // 16 x 38.7) x .5 x 0.8; latency 8.4 + 2 x 7 x 4.0
  EXPECT_NEAR(find(ar, "tree", "Simple")->bandwidth_gbs, 18 * 20.6 * .92 * .5 * .8, 1e-9);
  EXPECT_NEAR(find(ar, "tree", "Simple")->latency_us, 8.4 + 2 * 7 * 4.0, 1e-9);
  for (const TunerCandidate& c : ar)
    EXPECT_NEAR(c.nccl_us, c.latency_us + 64.0 * MiB / (1000 * c.bandwidth_gbs), 1e-9) << c.algorithm << c.protocol;
  // NCCL's choice follows the protocol switches: all-gather on 8 ranks, LL 10.8 us at 161.1
  // GB/s, LL128 27.3 us at 389.9, Simple 32.2 us at 423.8: LL up to 4.5 MB, LL128 to 23.9 MB
  const char* want[][2] = {{"1", "LL"}, {"4", "LL"}, {"8", "LL128"}, {"16", "LL128"}, {"32", "Simple"}, {"1024", "Simple"}};
  for (const auto& w : want) {
    const uint64_t s = std::stoull(w[0]) * MiB;
    const Estimate e = collective_cost(h100, CollKind::AllGather, s, 8);
    EXPECT_EQ(e.algorithm, "ring") << w[0];
    EXPECT_EQ(e.protocol, w[1]) << w[0] << " MiB";
    // the time is NCCL's estimate for its choice with the fitted coefficients on top
    const auto table = nccl_tuner_table(h100, CollKind::AllGather, s, 8);
    const TunerCandidate* c = find(table, "ring", w[1]);
    ASSERT_NE(c, nullptr);
    const SpecCoefficients k = spec_coefficients();
    const double kp = std::string(w[1]) == "LL" ? k.k_ll : std::string(w[1]) == "LL128" ? k.k_ll128 : k.k_simple;
    const double eta = k.eta_intra * (std::string(w[1]) == "Simple" ? 1.0 : k.eta_ll);
    EXPECT_NEAR(e.seconds, 10e-6 + (kp * c->latency_us + s / (1000 * c->bandwidth_gbs * eta)) * 1e-6, 1e-12) << w[0];
  }
  // all-reduce: LL for small messages, NVLS from 2 MiB (nccl-tests #309's tuner log: RING/LL
  // up to 1 MB, then NVLS/SIMPLE)
  EXPECT_EQ(collective_cost(h100, CollKind::AllReduce, 256 * 1024, 8).protocol, "LL");
  EXPECT_EQ(collective_cost(h100, CollKind::AllReduce, 4 * MiB, 8).algorithm, "nvls");
  EXPECT_EQ(collective_cost(h100, CollKind::AllReduce, 4 * GiB, 8).algorithm, "nvls");
  // no NVLS for an op NVLS cannot run (avg, prod, ...), and NCCL_ALGO forces one
  EXPECT_EQ(collective_cost(h100, CollKind::AllReduce, 4 * GiB, 8, false).algorithm, "ring");
  const Estimate ring = collective_cost(topology_preset("8xH200"), CollKind::AllReduce, 16 * GiB, 8, true,
                                        parse_algorithms("Ring"));
  EXPECT_EQ(ring.algorithm, "ring");
  EXPECT_GT(ring.seconds, collective_cost(topology_preset("8xH200"), CollKind::AllReduce, 16 * GiB, 8).seconds);
  EXPECT_THROW(collective_cost(h100, CollKind::AllGather, 1 * MiB, 8, true, parse_algorithms("NVLS")), Error);
  // across nodes: NVLSTree for large all-reduces on H100 (network-bound from 3 nodes: NICs
  // 8 x 50 GB/s), a ring on A100; the ring's Simple latency across 4 A100 nodes: 62 steps, 6
  // across the network (14 us), 56 inside (max(3.4, 3 x netOverhead 1.0)), times 1.4 (plateau)
  EXPECT_EQ(collective_cost(topology_preset("4x8xH100-EFA"), CollKind::AllReduce, 1 * GiB, 32).algorithm, "nvls_tree");
  const Topology a100 = topology_preset("4x8xA100-IB");
  EXPECT_NEAR(find(nccl_tuner_table(a100, CollKind::AllReduce, 1 * GiB, 32), "ring", "Simple")->latency_us,
              (8.4 + 56 * 3.4 + 6 * 14.0) * 1.4, 1e-9);
  // PCIe: no LL128 (NCCL enables it only over NVLink)
  const auto pcie = nccl_tuner_table(topology_from_spec(platform_spec("8xPCIe"), spec_coefficients()), CollKind::AllReduce, 1 * MiB, 4);
  EXPECT_EQ(pcie.size(), 4u);  // ring and tree, LL and Simple
  for (const TunerCandidate& c : pcie)
    EXPECT_NE(c.protocol, "LL128");
  // the calibrated presets keep their own fits: no tuner table
  EXPECT_TRUE(nccl_tuner_table(topology_preset("8xH100"), CollKind::AllReduce, 1 * MiB, 8).empty());
}

TEST(Calibration, SpecPresetsAgreeWithWhatIsPublished) {
  // 8xH200 has the H100's NVLink 4 and NVSwitch: the same prediction as the H100's spec
  const Topology h200 = topology_preset("8xH200");
  const Topology h100 = topology_from_spec(platform_spec("8xH100"), spec_coefficients());
  for (uint64_t s = 1 * MiB; s <= 8 * GiB; s *= 4)
    EXPECT_DOUBLE_EQ(collective_cost(h200, CollKind::AllReduce, s, 8).seconds,
                     collective_cost(h100, CollKind::AllReduce, s, 8).seconds);
  // NVIDIA/nccl-tests #272: 8x H200, NCCL 2.20.3, all_reduce_perf -b 64k -e 4G: "peak
  // bandwidth of 475 GB/s" (busbw); the only H200 figure found (no per-size table)
  const double at_4g = busbw(CollKind::AllReduce, 4 * GiB, collective_cost(h200, CollKind::AllReduce, 4 * GiB, 8).seconds, 8);
  EXPECT_NEAR(at_4g / 1e9, 475.0, 475.0 * kHeldOutTarget);
  EXPECT_EQ(collective_cost(h200, CollKind::AllReduce, 256 * MiB, 8).algorithm, "nvls");
  // fabrics: NVLSTree across H100 nodes, a ring across A100 nodes (no NVLS)
  EXPECT_EQ(collective_cost(topology_preset("2x8xH100-RoCE"), CollKind::AllReduce, 1 * GiB, 16).algorithm, "nvls_tree");
  EXPECT_EQ(collective_cost(topology_preset("4x8xH100-EFA"), CollKind::AllReduce, 1 * GiB, 32).algorithm, "nvls_tree");
  EXPECT_EQ(collective_cost(topology_preset("4x8xA100-IB"), CollKind::AllReduce, 1 * GiB, 32).algorithm, "ring");
  // NIC-bound from 3 nodes: 8 x 200 Gb/s HDR = 200 GB/s line rate; NVIDIA's DGX A100 figure
  // is 192 GB/s busbw (NVIDIA/nccl #812)
  const double a100_peak = peak_busbw(topology_preset("16x8xA100-IB"), CollKind::AllReduce, 128) / 1e9;
  EXPECT_LT(a100_peak, 200.0);
  EXPECT_GT(a100_peak, 0.75 * 192.0);
  // 4xGH200: 4 GPUs, the H100's NVLink 4 bandwidth all-to-all and its BF16 peak, no NVSwitch
  // (a ring, never NVLS), and NVLink-C2C to the host: 900 GB/s both ways, 450 each, 7.1x the
  // 8xH100 preset's PCIe 5.0 x16
  const Topology gh = topology_preset("4xGH200");
  EXPECT_EQ(gh.gpus_per_node, 4);
  EXPECT_DOUBLE_EQ(gh.host_link_bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(gh.gpu_flops, topology_preset("8xH100").gpu_flops);
  EXPECT_NEAR(gh.host_link_bandwidth / topology_preset("8xH100").host_link_bandwidth, 450.0 / 63.0, 1e-12);
  for (uint64_t s = 1 * MiB; s <= 8 * GiB; s *= 4)
    EXPECT_EQ(collective_cost(gh, CollKind::AllReduce, s, 4).algorithm, "ring") << s;
  // a ring's bus bandwidth on 4 GPUs: NCCL's rating of 18 NVLink 4 links (18 x 20.6 GB/s)
  // times the fitted efficiency inside a node
  EXPECT_NEAR(peak_busbw(gh, CollKind::AllReduce, 4), spec_coefficients().eta_intra * 18 * 20.6e9, 1e3);
  EXPECT_EQ(topology_preset("gh200").name, "4xGH200");
  // presets that are not names
  EXPECT_THROW(topology_preset("2x8xH100-Ethernet"), Error);
  EXPECT_THROW(topology_preset("2x8xA100-RoCE"), Error);
  EXPECT_THROW(platform_spec("8xB200"), Error);
}

// ---------------------------------------------------------------------------------------
// docs/sim-calibration.md's tables

std::string markdown() {
  std::ostringstream md;
  md << "<!-- generated by: ACCEL_CALIBRATION_MD=<file> ./build/tests/sim/test_calibration "
        "--gtest_filter=Calibration.MarkdownTables -->\n\n";
  // the parameters
  md << "### Parameters per preset\n\n";
  md << "| preset | link | ring alpha (us/step) | ring busbw (GB/s) | LL alpha (us/step) | LL efficiency | other |\n";
  md << "|---|---|---:|---:|---:|---:|---|\n";
  for (const char* name : {"8xH100", "8xA100", "8xPCIe", "4x8xH100-IB"}) {
    const Topology t = topology_preset(name);
    auto link_row = [&](const char* preset, const Link& l, const std::string& other) {
      md << "| " << preset << " | " << l.name << " | " << fixed(l.alpha * 1e6, 2) << " | " << fixed(l.bandwidth / 1e9, 2)
         << " | " << fixed(l.ll_alpha * 1e6, 2) << " | " << fixed(l.ll_efficiency, 3) << " | " << other << " |\n";
    };
    std::string other = "launch " + fixed(t.launch_overhead * 1e6, 0) + " us";
    if (t.gpus_per_domain)
      other += "; " + std::to_string(t.gpus_per_domain) + " GPUs per PCIe domain, ring across domains " +
               fixed(t.cross_domain_bandwidth / 1e9, 1) + " GB/s";
    link_row(std::string(name) == "4x8xH100-IB" ? "Nx8xH100-IB (intra)" : name, t.intra, other);
    if (t.nodes > 1)
      link_row("Nx8xH100-IB (inter)", t.inter,
               std::to_string(t.nics_per_node) + " NICs per node, " + fixed(t.nic_bandwidth / 1e9, 0) +
                   " GB/s per NIC (p2p)");
  }
  md << "\n| preset | collective | algorithm | nodes | alpha (us/step) | bandwidth (GB/s) | fitted to |\n";
  md << "|---|---|---|---:|---:|---:|---|\n";
  for (const char* name : {"8xH100", "8xA100", "8xPCIe", "4x8xH100-IB"}) {
    const Topology t = topology_preset(name);
    for (const auto& c : t.calibration) {
      if (std::string(name) == "4x8xH100-IB" && c.nodes == 1) continue;  // the 8xH100 rows again
      md << "| " << (t.nodes > 1 ? "Nx8xH100-IB" : name) << " | " << coll_name(c.kind) << " | " << c.algorithm << " | "
         << c.nodes << " | " << fixed(c.alpha * 1e6, 2) << " | " << fixed(c.bandwidth / 1e9, 1)
         << (c.algorithm == "nvls" ? " (link; busbw " + fixed(c.bandwidth * 2 * 7 / 9 / 1e9, 1) + " on 8 GPUs)" : "")
         << " | " << c.dataset << " |\n";
    }
  }
  // the summary
  md << "\n### Error per dataset\n\n";
  md << "Max |model/measured − 1| over the rows of 16 MiB and up (and over all rows, from 1 MiB).\n\n";
  md << "| dataset | role | preset | collective | ranks | max error ≥ 16 MiB | max error, all sizes |\n";
  md << "|---|---|---|---|---:|---:|---:|\n";
  for (const auto& [id, rs] : datasets()) {
    const Row& r0 = rs.front();
    const bool any_big = std::any_of(rs.begin(), rs.end(), [](const Row& r) { return r.size >= kTargetFrom; });
    md << "| " << id << " | " << r0.role << " | " << r0.preset << " | " << r0.collective << " | " << r0.nranks << " | "
       << (any_big ? fixed(max_abs_error(rs, kTargetFrom) * 100, 1) + "%" : "—") << " | "
       << fixed(max_abs_error(rs, 0) * 100, 1) << "% |\n";
  }
  // a table per primary dataset
  md << "\n### Measured against model, per primary dataset\n";
  for (const auto& [id, rs] : datasets()) {
    const Row& r0 = rs.front();
    if (!asserted(r0)) continue;
    md << "\n#### " << r0.preset << ", " << r0.collective << ", " << r0.nranks << " ranks — " << id << " ("
       << r0.role << ")\n\n";
    md << "Source: " << r0.source << ".\n\n";
    md << "| size | measured (us) | model (us) | error | model algorithm | measured busbw | model busbw |\n";
    md << "|---:|---:|---:|---:|---|---:|---:|\n";
    const Topology t = topology_preset(r0.preset);
    // every power of two from 1 MiB to 8 GiB; sizes the dataset lacks show the model only
    for (uint64_t s = 1 * MiB; s <= 8 * GiB; s *= 2) {
      const Row* r = nullptr;
      for (const Row& x : rs)
        if (x.size + s / 1000 >= s && x.size <= s + s / 1000) r = &x;
      const uint64_t bytes = r ? r->size : s;
      const Estimate e = collective_cost(t, r0.kind, bytes, r0.nranks);
      const double model_busbw = busbw(r0.kind, bytes, e.seconds, r0.nranks) / 1e9;
      md << "| " << human(bytes) << " | " << (r ? fixed(r->time_us, 2) : "—") << " | " << fixed(e.seconds * 1e6, 2)
         << " | " << (r ? pct(e.seconds * 1e6 / r->time_us - 1) : "—") << " | " << e.algorithm << "/" << e.protocol
         << " | " << (r ? fixed(r->busbw, 2) : "—") << " | " << fixed(model_busbw, 2) << " |\n";
    }
    md << "\nMax error, sizes ≥ 16 MiB: **" << fixed(max_abs_error(rs, kTargetFrom) * 100, 1) << "%**; all sizes: "
       << fixed(max_abs_error(rs, 0) * 100, 1) << "%.\n";
  }
  // leave one platform out
  md << "\n### Held-out errors: each platform predicted from its spec sheet\n\n";
  md << "Coefficients fitted on every other platform (`sim/calibration/holdout.csv`, written by "
        "`python3 sim/calibration/fit.py`); error = model busbw / measured busbw − 1 (positive: the "
        "model is optimistic). \"largest\" is the dataset's largest size.\n\n";
  md << "| platform (held out) | dataset | collective | 16 MiB | 64 MiB | 256 MiB | 1 GiB | largest | max ≥ 16 MiB | "
        "asserted bound |\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const HeldOut& h : held_out_fits()) {
    if (h.platform == "(none)") continue;
    const Topology t = topology_from_spec(platform_spec(h.platform), h.c);
    std::vector<std::string> ids;
    for (const Row& r : rows())
      if (r.preset == h.platform && !excluded(r.dataset) && r.has_bw && r.size >= kTargetFrom &&
          std::find(ids.begin(), ids.end(), r.dataset) == ids.end())
        ids.push_back(r.dataset);
    for (const std::string& id : ids) {
      std::vector<Row> rs;
      for (const Row& r : rows())
        if (r.dataset == id && r.size >= kTargetFrom) rs.push_back(r);
      auto at = [&](uint64_t s) -> std::string {
        for (const Row& x : rs)
          if (x.size + s / 1000 >= s && x.size <= s + s / 1000) return pct(busbw_error(t, x));
        return "—";
      };
      double worst = 0.0;
      for (const Row& x : rs) worst = std::max(worst, std::fabs(busbw_error(t, x)));
      md << "| " << h.platform << " | " << id << " | " << rs.front().collective << " | " << at(16 * MiB) << " | "
         << at(64 * MiB) << " | " << at(256 * MiB) << " | " << at(1 * GiB) << " | " << human(rs.back().size) << ": "
         << pct(busbw_error(t, rs.back())) << " | " << fixed(worst * 100, 1) << "% | "
         << fixed(held_out_bounds().at(h.platform) * 100, 0) << "% |\n";
    }
  }
  // every held-out row from 1 MiB, against issue 38's targets
  md << "\n### Held-out errors per row, from 1 MiB\n\n";
  md << "Every published row of 1 MiB and more (`sim/calibration/holdout_rows.csv`, all sizes), its platform "
        "held out: error = model busbw / measured busbw − 1. Targets (issue 38): within 10% from 16 MiB, "
        "within 20% from 1 MiB.\n\n";
  {
    const auto all = held_out_rows();
    std::map<std::string, std::pair<int, int>> met_big, met_mid;
    for (const HeldOutRow& h : all) {
      if (h.size >= kTargetFrom) {
        ++met_big[h.platform].second;
        met_big[h.platform].first += std::fabs(h.error) <= 0.10;
      } else if (h.size >= 1 * MiB) {
        ++met_mid[h.platform].second;
        met_mid[h.platform].first += std::fabs(h.error) <= 0.20;
      }
    }
    md << "| platform (held out) | rows ≥ 16 MiB within 10% | rows 1–16 MiB within 20% |\n|---|---:|---:|\n";
    for (const HeldOut& h : held_out_fits()) {
      if (h.platform == "(none)") continue;
      auto frac = [](const std::pair<int, int>& p) {
        return p.second ? std::to_string(p.first) + " / " + std::to_string(p.second) : std::string("—");
      };
      md << "| " << h.platform << " | " << frac(met_big[h.platform]) << " | " << frac(met_mid[h.platform]) << " |\n";
    }
    md << "\n| platform (held out) | dataset | collective | ranks | size | measured busbw | model busbw | error | "
          "target |\n|---|---|---|---:|---:|---:|---:|---:|---|\n";
    for (const HeldOutRow& h : all) {
      if (h.size < 1 * MiB) continue;
      const double lim = h.size >= kTargetFrom ? 0.10 : 0.20;
      md << "| " << h.platform << " | " << h.dataset << " | " << h.collective << " | " << h.nranks << " | "
         << human(h.size) << " | " << fixed(h.measured, 2) << " | " << fixed(h.model, 2) << " | " << pct(h.error)
         << " | " << (std::fabs(h.error) <= lim ? "met" : "missed") << " (" << fixed(lim * 100, 0) << "%) |\n";
    }
  }
  // presets and node counts without a full-size nccl-tests table
  md << "\n### Model only (no per-size nccl-tests table)\n";
  struct Case {
    const char* preset;
    CollKind kind;
    int nranks;
    const char* why;
  };
  const Case cases[] = {
      {"8xPCIe", CollKind::AllReduce, 8, "8 GPUs over both PCIe domains (proxy: P2's 8-against-4-GPU ratio)"},
      {"16x8xH100-IB", CollKind::AllReduce, 128, "16 nodes: beyond the data, NIC-bound"},
      {"16x8xH100-IB", CollKind::AllGather, 128, "16 nodes: beyond the data"},
      {"16x8xH100-IB", CollKind::ReduceScatter, 128, "16 nodes: beyond the data"},
  };
  for (const Case& c : cases) {
    const Topology t = topology_preset(c.preset);
    md << "\n#### " << c.preset << ", " << coll_name(c.kind) << ", " << c.nranks << " ranks — " << c.why << "\n\n";
    md << "| size | model (us) | model algorithm | algbw (GB/s) | busbw (GB/s) |\n|---:|---:|---|---:|---:|\n";
    for (uint64_t s = 1 * MiB; s <= 8 * GiB; s *= 2) {
      const Estimate e = collective_cost(t, c.kind, s, c.nranks);
      md << "| " << human(s) << " | " << fixed(e.seconds * 1e6, 2) << " | " << e.algorithm << "/" << e.protocol << " | "
         << fixed(algbw(s, e.seconds) / 1e9, 2) << " | " << fixed(busbw(c.kind, s, e.seconds, c.nranks) / 1e9, 2)
         << " |\n";
    }
  }
  return md.str();
}

TEST(Calibration, MarkdownTables) {
  const std::string md = markdown();
  if (const char* path = std::getenv("ACCEL_CALIBRATION_MD")) {
    std::ofstream out(path);
    ASSERT_TRUE(out) << path;
    out << md;
    std::cout << "wrote " << path << "\n";
  } else {
    std::cout << md;
  }
}

}  // namespace
}  // namespace accel::sim
