#!/usr/bin/env python3
"""binding_overhead: the digits MLP's training step through each binding against C.

Every side runs the same loop (one process, CPU, fp32, 1 thread; MLP [64,128,64,10], AdamW,
a shuffled loader with batch 32; a step is next, forward, cross-entropy, backward, step and
the four tensors released): bench/binding_steps.c for C, and each binding's bench_steps
program (bindings/python/examples/bench_steps.py, bindings/rust/examples/bench_steps.rs,
bindings/go/examples/bench_steps). Each program times N steps after W untimed ones and
prints {"lang":..,"us_per_step":..}. Rounds alternate the languages (the order rotates from
round to round, so drifts of the machine cancel out); a language's figure is the median of
its rounds, and ratio = binding_us / c_us. Targets: 1.05 for Rust and Go, 1.15 for Python.

  bench/binding_overhead.py [--build-dir build] [--python PY] [--rounds 7] [--steps 2000]
                            [--warmup 200] [--quick] [--lang python|rust|go ...]

Prints one JSON line per binding on stdout ("bench":"binding_overhead"); progress on stderr.
Builds the Rust and Go programs first (release; into BUILD/bindings/). A binding whose
toolchain is missing is reported on stderr and left out (exit status 1 at the end).
"""
import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TARGETS = {"python": 1.15, "rust": 1.05, "go": 1.05}


def log(msg):
    print(f"binding_overhead: {msg}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=os.environ.get("ACCEL_BUILD_DIR", "build"))
    ap.add_argument("--python", help="a Python with cffi (default: scripts/pytools's venv)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 500 steps")
    ap.add_argument("--lang", action="append", choices=sorted(TARGETS))
    args, _ = ap.parse_known_args()  # scripts/bench passes its own arguments to everyone
    if args.quick:
        args.rounds, args.steps, args.warmup = 3, 500, 100
    build = (ROOT / args.build_dir).resolve() if not os.path.isabs(args.build_dir) else pathlib.Path(args.build_dir)
    data = ROOT / "examples/data/digits.csv.gz"
    env = dict(os.environ)
    env.update({
        "ACCEL_LIBRARY": str(build / "libaccel.so"), "ACCEL_LIB_DIR": str(build),
        "PYTHONPATH": str(ROOT / "bindings/python/src"), "PYTHONDONTWRITEBYTECODE": "1",
        "CARGO_TARGET_DIR": str(build / "bindings/rust"),
        "CGO_CFLAGS": f"-I{ROOT / 'include'}", "CGO_LDFLAGS": f"-L{build} -Wl,-rpath,{build}",
        "GOPROXY": "off", "GOFLAGS": "-mod=mod", "GOCACHE": str(build / "bindings/go-cache"),
        "GOPATH": str(build / "bindings/gopath"),
        # the Go binding finds libaccel with pkg-config (#cgo pkg-config: accel): the build
        # tree's accel-uninstalled.pc
        "PKG_CONFIG_PATH": os.pathsep.join(p for p in (str(build / "meson-uninstalled"),
                                                       os.environ.get("PKG_CONFIG_PATH", "")) if p),
    })
    c_prog = build / "bench/binding_steps_c"
    if not c_prog.exists():
        log(f"{c_prog} is missing: build it with ninja -C {build}")
        return 1
    programs = {"c": [str(c_prog)]}
    failed = False
    for lang in args.lang or sorted(TARGETS):
        try:
            if lang == "python":
                py = args.python
                if not py:
                    py = subprocess.run([str(ROOT / "scripts/pytools")], check=True, capture_output=True, text=True).stdout.strip()
                programs[lang] = [py, str(ROOT / "bindings/python/examples/bench_steps.py")]
            elif lang == "rust":
                if not shutil.which("cargo"):
                    raise RuntimeError("cargo is not installed (scripts/setup installs it)")
                log("building the Rust program (cargo build --release)")
                subprocess.run(["cargo", "build", "--offline", "--locked", "--release", "--example", "bench_steps"],
                               cwd=ROOT / "bindings/rust", env=env, check=True, stdout=sys.stderr)
                programs[lang] = [str(build / "bindings/rust/release/examples/bench_steps")]
            else:
                if not shutil.which("go"):
                    raise RuntimeError("go is not installed (scripts/setup installs golang-go)")
                log("building the Go program (go build)")
                out = build / "bindings/go-bench_steps"
                subprocess.run(["go", "build", "-o", str(out), "./examples/bench_steps"],
                               cwd=ROOT / "bindings/go", env=env, check=True, stdout=sys.stderr)
                programs[lang] = [str(out)]
        except (RuntimeError, subprocess.CalledProcessError) as e:
            log(f"{lang} left out: {e}")
            failed = True
    langs = list(programs)
    samples = {lang: [] for lang in langs}
    for r in range(args.rounds):
        order = langs[r % len(langs):] + langs[:r % len(langs)]
        for lang in order:
            cmd = programs[lang] + ["--data", str(data), "--warmup", str(args.warmup), "--steps", str(args.steps)]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            line = json.loads(out.strip().splitlines()[-1])
            samples[lang].append(float(line["us_per_step"]))
        log(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{l} {samples[l][-1]:.1f} us" for l in langs))
    c_us = statistics.median(samples["c"])
    for lang in langs:
        if lang == "c":
            continue
        us = statistics.median(samples[lang])
        print(json.dumps({
            "bench": "binding_overhead", "lang": lang, "model": "mlp-64-128-64-10", "batch": 32, "threads": 1,
            "rounds": args.rounds, "steps": args.steps, "c_us": round(c_us, 2), "binding_us": round(us, 2),
            "ratio": round(us / c_us, 3), "overhead_us": round(us - c_us, 2), "target": TARGETS[lang],
            "c_samples": samples["c"], "binding_samples": samples[lang]}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
