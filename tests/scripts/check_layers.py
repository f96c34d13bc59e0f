#!/usr/bin/env python3
"""check_layers: fails when an #include crosses a floor of the library the wrong way.

The floors, from the bottom (docs/architecture.md, "Floors"):

  base      base/                      torch-free: status, files, text helpers
  comm      comm/                      communicators and their backends, the store, rendezvous
  sim       sim/                       the simulator: depends on comm and base only, torch-free
  runtime   runtime/ (the rest)        the Accelerator, models, optimizers, strategies, checkpoints
  capi      capi/                      the C ABI over the runtime: include/accel/accel.h's definitions
  tools     tools/                     the `accel` command

A file may include headers of its own floor and of the floors below it, with these rules
besides: the public header (include/accel/accel.h) is included by capi/ and tools/ only
(the runtime reports its version through runtime/, not the ABI's), and capi/ includes no
sim/ header (running a simulated world belongs to the runtime). Two more rules keep the floors'
promises: base/ and sim/ include no libtorch header (<torch/...>, <ATen/...>, <c10/...>), and
in the runtime and the C ABI, a backend's header (comm/gloo/, comm/nccl/, comm/c10d/) is
included only by runtime/world.cpp, the one file that names the backends (sim/nccl/
implements comm/nccl/'s mirror of nccl.h; `accel env` names the libraries the nccl backend
loads); libtorch's version (runtime/torch_version.h) is read by runtime/compat.h alone, where
every difference between libtorch versions lives. Bindings, tests, examples and benchmarks are outside the floors.

Crossings the code still has are listed in KNOWN below, each with the step of issue 34 that
removes it. The check fails on a crossing not listed and on a listed one that is gone (delete
its line: the list only shrinks), so the rules hold from now on and the list says exactly
what is left.

  tests/scripts/check_layers.py [--root DIR] [--list]     (--list: every crossing found, listed or not)
  tests/scripts/check_layers.py --selftest
"""
import argparse
import pathlib
import re
import sys

FLOORS = ["base", "comm", "sim", "runtime", "capi", "tools"]
PUBLIC_HEADER = "include/accel/accel.h"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>', re.M)
TORCH_HEADERS = ("torch/", "ATen/", "c10/")
TORCH_FREE = ("base", "sim")
BACKEND_HEADERS = ("comm/gloo/", "comm/nccl/", "comm/c10d/")
NAMES_BACKENDS = ("runtime/world.cpp",)
VERSION_HEADER = "runtime/torch_version.h"  # libtorch's version: read by runtime/compat.h alone
KNOWS_VERSIONS = ("runtime/compat.h",)

# file -> headers it may still include against the rules (crossings still to remove; the
# list only shrinks). Empty since issue 34's item 1: every rule holds.
KNOWN = {}


# (path prefix, floor), the first that matches: comm/ before runtime/
PREFIXES = [("base/", "base"), ("comm/", "comm"), ("sim/", "sim"), ("runtime/", "runtime"),
            ("capi/", "capi"), ("tools/", "tools")]


def floor_of(rel: str):
    return next((floor for prefix, floor in PREFIXES if rel.startswith(prefix)), None)


def resolve(header: str, src: pathlib.Path, root: pathlib.Path):
    """The repository path of an #include "..." (from the root or the including file's folder)."""
    for base in (root, src.parent, root / "include"):
        p = (base / header).resolve()
        if p.is_file():
            try:
                return p.relative_to(root).as_posix()
            except ValueError:
                return None
    return None


def allowed(frm: str, to: str, rel: str = "") -> bool:
    if to == PUBLIC_HEADER:
        return frm in ("capi", "tools")
    target = floor_of(to)
    if target is None:
        return True  # vendored or generated headers outside the floors
    if frm == "capi" and target == "sim":
        return False
    if to.startswith(BACKEND_HEADERS) and frm in ("runtime", "capi") and rel not in NAMES_BACKENDS:
        return False
    if to == VERSION_HEADER and rel not in KNOWS_VERSIONS:
        return False
    return FLOORS.index(target) <= FLOORS.index(frm)


def crossings(root: pathlib.Path):
    found = {}
    for p in sorted(root.glob("**/*")):
        if p.suffix not in (".h", ".hpp", ".cpp", ".cc", ".c") or not p.is_file():
            continue
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("build", ".git")):
            continue
        frm = floor_of(rel)
        if frm is None:
            continue
        text = p.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            to = resolve(m.group(1), p, root)
            if to is None or to == rel:
                continue
            if not allowed(frm, to, rel):
                found.setdefault(rel, []).append(to)
        if frm in TORCH_FREE:
            for m in SYSTEM_INCLUDE.finditer(text):
                if m.group(1).startswith(TORCH_HEADERS):
                    found.setdefault(rel, []).append("<" + m.group(1) + ">")
    return found


