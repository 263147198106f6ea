#!/usr/bin/env bash
# The reviewer's load (issue 22, docs/audit.md): non-test lines of src/ per module for the default
# build and for the minimal build (`--no-default-features`), the vendored lines each compiles, the
# functions over 80 lines and the module cycles. Reproducible: it reads what rustc compiled (the
# dep-info files of a `cargo check`), not a list kept by hand; fast enough for CI (two `cargo
# check`s, no codegen).
# Usage: scripts/audit_surface.sh [--size]   (--size also builds both release binaries with
# scripts/size.sh and prints their stripped sizes). Honours CARGO_TARGET_DIR.
# Exit status: 1 when a module cycle or a forbidden core import exists (scripts/module_cycles.py).
set -euo pipefail
cd "$(dirname "$0")/.."

# One `cargo check` of a configuration: the first line is the number of vendored lines it
# compiles (vendor/ crates in its artifacts), the others the dep-info files of baton's lib and bin.
check() {
    cargo check --locked --lib --bins --message-format=json "$@" 2>/dev/null |
        python3 -c '
import json, sys, pathlib
vendored, deps = 0, set()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact":
        continue
    if "/vendor/" in m.get("manifest_path", ""):
        root = pathlib.Path(m["manifest_path"]).parent
        vendored += sum(p.read_text().count("\n") for p in root.rglob("*.rs") if "tests" not in p.parts)
    if m["target"]["name"] == "baton":
        for f in m["filenames"]:
            p = pathlib.Path(f)
            stem = p.stem[3:] if p.name.startswith("lib") else p.stem
            d = p.with_name(stem.split(".")[0] + ".d")
            if d.exists():
                deps.add(str(d))
print(vendored)
print("\n".join(sorted(deps)))
'
}

mapfile -t default < <(check)
mapfile -t minimal < <(check --no-default-features)
echo "== non-test lines of src/ per module: the default build and the minimal one (--no-default-features)"
python3 scripts/src_lines.py --build default "${default[@]:1}" --build minimal "${minimal[@]:1}"
echo "vendored lines compiled: default ${default[0]}, minimal ${minimal[0]}"
if [ "${1:-}" = "--size" ]; then
    echo "== stripped release binaries (scripts/size.sh)"
    echo "default: $(bash scripts/size.sh 2>/dev/null | grep '^bytes:')"
    echo "minimal: $(bash scripts/size.sh --minimal 2>/dev/null | grep '^bytes:')"
fi
echo "== functions over 80 lines"
python3 scripts/fn_lengths.py 80
echo "== module cycles"
python3 scripts/module_cycles.py
