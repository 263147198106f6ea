#!/usr/bin/env python3
"""Non-test lines of Baton's own source, per module (issue 22's reviewer-load figure).

Usage: scripts/src_lines.py [DEPFILE...]
       scripts/src_lines.py --build NAME DEPFILE... [--build NAME DEPFILE...]...

Counts every line of every `.rs` file under src/ (code, comments and blanks alike) except the
inline test modules: an item under `#[cfg(test)]` (a `mod` block, up to its closing brace) is
left out. With DEPFILEs (rustc dep-info files, `target/<profile>/deps/baton-*.d`), only the src/
files they name count: the files one build configuration compiles. Prints a table of lines per
top-level module, then the total; with `--build` groups, one Markdown table with a column per
build configuration (docs/audit.md shows it).
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fn_lengths import code_only  # noqa: E402  (strings and comments blanked, newlines kept)

CFG_TEST = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")


def non_test_lines(path):
    text = path.read_text()
    code = code_only(text)
    drop = 0
    for m in CFG_TEST.finditer(code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        drop += code.count("\n", m.start(), i) + 1
    return text.count("\n") - drop


def compiled_files(depfiles):
    files = set()
    for d in depfiles:
        for line in Path(d).read_text().splitlines():
            if ":" not in line or line.startswith("#"):
                continue
            target, deps = line.split(":", 1)
            if not target.endswith(".d"):
                continue
            for dep in deps.split():
                p = (ROOT / dep).resolve()
                if p.suffix == ".rs" and SRC in p.parents:
                    files.add(p)
    return files


def per_module(files):
    per = defaultdict(int)
    for f in sorted(files):
        rel = f.relative_to(SRC)
        mod = rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]
        per[mod] += non_test_lines(f)
    return per


def table(builds):
    """One Markdown table: a row per module (largest first in the first build), a column per build."""
    counts = [(name, per_module(compiled_files(deps)), len(compiled_files(deps))) for name, deps in builds]
    first = counts[0][1]
    mods = sorted({m for _, per, _ in counts for m in per}, key=lambda m: (-first.get(m, 0), m))
    print("| module | " + " | ".join(name for name, _, _ in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    for m in mods:
        print(f"| `{m}` | " + " | ".join(f"{per[m]:,}" if m in per else "—" for _, per, _ in counts) + " |")
    print("| **total** | " + " | ".join(f"**{sum(per.values()):,}** ({n} files)" for _, per, n in counts) + " |")


def main():
    args = sys.argv[1:]
    if args and args[0] == "--build":
        builds = []
        for a in args:
            if a == "--build":
                builds.append([None, []])
            elif builds[-1][0] is None:
                builds[-1][0] = a
            else:
                builds[-1][1].append(a)
        return table(builds)
    files = compiled_files(args) if args else set(SRC.rglob("*.rs"))
    per = per_module(files)
    for mod in sorted(per, key=lambda m: -per[m]):
        print(f"{per[mod]:7d}  {mod}")
    print(f"{sum(per.values()):7d}  total ({len(files)} files)")


if __name__ == "__main__":
    main()
