#!/usr/bin/env python3
"""check_readme: runs a README's shell commands as written, so a README that drifts fails.

  tests/scripts/check_readme.py [--build-dir BUILD] [--work DIR] [--list] README.md
  tests/scripts/check_readme.py --selftest

Every fenced block whose info string starts with `sh` (```sh, ```sh title, ```bash) is run, in
the README's order, in ONE `bash -euo pipefail` session, as a user types them into one
terminal: a `cd` or an `export` carries over to the next block. The session starts at the
root of a fresh copy of the checkout's tracked files (`git ls-files`; without git, the source
tree without build outputs) made under DIR (default BUILD/readme-check/NAME, emptied first),
in which `build/` is a link to the real build: the state "a fresh checkout, after
scripts/setup and scripts/build" that every binding README starts from.

A block right after the line `<!-- readme-check: skip: REASON -->` is not run; it is listed
with its reason (for what cannot run in CI, such as a system-wide install). Before anything
runs, every command is checked for absolute paths outside the system's own directories
(/usr, /etc, /tmp, /dev, /proc, /bin, /lib, /opt excluded): a path of the machine a README was
written on exists on no user's machine.

The session's environment is the caller's without any ACCEL_* variable (the README must set
what it needs), plus caches that change no command's meaning: CARGO_TARGET_DIR,
GOCACHE, GOPATH (BUILD/bindings/...), GOPROXY=off, GOFLAGS=-mod=mod. Each block's time is
printed; the exit status is the session's (0 when every command succeeded).
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = re.compile(r"^\s*<!--\s*readme-check:\s*skip:\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)(.*)$")
SYSTEM_DIRS = ("/usr", "/etc", "/tmp", "/dev", "/proc", "/bin", "/lib", "/opt", "/sbin", "/var/tmp")
# An absolute path: a slash at a word start followed by a name (not '//' of a URL, not '$X/..').
ABS_PATH = re.compile(r"(?:^|(?<=[\s=:'\"(,])|(?<=-I)|(?<=-L))(/[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]*)*)")


def blocks(text):
    """Yields (line_number, info, body, skip_reason) for every fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info, _ = m.groups()
        start = i
        reason = None
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0:
            s = SKIP.match(lines[j])
            if s:
                reason = s.group(1)
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[0] * len(fence)):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line)
            i += 1
        if i >= len(lines):
            raise SystemExit(f"check_readme: line {start + 1}: a fenced block is never closed")
        i += 1
        yield start + 1, info.lower(), "\n".join(body), reason


def is_shell(info):
    return info in ("sh", "bash", "shell") or info.startswith(("sh,", "sh{", "bash{"))


def machine_paths(body):
    """Absolute paths that belong to the machine a README was written on."""
    found = []
    for line in body.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for m in ABS_PATH.finditer(code):
            p = m.group(1)
            if p == "/" or any(p == d or p.startswith(d + "/") for d in SYSTEM_DIRS):
                continue
            found.append(p)
    return found


