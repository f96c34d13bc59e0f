#!/usr/bin/env python3
"""Fit the spec model's coefficients and evaluate them leave-one-platform-out.

The spec model (docs/sim-calibration.md, "Prediction from the spec sheet: NCCL's tuner as the
spine"): every platform is described by its spec sheet only (GPU generation, NVLink/PCIe
links as NCCL's topology rates them, NVLink SHARP or not, NICs per node and their line rate,
node count). NCCL's own tuner (src/graph/tuning.cc: base and per-hop latencies per algorithm
and protocol, per-architecture bandwidth caps, its corrections) estimates every (algorithm,
protocol) on the graph the spec implies and picks the fastest, as NCCL does; seven
coefficients shared by all platforms turn NCCL's estimate of its choice into the time a real
run takes (k_*: latency multipliers per protocol; eta_*: bandwidth efficiencies). The same
tables and formulas are in sim/cost.cpp (nccl_tuner_table, topology_from_spec);
tests/sim/test_calibration.cpp recomputes every number this script writes with the C++ code
and fails when they disagree.

Usage (pure Python 3, no packages; ~45 s):
    python3 sim/calibration/fit.py            # writes sim/calibration/holdout.csv, holdout_rows.csv
    python3 sim/calibration/fit.py --print    # also prints the held-out errors
    python3 sim/calibration/fit.py --in-sample  # the spine fitted on each calibrated platform alone

For each platform P (see PLATFORMS): fit the coefficients on the rows (from 1 MiB) of every
other platform, predict P's rows from P's spec, record the error. Then fit on all platforms:
those are the coefficients sim/cost.cpp ships (spec_coefficients()).
"""
import csv
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CSV = os.path.join(HERE, "nccl_tests.csv")
OUT = os.path.join(HERE, "holdout.csv")
ROWS_OUT = os.path.join(HERE, "holdout_rows.csv")

MiB = 1 << 20
GB = 1e9
LAUNCH = 10e-6          # fixed cost of a call, as every preset (sim/cost.cpp kLaunch)
FROM = 16 * MiB         # the target applies from 16 MiB up
MID = 1 * MiB           # issue 38's second target: from 1 MiB, within 20%

# ---------------------------------------------------------------------------------------
# Platforms: a platform is one preset of sim/cost.cpp = GPU generation and intra-node link,
# network fabric (NIC count and line rate) and node count. Its spec is what a data sheet
# gives; nothing in it is fitted. Keys are the CSV's preset column.
#   link: per-GPU, per-direction bandwidth of the GPU's link (GB/s): NVLink 4 (H100, H200)
#         18 links x 25 GB/s = 450; NVLink 3 (A100) 12 x 25 = 300; PCIe 4.0 x16
#         16 GT/s x 16 lanes x 128/130 / 8 = 31.5
#   nvls: NVLink SHARP (NVSwitch gen 3, H100/H200)
#   domain, cross: PCIe hosts: GPUs per PCIe domain, and the fraction of the ring bandwidth
#         left when a ring crosses the CPU interconnect (0.8, NVIDIA/nccl #1639)
#   nics, nic_gbps: network adapters per node and their line rate (Gb/s)
H100 = dict(link=450.0, nvls=True, domain=0, cross=1.0, cc=90, nccl_link=18 * 20.6, nvlink=True)
A100 = dict(link=300.0, nvls=False, domain=0, cross=1.0, cc=80, nccl_link=12 * 20.0, nvlink=True)
PCIE4 = dict(link=31.5, nvls=False, domain=4, cross=0.8, cc=89, nccl_link=24.0, nvlink=False)
# GH200 Grace Hopper, four to a node (HPE Cray EX254n): the H100's 18 NVLink 4 links,
# all-to-all between the four GPUs (no NVSwitch, so no NVLS)
GH200 = dict(link=450.0, nvls=False, domain=0, cross=1.0, cc=90, nccl_link=18 * 20.6, nvlink=True, gpn=4)
# cc: the GPU's compute capability (H100 9.0, A100 8.0, RTX 4090 8.9), which picks the row of
#     NCCL's per-architecture tables.
# nccl_link: the GPU's link as NCCL's topology rates it (GB/s, src/graph/topo.h): NVLink links x
#     SMxx_NVLINK_BW (Hopper 18 x 20.6, Ampere 12 x 20.0), PCIe by generation and width (NCCL's
#     PCI table: Gen3 x16 = PCI_BW 12, Gen4 x16 24). A NIC: its speed / 8 (400 Gb/s = 50 GB/s).


