#!/usr/bin/env python3
"""The layout of accel's C ABI as a table, and a check that it only ever grows.

The table has one entry a line, `KIND NAME VALUE`, in the header's order:

  struct   accel_options               size=80 align=8
  field    accel_options.seed          offset=16 size=8 type=uint64_t
  version  accel_options               2            (its ACCEL_*_VERSION macro)
  default  accel_options.seed          0            (its ACCEL_*_INIT macro, field by field but
                                                     the version, which `version` holds)
  enum     accel_status                size=4
  const    accel_status.ACCEL_OK       0
  function accel_init                  accel_status (const accel_options *, accel_context **)
  typedef  accel_rank_fn               accel_status (*)(accel_context *, void *)

Sizes, offsets, alignments, enum values and defaults come from a C program the compiler
builds from the header (`probe` writes it), so they are the compiler's, not a guess; the
signatures are parsed from the header here and checked by that same compiler
(__builtin_types_compatible_p), so a signature the parser misread fails the build.

`check` compares today's table with the committed baseline (tests/abi/layout.txt) and
fails on any change to an existing entry. What may be added: functions, typedefs, enum
constants, structs, enums, and fields at the end of a versioned options struct whose
version macro went up (its size and alignment may then grow). Fields appended to a struct
without a version macro (an output struct such as accel_step_result) fail: a program built
against the old header hands the library the shorter struct.

Usage (python3, standard library only):
  layout.py probe HEADER OUT.c           write the probe program for HEADER
  layout.py check PROBE BASELINE         today's table against the baseline (exit 1: broken)
  layout.py update PROBE BASELINE        write today's table to the baseline
  layout.py selftest PROBE               the checker detects deliberate changes
ninja -C build abi-layout-update runs `update` on tests/abi/layout.txt.
"""

import re
import subprocess
import sys

HEADER_NOTE = ("# The layout of the C ABI (include/accel/accel.h): written by tests/abi/layout.py, checked by\n"
               "# the abi_layout test. Existing lines never change; regenerate after appending to the ABI with\n"
               "#   ninja -C build abi-layout-update\n")


# ---------------------------------------------------------------------------------------
# Parsing the header

def _space(text):
    return re.sub(r"\s+", " ", text).strip()


def _type(text):
    """A type in one spelling: single spaces, '*' bound to what follows ('const char *')."""
    t = _space(text)
    t = re.sub(r"\s*\*\s*", " *", t)
    t = re.sub(r"\* +", "*", t)
    return t.strip()


def _split_params(text):
    params, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            params.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        params.append(cur)
    return [_space(p) for p in params]


QUALIFIERS = {"const", "volatile", "struct", "enum", "unsigned", "signed", "restrict"}


def _param_type(param):
    """The type of one parameter, its name dropped ('const accel_options *opts' -> 'const accel_options *')."""
    m = re.match(r"^(.*?)(\w+)\s*$", param)
    if m and m.group(1).strip() and set(m.group(1).replace("*", " ").split()) - QUALIFIERS:
        return _type(m.group(1))
    return _type(param)  # no name ('void', or an unnamed parameter)


