#!/usr/bin/env bash
# The reviewer's load (issue 22, docs/audit.md): non-test lines of src/ per module for the default
# build and for the minimal build (`--no-default-features`), the vendored lines each compiles, the
# functions over 80 lines and the module cycles. Reproducible: it reads what rustc compiled (the
# dep-info files of a `cargo check`), not a list kept by hand.
# Usage: scripts/audit_surface.sh [--size]   (--size also builds both release binaries and prints
# their stripped sizes). Honours CARGO_TARGET_DIR. Exit status: 1 when a module cycle exists.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

# The dep-info file of the lib and the bin of one `cargo check` configuration.
depfiles() {
    cargo check --locked --lib --bins --message-format=json "$@" 2>/dev/null |
        python3 -c '
import json, sys, pathlib
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "baton":
        for f in m["filenames"]:
            p = pathlib.Path(f)
            stem = p.stem[3:] if p.name.startswith("lib") else p.stem
            d = p.with_name(stem.split(".")[0] + ".d")
            if d.exists():
                print(d)
' | sort -u
}

# Lines of vendored sources a configuration compiles (vendor/ paths in its dep-info files).
vendored() {
    cargo check --locked --lib --bins --message-format=json "$@" 2>/dev/null |
        python3 -c '
import json, sys, pathlib
n = 0
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and "/vendor/" in m.get("manifest_path", ""):
        root = pathlib.Path(m["manifest_path"]).parent
        n += sum(p.read_text().count("\n") for p in root.rglob("*.rs") if "tests" not in p.parts)
print(n)
'
}

for config in default minimal; do
    if [ "$config" = default ]; then flags=(); else flags=(--no-default-features); fi
    echo "== $config build (cargo check ${flags[*]:-}): non-test lines of src/ per module"
    # shellcheck disable=SC2046
    python3 scripts/src_lines.py $(depfiles "${flags[@]}")
    echo "vendored lines compiled: $(vendored "${flags[@]}")"
    if [ "${1:-}" = "--size" ]; then
        cargo build --locked --release "${flags[@]}" >/dev/null 2>&1
        echo "stripped release binary: $(stat -c %s "$target/release/baton") bytes"
    fi
done

echo "== functions over 80 lines"
python3 scripts/fn_lengths.py 80 | tail -n 1
echo "== module cycles"
python3 scripts/module_cycles.py