def spec(base, nodes=1, nics=0, nic_gbps=0.0):
    s = dict(gpn=8)  # GPUs per node
    s.update(base)
    s.update(nodes=nodes, nics=nics, nic_gbps=nic_gbps)
    return s


PLATFORMS = {
    "8xH100": spec(H100),
    "8xA100": spec(A100),
    "8xPCIe": spec(PCIE4),
    "2x8xH100-IB": spec(H100, 2, 8, 400),
    "4x8xH100-IB": spec(H100, 4, 8, 400),
    "8x8xH100-IB": spec(H100, 8, 8, 400),
    "10x8xH100-IB": spec(H100, 10, 8, 400),
    "2x8xH100-RoCE": spec(H100, 2, 16, 200),   # OCI BM.GPU.H100.8: 16 x 200G RoCE
    "2x8xH100-EFA": spec(H100, 2, 32, 100),    # AWS p5.48xlarge: 32 x 100G EFA (3200 Gbps)
    "4x8xA100-IB": spec(A100, 4, 8, 200),      # HGX A100, 8 x HDR 200G
    "2x4xGH200-Slingshot": spec(GH200, 2, 4, 200),  # CSCS Alps: 4 Slingshot 11 NICs (200G) a node
    "2x8xH200-RoCE": spec(H100, 2, 16, 200),   # OCI H200 (the H100's NVLink 4): 3200 Gb/s RoCE a node
    "2x8xA100-EFA": spec(A100, 2, 4, 100),     # AWS p4de.24xlarge: 4 x 100G EFA (400 Gbps)
}

# Datasets that are not out-of-the-box nccl-tests on the platform: tuned or forced settings,
# or not nccl-tests at all. Neither fitted nor evaluated.
EXCLUDED = {"N2-ring", "N8-tuned", "N11", "P1-asus4", "P1-asus8", "P1-epyc8"}
# Evaluated when held out, never fitted on: A3-CW (IB SHARP on, and the rank count printed by the
# job name disagrees with the table; docs/sim-calibration-sources.md, A3); H6 and A4, found after
# the model and its coefficients were fixed and kept as a test of the shipped coefficients on
# platforms they never saw (fitting on them too: docs/sim-calibration.md, "Per row").
EVAL_ONLY = {"A3-CW", "H6", "A4"}