def parse_header(path):
    """Items of the header in its order: ('struct', name, [(type, field)]), ('enum', name, [constants]),
    ('function', name, ret, [param types]), ('typedef', name, ret, [param types]);
    and the version and _INIT macros by struct name."""
    src = open(path, encoding="utf-8").read()
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    src = src.replace("\\\n", " ")
    macros = dict(re.findall(r"^\s*#\s*define\s+(\w+)[ \t]+(.*)$", src, flags=re.M))
    code = re.sub(r"^\s*#.*$", " ", src, flags=re.M)

    items = []
    for m in re.finditer(r"typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", code, flags=re.S):
        fields = []
        for decl in m.group(1).split(";"):
            decl = _space(decl)
            if not decl:
                continue
            f = re.match(r"^(.*?)(\w+)\s*(\[[^\]]*\])?$", decl)
            if not f or not f.group(1).strip():
                sys.exit(f"layout.py: cannot read the field '{decl}' of {m.group(2)}")
            fields.append((_type(f.group(1)) + (f.group(3) or ""), f.group(2)))
        items.append((m.start(), ("struct", m.group(2), fields)))
    for m in re.finditer(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", code, flags=re.S):
        consts = [re.match(r"\s*(\w+)", c).group(1) for c in m.group(1).split(",") if c.strip()]
        items.append((m.start(), ("enum", m.group(2), consts)))
    for m in re.finditer(r"\bACCEL_API\s+([^;{]*?\))\s*;", code, flags=re.S):
        decl = _space(m.group(1))
        f = re.match(r"^(.*?)\b(\w+)\s*\((.*)\)$", decl)
        if not f:
            sys.exit(f"layout.py: cannot read the declaration '{decl}'")
        items.append((m.start(), ("function", f.group(2), _type(f.group(1)),
                                  [_param_type(p) for p in _split_params(f.group(3))])))
    for m in re.finditer(r"typedef\s+([\w\s\*]+?)\s*\(\s*\*\s*(\w+)\s*\)\s*\(([^;]*)\)\s*;", code, flags=re.S):
        items.append((m.start(), ("typedef", m.group(2), _type(m.group(1)),
                                  [_param_type(p) for p in _split_params(m.group(3))])))
    items.sort(key=lambda it: it[0])
    structs = {it[1][1] for it in items if it[1][0] == "struct"}
    versions, inits = {}, {}
    for name in macros:
        v = re.match(r"^ACCEL_(\w+)_VERSION$", name)
        if v and "accel_" + v.group(1).lower() in structs:
            versions["accel_" + v.group(1).lower()] = name
        i = re.match(r"^ACCEL_(\w+)_INIT$", name)
        if i and "accel_" + i.group(1).lower() in structs:
            inits["accel_" + i.group(1).lower()] = name
    return [it[1] for it in items], versions, inits


# ---------------------------------------------------------------------------------------
# The probe: a C11 program that prints the table

def _c_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _signature(ret, params, pointer=False):
    return f"{ret} ({'*' if pointer else ''}{')(' if pointer else ''}{', '.join(params)})"


def _default_printer(struct, ftype, field):
    key = _c_str(f"default {struct}.{field} ")
    base = ftype.replace("const ", "").strip()
    if "[" in ftype:
        return f'    fputs({key} "(array)\\n", stdout);\n'
    if base == "char *":
        return (f'    printf("%s%s%s%s\\n", {key}, d.{field} ? "\\"" : "", d.{field} ? d.{field} : "NULL", '
                f'd.{field} ? "\\"" : "");\n')
    if "*" in ftype:
        return f'    printf("%s%s\\n", {key}, d.{field} ? "(non-NULL)" : "NULL");\n'
    if base in ("double", "float"):
        return f"    print_double({key}, (double)d.{field});\n"
    if base.startswith("uint") or base in ("size_t", "unsigned", "unsigned int", "unsigned long"):
        return f'    printf("%s%llu\\n", {key}, (unsigned long long)d.{field});\n'
    return f'    printf("%s%lld\\n", {key}, (long long)d.{field});\n'


def write_probe(header, out):
    items, versions, inits = parse_header(header)
    c = ["/* Generated by tests/abi/layout.py from accel.h: prints the C ABI's layout table.\n"
         " * The signatures parsed by layout.py are checked here by the compiler. */\n"
         "#include <accel/accel.h>\n\n#include <stddef.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n",
         "static void print_double(const char *key, double v) {\n"
         "    char b[64];\n"
         "    snprintf(b, sizeof b, \"%.15g\", v);\n"
         "    if (strtod(b, NULL) != v) snprintf(b, sizeof b, \"%.17g\", v);\n"
         "    printf(\"%s%s\\n\", key, b);\n}\n\n",
         "int main(void) {\n    (void)print_double;\n"]
    for it in items:
        kind, name = it[0], it[1]
        if kind == "struct":
            c.append(f'    printf("struct {name} size=%zu align=%zu\\n", sizeof({name}), _Alignof({name}));\n')
            for ftype, field in it[2]:
                c.append(f'    printf("field {name}.{field} offset=%zu size=%zu type=%s\\n", offsetof({name}, {field}), '
                         f"sizeof((({name} *)0)->{field}), {_c_str(ftype)});\n")
            if name in versions:
                c.append(f'    printf("version {name} %lld\\n", (long long){versions[name]});\n')
            if name in inits:
                c.append(f"    {{\n    const {name} d = {inits[name]};\n")
                c += [_default_printer(name, ftype, field) for ftype, field in it[2] if field != "version"]
                c.append("    }\n")
        elif kind == "enum":
            c.append(f'    printf("enum {name} size=%zu\\n", sizeof({name}));\n')
            for const in it[2]:
                c.append(f'    printf("const {name}.{const} %lld\\n", (long long){const});\n')
        elif kind == "function":
            ret, params = it[2], it[3]
            c.append(f"    _Static_assert(__builtin_types_compatible_p(__typeof__(&{name}), {ret} (*)({', '.join(params)})),\n"
                     f'                   "layout.py misread the signature of {name}");\n')
            c.append(f"    puts({_c_str(f'function {name} ' + _signature(ret, params))});\n")
        elif kind == "typedef":
            ret, params = it[2], it[3]
            c.append(f"    _Static_assert(__builtin_types_compatible_p({name}, {ret} (*)({', '.join(params)})),\n"
                     f'                   "layout.py misread the typedef {name}");\n')
            c.append(f"    puts({_c_str(f'typedef {name} ' + _signature(ret, params, pointer=True))});\n")
    c.append("    return 0;\n}\n")
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(c))


