#!/usr/bin/env python3
"""Fails when a function of the C ABI has no binding in a language.

Reads every function declared `ACCEL_API` in include/accel/accel.h and looks for a call to
it in each binding's own layer (not in the hand-written declarations):

  python  `lib.NAME(` or `lib.NAME,` in bindings/python/src/**.py, outside the cdef text
          (the file _ffi.py holds the declarations and is not searched)
  rust    `sys::NAME(` in bindings/rust/src/**.rs other than src/sys.rs (the mirror)
  go      `C.NAME(` in bindings/go/**.go files that are not tests, or `NAME(` inside the
          C code of a cgo preamble (a wrapper written in C) of such a file

Each binding's README.md must also name every function (its C → language table), so the
table a user reads cannot fall behind the header: a name missing there is reported as
`missing in LANG's README`.

Usage: check_coverage.py [--root DIR] [--header FILE] [--lang python|rust|go ...]
(--header: another header to read the names from.) --selftest checks the checker: a function
appended to the header must be reported missing in every language (exit 0 when it is).
Prints one line per language (bound / total) and every missing name; exits 1 when any is
missing, 2 when the header or a binding directory cannot be read.
"""
import argparse
import pathlib
import re
import sys

API_RE = re.compile(r"ACCEL_API\s+[^;(]*?\b(accel_[a-z0-9_]+)\s*\(", re.S)


def header_functions(header: pathlib.Path, extra: str = "") -> list:
    text = header.read_text() + extra
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)  # comments mention names too
    text = re.sub(r"#define[^\n]*(\\\n[^\n]*)*", " ", text)  # and so does ACCEL_API's own definition
    names = API_RE.findall(text)
    seen, out = set(), []
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def strip_comments(text: str, lang: str) -> str:
    if lang == "python":
        return re.sub(r"#[^\n]*", " ", text)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def python_calls(root: pathlib.Path) -> str:
    parts = []
    for f in sorted((root / "src").rglob("*.py")):
        if f.name == "_ffi.py":
            continue
        parts.append(strip_comments(f.read_text(), "python"))
    return "\n".join(parts)


def rust_calls(root: pathlib.Path) -> str:
    return "\n".join(strip_comments(f.read_text(), "rust") for f in sorted((root / "src").rglob("*.rs"))
                     if f.name != "sys.rs")


GO_PREAMBLE_RE = re.compile(r"/\*(.*?)\*/\s*import\s+\"C\"", re.S)


def go_calls(root: pathlib.Path):
    go_text, c_text = [], []
    for f in sorted(root.rglob("*.go")):
        if f.name.endswith("_test.go") or "examples" in f.relative_to(root).parts:
            continue
        text = f.read_text()
        for m in GO_PREAMBLE_RE.finditer(text):
            c_text.append(m.group(1))
        go_text.append(strip_comments(GO_PREAMBLE_RE.sub(" ", text), "go"))
    return "\n".join(go_text), strip_comments("\n".join(c_text), "c")


def bound(lang: str, root: pathlib.Path, names: list) -> list:
    if lang == "python":
        text = python_calls(root)
        return [n for n in names if not re.search(r"\blib\." + n + r"\s*[(,]", text)]
    if lang == "rust":
        text = rust_calls(root)
        return [n for n in names if not re.search(r"\bsys::" + n + r"\s*\(", text)]
    go_text, c_text = go_calls(root)
    # a wrapper's own declaration `static accel_status w_accel_x(...)` does not match: the
    # name must be called (preceded by something other than an identifier character)
    return [n for n in names
            if not re.search(r"\bC\." + n + r"\s*\(", go_text) and not re.search(r"(?<![\w.])" + n + r"\s*\(", c_text)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = pathlib.Path(__file__).resolve().parent
    ap.add_argument("--root", type=pathlib.Path, default=here.parent, help="the source tree (default: this file's)")
    ap.add_argument("--header", type=pathlib.Path, help="default: ROOT/include/accel/accel.h")
    ap.add_argument("--lang", action="append", choices=["python", "rust", "go"])
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args()
    header = args.header or args.root / "include/accel/accel.h"
    fake = "accel_bound_nowhere"
    try:
        names = header_functions(header, f"\nACCEL_API accel_status {fake}(accel_context *ctx);\n" if args.selftest else "")
    except OSError as e:
        print(f"check_coverage: cannot read {header}: {e}", file=sys.stderr)
        return 2
    if len(names) < 10:
        print(f"check_coverage: found only {len(names)} ACCEL_API functions in {header}: the parser is broken", file=sys.stderr)
        return 2
    failed = False
    for lang in args.lang or ["python", "rust", "go"]:
        root = args.root / "bindings" / lang
        if not root.is_dir():
            print(f"check_coverage: {root} does not exist", file=sys.stderr)
            return 2
        missing = bound(lang, root, names)
        readme = root / "README.md"
        try:
            readme_text = readme.read_text()
        except OSError as e:
            print(f"check_coverage: cannot read {readme}: {e}", file=sys.stderr)
            return 2
        unlisted = [n for n in names if not re.search(r"(?<![\w])" + n + r"(?![\w])", readme_text)]
        if args.selftest:
            ok = missing == [fake] and fake in unlisted
            missing = missing + ([f"README: {fake}"] if fake in unlisted else [])
            print(f"{lang}: {'detects' if ok else 'FAILS to detect'} an unbound function ({missing})")
            failed |= not ok
            continue
        print(f"{lang}: {len(names) - len(missing)}/{len(names)} functions of accel.h bound")
        print(f"{lang}: {len(names) - len(unlisted)}/{len(names)} functions named in {readme.name}")
        for n in missing:
            print(f"  missing in {lang}: {n}")
        for n in unlisted:
            print(f"  missing in {lang}'s README: {n}")
        failed |= bool(missing) or bool(unlisted)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