# ---------------------------------------------------------------------------------------
# NCCL's tuner: src/graph/tuning.cc of NCCL 2.2x (ncclTunerConstantsDefaults, ncclTopoTuneModel,
# ncclTopoGetAlgoTime; the version with PAT and nvlsEfficiency). Latencies in us, bandwidths in
# GB/s, protocols in NCCL's order (LL, LL128, Simple). sim/cost.cpp holds the same tables.
PROTOS = ("LL", "LL128", "Simple")
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0)}
HW_LAT = {
    "nvlink": {"tree": (.6, 1.25, 4.0), "ring": (.6, 1.9, 3.4), "nvls": (0, 0, 25), "nvls_tree": (0, 0, 25)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0)},
    "net": {"tree": (5.0, 8.5, 14), "ring": (2.7, 4.0, 14.0), "nvls": (0, 0, 18), "nvls_tree": (0, 0, 20.9)},
}
# [architecture][1 node, 2 nodes, more]; Ampere row for 8.x, Hopper for 9.x. LL across nodes
# depends on the CPU: the Intel row (x86 Intel hosts, as DGX H100/A100).
LL_MAX_ONE_NODE = {"ampere": 87.7, "hopper": 141.0}
LL_MAX_INTEL = (39.0, 39.0, 20.4)
RING_LL128_PER_CH = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 36.7)}
TREE_LL128_PER_CH = {"ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0)}
TREE_PER_CH = {"ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0)}
NVLS_TREE_PER_CH = {"ampere": (24.0, 23.6, 17.8), "hopper": (0.0, 57.7, 45.5)}
NVLS_EFFICIENCY = {"ampere": 0.0, "hopper": 0.85}
TREE_CORRECTION = (  # per protocol, by log2(bytes / 64), 64 B .. 256 MiB
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9))
# The graph NCCL's search finds, as the spec implies it: 16 channels (NVLS: nvlsChannels, "NVLS
# should not need more than 16 channels"), the link's rate spread over them (nChannels * bw = the
# GPU's link, or the node's NICs across nodes).
CHANNELS = 16
NET_OVERHEAD_US = 1.0   # getNetOverhead on x86 Intel (x3 for Simple)


def log2i(x):
    x = int(x)
    l = 0
    while x > 1:
        x >>= 1
        l += 1
    return l


def nccl_table(sp, kind, n, size, nvls=True):
    """NCCL's (latency us, algorithm bandwidth GB/s) per (algorithm, protocol) it would consider
    for this collective, ncclTopoGetAlgoTime's corrections applied (tree correction, ring plateau)."""
    arch = "hopper" if sp["cc"] >= 90 else "ampere"
    nodes = (n + sp["gpn"] - 1) // sp["gpn"]
    ppn = n // nodes
    intra = sp["nccl_link"]
    if sp["domain"] and min(n, sp["gpn"]) > sp["domain"]:
        intra *= sp["cross"]   # a ring across the CPU interconnect
    inter = sp["nics"] * sp["nic_gbps"] / 8 if nodes > 1 else intra
    intra_hw = "nvlink" if sp["nvlink"] else "pci"
    nsteps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    idx = min(nodes, 3) - 1
    ll_max = LL_MAX_ONE_NODE[arch] if nodes == 1 else LL_MAX_INTEL[idx]
    algos = ["ring"]
    if kind == "all_reduce":
        algos.append("tree")
        if sp["nvls"] and nvls:
            algos.append("nvls" if nodes == 1 else "nvls_tree")
    out = {}
    for a in algos:
        for pi, p in enumerate(PROTOS):
            if a in ("nvls", "nvls_tree") and p != "Simple":
                continue
            if p == "LL128" and not sp["nvlink"]:
                continue   # LL128 only where the GPUs talk over NVLink (typeIntra <= PATH_NVB)
            # the graph's per-channel rates (src/graph/search.cc, ncclTopoCompute): the search
            # starts with bwIntra = bwInter and raises both together for a ring; only a tree's
            # bwIntra may grow, to twice bwInter
            g_inter = min(inter, intra)
            g_intra = intra if nodes == 1 else min(intra, (2 if a == "tree" else 1) * g_inter)
            bw = g_intra if nodes <= 2 else g_inter
            if a in ("nvls", "nvls_tree"):
                ib = intra * NVLS_EFFICIENCY[arch] * (CHANNELS - 1) / CHANNELS * 2.0
                xb = inter * (2.0 if (nodes <= 2 and a == "nvls_tree") else 1.0) if nodes > 1 else float("inf")
                cap = CHANNELS * NVLS_TREE_PER_CH[arch][idx] if a == "nvls_tree" else float("inf")
                bw = min(ib, xb, cap)
            bus = bw
            if a == "ring" and p == "LL":
                bus = min(ll_max, bus * .5)
            if a == "ring" and p == "LL128":
                bus = min(bus * 0.92, CHANNELS * RING_LL128_PER_CH[arch][idx])
            if a == "tree":
                bus = min(bus * .92, CHANNELS * TREE_PER_CH[arch][idx])
            if a == "tree" and p == "LL":
                bus = min(bus / 3.8, ll_max)
            if a == "tree" and p == "LL128":
                bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0), CHANNELS * TREE_LL128_PER_CH[arch][idx])
            algbw = bus * (n / nsteps if a in ("ring", "nvls", "nvls_tree") else .5)
            lat = BASE_LAT[a][pi]
            intra_lat = HW_LAT[intra_hw][a][pi]
            inter_lat = HW_LAT["net"]["tree" if ppn == 1 else a][pi]
            if a == "ring":
                il = intra_lat
                if nodes > 1:
                    il = max(il, NET_OVERHEAD_US * (3 if p == "Simple" else 1))
                ninter = 0 if nodes == 1 else (2 * (nodes - 1) if kind == "all_reduce" else nodes - 1)
                lat += (nsteps - ninter) * il + ninter * inter_lat
            elif a == "tree":
                lat += 2 * ((ppn - 1) * intra_lat + log2i(nodes) * inter_lat)
            elif a == "nvls":
                lat = intra_lat
            else:
                lat += intra_lat + 2 * log2i(nodes) * inter_lat
            ls = log2i(size >> 6)
            if a == "tree" and ls < 23:
                algbw *= TREE_CORRECTION[pi][ls]
            if a == "ring" and p == "Simple" and nodes > 1 and kind == "all_reduce" and size // (CHANNELS * n) >= 64:
                lat *= 1.4   # "plateau effect of ring" (compute capability >= 8.0)
            out[(a, p)] = (lat, algbw)
    return out