# ---------------------------------------------------------------------------------------
# Tables and their comparison

def run_probe(probe):
    return subprocess.run([probe], check=True, capture_output=True, text=True).stdout


def parse_table(text):
    """{(kind, name): value}, in the table's order."""
    table = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(" ", 2)
        if len(parts) < 3:
            sys.exit(f"layout.py: line {n} is not 'KIND NAME VALUE': {line}")
        if (parts[0], parts[1]) in table:
            sys.exit(f"layout.py: line {n} repeats {parts[0]} {parts[1]}")
        table[(parts[0], parts[1])] = parts[2]
    return table


def _value(entry, key):
    return dict(kv.split("=", 1) for kv in entry.split(" ") if "=" in kv).get(key)


def _fields(table, struct):
    return [name for (kind, name) in table if kind == "field" and name.split(".")[0] == struct]


def compare(base, cur):
    """(errors, additions): what broke between the baseline and today, and what was appended."""
    errors, additions = [], []
    for (kind, name), old in base.items():
        new = cur.get((kind, name))
        if new is None:
            errors.append(f"{kind} {name}: removed (was: {old})")
        elif kind not in ("struct", "version") and new != old:
            errors.append(f"{kind} {name}: changed from '{old}' to '{new}'")
    for (kind, name) in cur:
        if (kind, name) not in base:
            additions.append(f"{kind} {name} {cur[(kind, name)]}")
    for (kind, struct), old in base.items():
        if kind != "struct" or (kind, struct) not in cur:
            continue
        new = cur[(kind, struct)]
        old_fields = _fields(base, struct)
        appended = [f for f in _fields(cur, struct) if ("field", f) not in base]
        vold, vnew = base.get(("version", struct)), cur.get(("version", struct))
        if vold is not None and vnew is not None and int(vnew) < int(vold):
            errors.append(f"version {struct}: went down from {vold} to {vnew}")
        if not appended:
            if new != old:
                errors.append(f"struct {struct}: changed from '{old}' to '{new}' with no field appended")
            if vold != vnew and vold is not None and vnew is not None and int(vnew) > int(vold):
                errors.append(f"version {struct}: went up from {vold} to {vnew} with no field appended")
            continue
        last = max((int(_value(base[("field", f)], "offset")), f) for f in old_fields) if old_fields else (-1, "")
        for f in appended:
            off = int(_value(cur[("field", f)], "offset"))
            if off <= last[0]:
                errors.append(f"field {f}: new, at offset {off}, not after the old last field {last[1]} "
                              f"(offset {last[0]}): fields are only appended")
        if vold is None:
            errors.append(f"struct {struct}: fields appended ({', '.join(appended)}) but it has no version macro: "
                          "a program built against the old header passes or receives the shorter struct")
        elif vnew is None or int(vnew) <= int(vold):
            errors.append(f"struct {struct}: fields appended ({', '.join(appended)}) without raising its version "
                          f"(still {vnew}): bump its ACCEL_*_VERSION and append a row to its table in capi/internal.h")
        if int(_value(new, "size")) < int(_value(old, "size")) or int(_value(new, "align")) < int(_value(old, "align")):
            errors.append(f"struct {struct}: shrank from '{old}' to '{new}'")
    return errors, additions


def render(table):
    return HEADER_NOTE + "".join(f"{k} {n} {v}\n" for (k, n), v in table.items())


