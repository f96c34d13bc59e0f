#!/usr/bin/env python3
"""Candidate physical effects for the spec model, tested leave-one-platform-out.

docs/sim-calibration.md ("Effects tried for the held-out misses") reports what this prints.
Each variant adds one effect to the previous spec model (alpha_beta.py: cost(), derived()), with the extra
coefficients shared by all platforms, and is fitted and evaluated exactly as fit.py does
(the same rows, objective, optimiser and held-out error). Nothing here is shipped: no variant
improved the held-out errors, so none was kept. (The spec model is now NCCL's tuner, fit.py.)

Usage (pure Python 3): python3 sim/calibration/effects.py [variant ...]
Variants: base, ll128, ll128_all, ramp, nvls_split (default: all).

The effects, and where NCCL's behaviour comes from (NVIDIA/nccl sources):
  ll128      NCCL's LL128 protocol on the ring, enabled by default only where GPUs talk over
             NVLink (tuning.cc: typeIntra <= PATH_NVB; Hopper also across PXN NICs), i.e. not
             on the PCIe platform. Its bandwidth is 0.92 of the ring's Simple bandwidth
             (tuning.cc: "busBw * 0.92 /*120.0/128.0*/"); its per-step latency is fitted (one
             value inside a node, one across nodes). Not a candidate for all-reduce where
             NVLS runs: the tuner log of nccl-tests #309 shows NVLS/SIMPLE from 2 MB up.
  ll128_all  as ll128, and also for all-reduce on NVLS platforms (ring LL128 in a node, tree
             LL128 with NVLSTree's steps and bandwidth across nodes).
  ramp       a channel-count ramp: Simple's bandwidth B * min(1, S / S_sat), i.e. time
             alpha + V * max(S, S_sat) / B, with S_sat fitted. (NCCL's enqueue.cc lowers the
             ring/tree channel count only while bytes < nc * nt * threadThreshold, with
             NCCL_SIMPLE_THREAD_THRESHOLD 64 B per thread and 512 threads: 32 KiB per channel,
             so all channels run from ~1-2 MiB; NVLS/NVLSTree use a fixed nvlsChannels.)
  nvls_split NVLSTree's latency as its two NVLS steps inside the node (chunk_nvls at the NVLS
             rate) plus its tree steps across nodes at their own chunk (a new coefficient).
"""
import math
import sys

import alpha_beta as fit  # the previous spec model, which these effects were added to

BASE_COEFFS = list(fit.COEFFS)
EXTRA = {
    "base": [],
    "ll128": [("ll128_intra_us", 2.0, 0.1, 20.0), ("ll128_net_us", 5.0, 0.1, 40.0)],
    "ll128_all": [("ll128_intra_us", 2.0, 0.1, 20.0), ("ll128_net_us", 5.0, 0.1, 40.0)],
    "ramp": [("sat_mb", 8.0, 0.1, 200.0)],
    "nvls_split": [("chunk_tree_mb", 9.0, 0.05, 40.0)],
}
LL128_EFF = 0.92  # NCCL tuning.cc, ring LL128


def make_cost(variant):
    def cost(sp, th, kind, n, size, d=None):
        d = d or fit.derived(sp, th)
        S = float(size)
        nodes = (n + 7) // 8
        steps, vol = fit.ring_steps(kind, n), fit.ring_volume(kind, n)
        ring_bw = d["ring_bw"]
        if sp["domain"] and min(n, 8) > sp["domain"]:
            ring_bw = min(ring_bw, d["cross_bw"])
        lli, lle = fit.LL_INTRA
        lni, lne = fit.LL_NET
        Ss = max(S, th["sat_mb"] * fit.MiB) if variant == "ramp" else S
        cands = []

        def simple(fixed, vol_, bw):
            cands.append(fit.LAUNCH + fixed + vol_ * Ss / bw)

        def ll(steps_, ll_alpha, vol_, bw, eff):
            cands.append(fit.LAUNCH + steps_ * ll_alpha + vol_ * S / (eff * bw))

        ar_nvls = kind == "all_reduce" and sp["nvls"]
        tsteps = 2 + 2 * int(math.ceil(math.log2(nodes))) if nodes > 1 else 0
        tree_bw = (d["tree2_bw"] if nodes == 2 else d["tree3_bw"]) if ar_nvls and nodes > 1 else 0
        if variant in ("ll128", "ll128_all") and not sp["domain"]:  # NVLink platforms only
            if not ar_nvls:
                a = th["ll128_intra_us"] if nodes == 1 else th["ll128_net_us"]
                bw = ring_bw if nodes == 1 else min(d["net_bw"], ring_bw)
                ll(steps, a * 1e-6, vol, bw, LL128_EFF)
            elif variant == "ll128_all":
                if nodes == 1:
                    ll(steps, th["ll128_intra_us"] * 1e-6, vol, ring_bw, LL128_EFF)
                else:
                    ll(tsteps, th["ll128_net_us"] * 1e-6, vol, tree_bw, LL128_EFF)
        if nodes == 1:
            simple(steps * d["ring_alpha"], vol, ring_bw)
            ll(steps, lli, vol, ring_bw, lle)
            if ar_nvls:
                simple(2 * d["nvls_alpha"], (n + 1.0) / n, d["nvls_rate"])
            return min(cands)
        if ar_nvls:
            if variant == "nvls_split":
                lat = 2 * d["nvls_alpha"] + (tsteps - 2) * th["chunk_tree_mb"] * 1e6 / d["net_bw"]
            else:
                lat = tsteps * d["tree_alpha"]
            simple(lat, vol, tree_bw)
            ll(tsteps, lni, vol, tree_bw, lne)
            return min(cands)
        bw = min(d["net_bw"], ring_bw)
        simple(steps * d["inter_alpha"], vol, bw)
        ll(steps, lni, vol, bw, lne)
        return min(cands)

    return cost


def run(variant):
    fit.COEFFS = BASE_COEFFS + EXTRA[variant]
    fit.NAMES = [c[0] for c in fit.COEFFS]
    fit.cost = make_cost(variant)
    rows = fit.load_rows()
    platforms = sorted({r["platform"] for r in rows}, key=list(fit.PLATFORMS).index)
    out = {}
    for held in platforms:
        th, _ = fit.fit([r for r in rows if r["platform"] != held])
        worst = 0.0
        for r in rows:
            if r["platform"] == held and r["size"] >= fit.FROM:
                model = fit.cost(fit.PLATFORMS[held], th, r["kind"], r["n"], r["size"])
                worst = max(worst, abs(r["t"] / model - 1))
        out[held] = worst
    th, v = fit.fit(rows)
    return out, th, v


def main():
    variants = sys.argv[1:] or list(EXTRA)
    results = {v: run(v) for v in variants}
    platforms = list(results[variants[0]][0])
    print("max held-out |model busbw / measured - 1|, rows >= 16 MiB")
    print(f"{'platform':15s}" + "".join(f"{v:>12s}" for v in variants))
    for p in platforms:
        print(f"{p:15s}" + "".join(f"{results[v][0][p] * 100:11.1f}%" for v in variants))
    print(f"{'within 10%':15s}" + "".join(f"{sum(e <= 0.10 for e in results[v][0].values()):12d}" for v in variants))
    for v in variants:
        out, th, obj = results[v]
        print(f"{v}: fitted on all, objective {obj:.5f}: " + " ".join(f"{k}={x:.4g}" for k, x in th.items()))


if __name__ == "__main__":
    main()