def nccl_choice(table, size):
    """The (algorithm, protocol) NCCL's tuner picks: the least lat + bytes / (1000 * bw)."""
    return min(table, key=lambda k: table[k][0] + size / (1000.0 * table[k][1]))


# ---------------------------------------------------------------------------------------
# The coefficients fitted on top of NCCL's estimate: (name, initial value, lower, upper). A
# call's time is LAUNCH + k_proto * NCCL's latency + bytes / (eta * NCCL's bandwidth), for the
# (algorithm, protocol) NCCL picks; eta is the resource's (NVLS/NVLSTree, the network across
# nodes, the GPU's link inside one), times eta_ll for LL and LL128.
COEFFS = [
    ("k_ll", 1.5, 0.1, 5.0),        # real latency / NCCL's, LL protocol
    ("k_ll128", 1.5, 0.1, 5.0),     # ... LL128
    ("k_simple", 1.5, 0.1, 5.0),    # ... Simple
    ("eta_intra", 0.95, 0.3, 1.5),  # real bandwidth / NCCL's, inside one node
    ("eta_net", 0.82, 0.3, 1.5),    # ... across nodes (ring, tree)
    ("eta_nvls", 0.8, 0.3, 1.5),    # ... NVLS and NVLSTree
    ("eta_ll", 0.9, 0.2, 1.5),      # ... and for LL/LL128 on top of the above
]
NAMES = [c[0] for c in COEFFS]


def ring_volume(kind, n):
    return 2.0 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n


def charged(sp, th, kind, n, size):
    """What the model charges a collective from: (algorithm, protocol) NCCL picks, NCCL's latency
    (us) and bandwidth (GB/s) for it, and the fitted latency multiplier and efficiency on top."""
    table = nccl_table(sp, kind, n, size)
    a, p = nccl_choice(table, size)
    lat, bw = table[(a, p)]
    nodes = (n + sp["gpn"] - 1) // sp["gpn"]
    k = th["k_ll"] if p == "LL" else th["k_ll128"] if p == "LL128" else th["k_simple"]
    eta = th["eta_nvls"] if a in ("nvls", "nvls_tree") else th["eta_net"] if nodes > 1 else th["eta_intra"]
    if p != "Simple":
        eta *= th["eta_ll"]
    return a, p, lat, bw, k, eta