def check(probe, baseline):
    cur = parse_table(run_probe(probe))
    base = parse_table(open(baseline, encoding="utf-8").read())
    errors, additions = compare(base, cur)
    for a in additions:
        print(f"appended: {a}")
    if errors:
        print(f"The C ABI changed incompatibly against {baseline}:")
        for e in errors:
            print(f"  {e}")
        print("The ABI is append-only (docs/api.md, Versioning): restore what changed. Appended entries are "
              "recorded with: ninja -C build abi-layout-update")
        return 1
    print(f"{len(base)} entries of the baseline unchanged, {len(additions)} appended"
          + (" (record them: ninja -C build abi-layout-update)" if additions else ""))
    return 0


# ---------------------------------------------------------------------------------------
# The checker checked: deliberate changes to a copy of today's table must be caught

def selftest(probe):
    cur = parse_table(run_probe(probe))
    keys = list(cur)

    def first(kind, pred=lambda n: True):
        for k, n in keys:
            if k == kind and pred(n):
                return n
        sys.exit(f"layout.py selftest: the table has no {kind} to mutate")

    versioned = [n for k, n in keys if k == "version" and len(_fields(cur, n)) >= 3]
    if not versioned:
        sys.exit("layout.py selftest: no versioned struct with 3 fields or more")
    vs = versioned[0]
    vfields = _fields(cur, vs)
    unversioned = first("struct", lambda n: ("version", n) not in cur and len(_fields(cur, n)) >= 2)
    fn = first("function")
    const = first("const")
    default = first("default")

    def edit(changes=None, drop=(), add=None):
        base = dict(cur)
        for key in drop:
            del base[key]
        for key, f in (changes or {}).items():
            base[key] = f(base[key])
        base.update(add or {})
        return base

    def bump(n):
        return str(int(n) - 1)

    def offset_plus(v):
        return re.sub(r"offset=(\d+)", lambda m: f"offset={int(m.group(1)) + 8}", v)

    cases = [
        ("the table against itself", edit(), True),
        (f"a field moved ({vfields[1]})", edit({("field", vfields[1]): offset_plus}), False),
        (f"a field's type changed ({vfields[1]})",
         edit({("field", vfields[1]): lambda v: v.replace("type=", "type=unsigned ")}), False),
        (f"a struct's size changed ({unversioned})",
         edit({("struct", unversioned): lambda v: re.sub(r"size=(\d+)", lambda m: f"size={int(m.group(1)) + 8}", v)}),
         False),
        (f"a signature changed ({fn})", edit({("function", fn): lambda v: v.replace("(", "(int, ", 1)}), False),
        (f"a function removed (accel_gone)", edit(add={("function", "accel_gone"): "void (void)"}), False),
        (f"an enum value changed ({const})", edit({("const", const): lambda v: str(int(v) + 100)}), False),
        (f"a default changed ({default})", edit({("default", default): lambda v: v + "1"}), False),
        (f"a function appended ({fn})", edit(drop=[("function", fn)]), True),
        (f"an enum constant appended ({const})", edit(drop=[("const", const)]), True),
        (f"a field appended to {vs} with its version raised",
         edit({("version", vs): bump}, drop=[("field", vfields[-1])] + (
             [("default", vfields[-1])] if ("default", vfields[-1]) in cur else [])), True),
        (f"a field appended to {vs} without raising its version",
         edit(drop=[("field", vfields[-1])]), False),
        (f"a field inserted in {vs} ({vfields[1]}), version raised",
         edit({("version", vs): bump}, drop=[("field", vfields[1])]), False),
        (f"a field appended to {unversioned}, which has no version",
         edit(drop=[("field", _fields(cur, unversioned)[-1])]), False),
        (f"a version raised with no field appended ({vs})", edit({("version", vs): bump}), False),
    ]
    bad = 0
    for what, base, should_pass in cases:
        errors, _ = compare(base, cur)
        ok = (not errors) == should_pass
        bad += not ok
        verdict = "passes" if not errors else f"fails ({errors[0]})"
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {verdict}, expected to {'pass' if should_pass else 'fail'}")
    return 1 if bad else 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "probe" and len(argv) == 4:
        write_probe(argv[2], argv[3])
        return 0
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "update":
        text = render(parse_table(run_probe(argv[2])))
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {argv[3]} ({len(text.splitlines()) - HEADER_NOTE.count(chr(10))} entries)")
        return 0
    if len(argv) == 3 and argv[1] == "selftest":
        return selftest(argv[2])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