def copy_checkout(src, dest):
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        out = subprocess.run(["git", "-C", str(src), "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        skip = {".git", "target", "__pycache__", ".venv", "node_modules"}
        for root, dirs, names in os.walk(src):
            rel = pathlib.Path(root).relative_to(src)
            dirs[:] = [d for d in dirs if d not in skip and not (rel == pathlib.Path(".") and d.startswith("build"))]
            files += [str(rel / n) for n in names]
    for f in files:
        s, d = src / f, dest / f
        if not os.path.lexists(s):
            continue  # deleted in the work tree, not yet in git's index
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d, follow_symlinks=False)  # mtimes kept: cargo's and go's caches stay valid
    return len(files)


def run(readme, build, work, src):
    text = readme.read_text(encoding="utf-8")
    todo, skipped, bad = [], [], []
    for line, info, body, reason in blocks(text):
        if not is_shell(info):
            continue
        if reason:
            skipped.append((line, reason))
            continue
        for p in machine_paths(body):
            bad.append(f"{readme}:{line}: '{p}' is a path of one machine (write it relative to the checkout)")
        todo.append((line, body))
    for line, reason in skipped:
        print(f"check_readme: {readme.name}:{line}: not run: {reason}", flush=True)
    if bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    if not todo:
        print(f"check_readme: {readme}: no sh block to run", file=sys.stderr)
        return 1
    n = copy_checkout(src, work)
    link = work / "build"
    if os.path.lexists(link):
        raise SystemExit(f"check_readme: the checkout has a tracked 'build' path; cannot link the build there")
    if build is not None:
        link.symlink_to(build.resolve(), target_is_directory=True)
    print(f"check_readme: {len(todo)} block(s) of {readme.name}, in a fresh copy of the checkout "
          f"({n} files) at {work}, build/ -> {build}", flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    if build is not None:
        caches = build.resolve() / "bindings"
        env.update(CARGO_TARGET_DIR=str(caches / "rust"), GOCACHE=str(caches / "go-cache"),
                   GOPATH=str(caches / "gopath"), GOPROXY="off", GOFLAGS="-mod=mod")
    script = ["set -euo pipefail", 'readme_block() { printf "\\n== %s ==\\n" "$1"; readme_t0=$SECONDS; }',
              'readme_done() { printf "== %s: %d s ==\\n" "$1" $((SECONDS - readme_t0)); }']
    for line, body in todo:
        tag = f"{readme.name}:{line}"
        script.append(f"readme_block '{tag}'")
        script.append(f"printf '%s\\n' {shell_quote(body)} | sed 's/^/$ /'")
        script.append(body)
        script.append(f"readme_done '{tag}'")
    t0 = time.monotonic()
    rc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work, env=env,
                        stdin=subprocess.DEVNULL).returncode
    verdict = "every command succeeded" if rc == 0 else f"a command failed (exit status {rc})"
    print(f"check_readme: {readme.name}: {verdict}, {time.monotonic() - t0:.0f} s", flush=True)
    return rc


def shell_quote(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def selftest():
    """The checker notices: a failing command, a machine's path, a skip marker, state kept
    between blocks."""
    src = pathlib.Path(tempfile.mkdtemp(prefix="check_readme_src_"))
    work = pathlib.Path(tempfile.mkdtemp(prefix="check_readme_work_"))
    build = pathlib.Path(tempfile.mkdtemp(prefix="check_readme_build_"))
    (src / "hello.txt").write_text("hello\n")
    failures = []

    def case(name, text, want_rc):
        readme = src / "README.md"
        readme.write_text(text)
        rc = run(readme, build, work / name, src)
        if (rc == 0) != (want_rc == 0):
            failures.append(f"{name}: exit status {rc}, expected {'0' if want_rc == 0 else 'non-zero'}")

    ok = "```sh\ncd sub 2>/dev/null || mkdir sub && cd sub\nexport X=1\n```\n\n```sh\ntest \"$X\" = 1\ntest -f ../hello.txt\ntest -d ../build\n```\n"
    case("state_carries", ok, 0)
    case("failing_command", "```sh\ntrue\nfalse\necho never\n```\n", 1)
    case("pipe_failure", "```sh\nfalse | cat\n```\n", 1)
    case("machine_path", "```sh\nls /work/someones-machine/lib\n```\n", 1)
    case("skipped", "<!-- readme-check: skip: needs root -->\n```sh\nfalse\n```\n\n```sh\ntrue\n```\n", 0)
    case("not_shell", "```python\nraise SystemExit(1)\n```\n```sh\ntrue\n```\n", 0)
    case("no_accel_env", "```sh\ntest -z \"${ACCEL_SELFTEST_LEAK:-}\"\n```\n", 0)
    os.environ["ACCEL_SELFTEST_LEAK"] = "1"
    case("no_accel_env_set", "```sh\ntest -z \"${ACCEL_SELFTEST_LEAK:-}\"\n```\n", 0)
    for d in (src, work, build):
        shutil.rmtree(d, ignore_errors=True)
    if failures:
        print("check_readme --selftest FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("check_readme --selftest: every case behaved")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("readme", nargs="?", type=pathlib.Path)
    ap.add_argument("--build-dir", type=pathlib.Path, default=None,
                    help="the build to link as build/ (default: build/ of the README's checkout)")
    ap.add_argument("--work", type=pathlib.Path, help="where the copy is made (emptied first)")
    ap.add_argument("--list", action="store_true", help="print the blocks that would run, run nothing")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--skip-without", metavar="VAR",
                    help="exit 77 (skipped) when the environment has no VAR (scripts/test sets "
                         "ACCEL_TEST_PYTHON only where pip reached PyPI)")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if a.readme is None:
        ap.error("a README is needed")
    if a.skip_without and not os.environ.get(a.skip_without):
        print(f"check_readme: {a.skip_without} is not set (no Python test tools: scripts/test makes "
              f"them with pip where PyPI is reachable): skipped", file=sys.stderr)
        return 77
    readme = a.readme.resolve()
    try:
        src = pathlib.Path(subprocess.run(["git", "-C", str(readme.parent), "rev-parse", "--show-toplevel"],
                                          check=True, capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        src = pathlib.Path(__file__).resolve().parents[2]
    if a.list:
        for line, info, body, reason in blocks(readme.read_text(encoding="utf-8")):
            if is_shell(info):
                print(f"--- line {line}" + (f" (not run: {reason})" if reason else ""))
                print(body)
        return 0
    build = (a.build_dir or src / "build").resolve()
    if not (build / "build.ninja").exists():
        raise SystemExit(f"check_readme: {build} is not a build directory (run scripts/build)")
    rel = readme.relative_to(src)
    work = a.work or build / "readme-check" / rel.parent.as_posix().replace("/", "-")
    # Run the README's copy inside the fresh checkout, so its own path is the checkout's.
    return run(readme, build, work.resolve(), src)


if __name__ == "__main__":
    sys.exit(main())