def cost(sp, th, kind, n, size):
    """Seconds for one collective, as collective_cost in C++ on a spec topology."""
    _, _, lat, bw, k, eta = charged(sp, th, kind, n, size)
    return LAUNCH + (k * lat + size / (1000.0 * bw * eta)) * 1e-6


# ---------------------------------------------------------------------------------------
def load_rows():
    rows = []
    with open(CSV) as f:
        lines = [l for l in f if l.strip() and not l.startswith("#")]
    for r in csv.DictReader(lines):
        if r["dataset"] in EXCLUDED or r["preset"] not in PLATFORMS:
            continue
        if not r["busbw_gbps"]:
            continue
        rows.append(dict(dataset=r["dataset"], platform=r["preset"], kind=r["collective"], n=int(r["nranks"]),
                         size=int(r["size_bytes"]), t=float(r["time_us"]) * 1e-6, busbw=float(r["busbw_gbps"])))
    return rows


def theta_of(x):
    return {name: x[i] for i, name in enumerate(NAMES)}


def clamp(x):
    return [min(max(v, COEFFS[i][2]), COEFFS[i][3]) for i, v in enumerate(x)]


def objective(x, rows_by_dataset):
    th = theta_of(clamp(x))
    total = 0.0
    worst = 0.0
    for ds, rs in rows_by_dataset.items():
        sp = PLATFORMS[rs[0]["platform"]]
        acc = 0.0
        for r in rs:
            e = math.log(cost(sp, th, r["kind"], r["n"], r["size"]) / r["t"])
            acc += e * e
            worst = max(worst, abs(e))
        total += acc / len(rs)
    # mean squared log error per dataset, each dataset weighted alike
    return total / len(rows_by_dataset)