def what(to: str) -> str:
    if to == PUBLIC_HEADER:
        return "the public header"
    if to.startswith("<"):
        return "libtorch (its floor is torch-free)"
    if to.startswith(BACKEND_HEADERS):
        return "a backend's header (only runtime/world.cpp names the backends)"
    if to == VERSION_HEADER:
        return "libtorch's version (only runtime/compat.h knows the versions' differences)"
    return floor_of(to)


def check(root: pathlib.Path, known: dict, out=sys.stdout) -> int:
    found = crossings(root)
    bad = 0
    for f, tos in sorted(found.items()):
        for to in tos:
            if to not in known.get(f, []):
                print(f"check_layers: {f} includes {to}: {floor_of(f)} may not include "
                      f"{what(to)} (docs/architecture.md, 'Floors')", file=out)
                bad += 1
    for f, tos in sorted(known.items()):
        for to in tos:
            if to not in found.get(f, []):
                print(f"check_layers: {f} no longer includes {to}: delete that line of KNOWN in "
                      f"tests/scripts/check_layers.py (the list only shrinks)", file=out)
                bad += 1
    n_known = sum(len(v) for v in known.values())
    print(f"check_layers: {sum(len(v) for v in found.values())} crossings, {n_known} of them known, "
          f"{bad} problem(s)", file=out)
    return 1 if bad else 0


def selftest() -> int:
    import io
    import tempfile
    root = pathlib.Path(tempfile.mkdtemp(prefix="check_layers_"))
    files = {
        "base/files.h": "",
        "runtime/status.h": "",
        "comm/communicator.h": '#include "base/files.h"\n',
        "sim/world.h": '#include "comm/communicator.h"\n',
        "runtime/accelerator.cpp": '#include "sim/world.h"\n#include "base/files.h"\n',
        "capi/context.cpp": '#include "runtime/status.h"\n#include "include/accel/accel.h"\n',
        "include/accel/accel.h": "",
        "comm/gloo/gloo.h": '#include "comm/communicator.h"\n',
        "runtime/world.cpp": '#include "comm/gloo/gloo.h"\n',
        "runtime/torch_version.h": "",
        "runtime/compat.h": '#include "runtime/torch_version.h"\n',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    failures = []

    def expect(name, want_rc, known):
        out = io.StringIO()
        rc = check(root, known, out)
        if rc != want_rc:
            failures.append(f"{name}: exit {rc}, expected {want_rc}\n{out.getvalue()}")

    expect("clean tree", 0, {})
    (root / "sim/world.h").write_text('#include "runtime/status.h"\n')  # sim -> runtime
    expect("sim including runtime", 1, {})
    expect("a known crossing", 0, {"sim/world.h": ["runtime/status.h"]})
    (root / "sim/world.h").write_text("")
    expect("a stale entry", 1, {"sim/world.h": ["runtime/status.h"]})
    (root / "runtime/status.h").write_text('#include "include/accel/accel.h"\n')  # runtime -> ABI
    expect("runtime including accel.h", 1, {})
    (root / "runtime/status.h").write_text("")
    (root / "capi/context.cpp").write_text('#include "sim/world.h"\n')  # capi -> sim
    expect("capi including sim", 1, {})
    (root / "capi/context.cpp").write_text("")
    (root / "comm/communicator.h").write_text('#include "runtime/status.h"\n')  # comm -> runtime
    expect("comm including runtime", 1, {})
    (root / "comm/communicator.h").write_text("")
    (root / "sim/world.h").write_text("#include <c10/core/Allocator.h>\n")  # sim -> libtorch
    expect("sim including libtorch", 1, {})
    (root / "sim/world.h").write_text("")
    (root / "runtime/accelerator.cpp").write_text('#include "comm/gloo/gloo.h"\n')  # a backend outside world.cpp
    expect("a backend named outside runtime/world.cpp", 1, {})
    (root / "runtime/accelerator.cpp").write_text("")
    (root / "runtime/accelerator.cpp").write_text('#include "runtime/torch_version.h"\n')  # a version check outside compat.h
    expect("libtorch's version read outside compat.h", 1, {})
    (root / "runtime/accelerator.cpp").write_text("")
    expect("clean again", 0, {})
    import shutil
    shutil.rmtree(root, ignore_errors=True)
    if failures:
        print("check_layers --selftest FAILED:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    print("check_layers --selftest: every case behaved")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parents[2])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    root = a.root.resolve()
    if a.list:
        for f, tos in sorted(crossings(root).items()):
            for to in tos:
                print(f"{f} -> {to}{'' if to in KNOWN.get(f, []) else '   (not known)'}")
        return 0
    return check(root, KNOWN, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