def nelder_mead(f, x0, scale=0.25, iters=3000, tol=1e-12):
    n = len(x0)
    pts = [list(x0)]
    for i in range(n):
        p = list(x0)
        p[i] = p[i] * (1 + scale) if p[i] != 0 else scale
        pts.append(p)
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda k: vals[k])
        pts = [pts[k] for k in order]
        vals = [vals[k] for k in order]
        if vals[-1] - vals[0] < tol:
            break
        c = [sum(p[i] for p in pts[:-1]) / n for i in range(n)]
        xr = [c[i] + (c[i] - pts[-1][i]) for i in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [c[i] + 2 * (c[i] - pts[-1][i]) for i in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [c[i] + 0.5 * (pts[-1][i] - c[i]) for i in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for k in range(1, n + 1):
                    pts[k] = [pts[0][i] + 0.5 * (pts[k][i] - pts[0][i]) for i in range(n)]
                    vals[k] = f(pts[k])
    k = min(range(n + 1), key=lambda j: vals[j])
    return pts[k], vals[k]


def fit(rows):
    by_ds = {}
    for r in rows:
        if r["size"] >= MID and r["dataset"] not in EVAL_ONLY:
            by_ds.setdefault(r["dataset"], []).append(r)
    f = lambda x: objective(x, by_ds)
    x = [c[1] for c in COEFFS]
    best = f(x)
    for scale in (0.3, 0.1, 0.03, 0.3, 0.1, 0.03):  # restarts from the best point so far
        x2, v = nelder_mead(f, x, scale=scale)
        if v <= best:
            x, best = clamp(x2), v
    return theta_of(clamp(x)), best


def main():
    rows = load_rows()
    platforms = sorted({r["platform"] for r in rows}, key=list(PLATFORMS).index)
    out = []
    per_row = []  # (held-out platform, row, model busbw, error): every row of the held-out platform
    for held in platforms + ["(none)"]:
        train = [r for r in rows if r["platform"] != held]
        th, v = fit(train)
        worst = 0.0
        for r in rows:
            if r["platform"] != held:
                continue
            sp = PLATFORMS[held]
            model_busbw = r["busbw"] * r["t"] / cost(sp, th, r["kind"], r["n"], r["size"])
            err = model_busbw / r["busbw"] - 1
            per_row.append((held, r, model_busbw, err))
            if r["size"] >= FROM:
                worst = max(worst, abs(err))
        out.append((held, th, worst))
        if "--print" in sys.argv:
            print(f"{held:15s} objective {v:.5f}  max held-out busbw error >= 16 MiB {worst * 100:6.1f}%  " +
                  " ".join(f"{k}={th[k]:.4g}" for k in NAMES), flush=True)
    with open(OUT, "w") as f:
        f.write("# Written by sim/calibration/fit.py: the spec model's coefficients (NCCL's tuner with fitted\n"
                "# latency multipliers k_* and bandwidth efficiencies eta_*) fitted on every platform\n"
                "# but the one held out (held_out = (none): fitted on all; sim/cost.cpp ships that row), and the\n"
                "# largest |model busbw / measured busbw - 1| over the held-out platform's rows >= 16 MiB as\n"
                "# this script computes it. tests/sim/test_calibration.cpp recomputes it with the C++ model.\n")
        f.write("held_out," + ",".join(NAMES) + ",max_error\n")
        for held, th, worst in out:
            f.write(held + "," + ",".join(f"{th[k]:.6g}" for k in NAMES) + f",{worst:.6f}\n")
    with open(ROWS_OUT, "w") as f:
        f.write("# Written by sim/calibration/fit.py: every published row of every platform, predicted by the\n"
                "# spec model fitted on the other platforms (leave-one-platform-out), all sizes: error = model\n"
                "# busbw / measured busbw - 1. Issue 38's targets: |error| <= 0.10 from 16 MiB, <= 0.20 from 1 MiB.\n")
        f.write("held_out,dataset,collective,nranks,size_bytes,measured_busbw_gbps,model_busbw_gbps,error\n")
        for held, r, model, err in per_row:
            f.write(f"{held},{r['dataset']},{r['kind']},{r['n']},{r['size']},{r['busbw']:.2f},{model:.2f},{err:.4f}\n")
    if "--print" in sys.argv:
        print("held-out rows: platform, rows >= 16 MiB within 10%, rows 1-16 MiB within 20%, worst of each")
        for held in platforms:
            big = [e for h, r, m, e in per_row if h == held and r["size"] >= FROM]
            mid = [e for h, r, m, e in per_row if h == held and MID <= r["size"] < FROM]
            fmt = lambda es, lim: (f"{sum(abs(e) <= lim for e in es)}/{len(es)} (worst {max((abs(e) for e in es), default=0) * 100:.1f}%)")
            print(f"  {held:15s} {fmt(big, 0.10):24s} {fmt(mid, 0.20)}")


def in_sample():
    """The spine fitted per calibrated platform on its own primary datasets (what shipping it
    for the calibrated presets would give), against which the presets' per-dataset alpha-beta
    fits are compared in docs/sim-calibration.md. Prints; writes nothing."""
    with open(CSV) as f:
        lines = [l for l in f if l.strip() and not l.startswith("#")]
    role = {r["dataset"]: r["role"] for r in csv.DictReader(lines)}
    rows = load_rows()
    for plat in ("8xH100", "8xA100", "8xPCIe", "2x8xH100-IB", "4x8xH100-IB", "8x8xH100-IB", "10x8xH100-IB"):
        prim = [r for r in rows if r["platform"] == plat and role[r["dataset"]].startswith("primary")]
        th, _ = fit(prim)
        out = []
        for ds in sorted({r["dataset"] for r in prim}):
            errs = [abs(r["t"] / cost(PLATFORMS[plat], th, r["kind"], r["n"], r["size"]) - 1)
                    for r in prim if r["dataset"] == ds and r["size"] >= FROM]
            out.append(f"{ds} {max(errs) * 100:.1f}%")
        print(f"{plat:14s} max error >= 16 MiB, in-sample: " + ", ".join(out), flush=True)


if __name__ == "__main__":
    if "--in-sample" in sys.argv:
        in_sample()
    else:
        main()
