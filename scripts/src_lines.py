#!/usr/bin/env python3
"""Non-test lines of Baton's own source, per module (issue 22's reviewer-load figure).

Usage: scripts/src_lines.py [DEPFILE...]

Counts every line of every `.rs` file under src/ (code, comments and blanks alike) except the
inline test modules: an item under `#[cfg(test)]` (a `mod` block, up to its closing brace) is
left out. With DEPFILEs (rustc dep-info files, `target/<profile>/deps/baton-*.d`), only the src/
files they name count: the files one build configuration compiles. Prints a table of lines per
top-level module, then the total.
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


def main():
    depfiles = sys.argv[1:]
    files = compiled_files(depfiles) if depfiles else set(SRC.rglob("*.rs"))
    per = defaultdict(int)
    for f in sorted(files):
        rel = f.relative_to(SRC)
        mod = rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]
        per[mod] += non_test_lines(f)
    for mod in sorted(per, key=lambda m: -per[m]):
        print(f"{per[mod]:7d}  {mod}")
    print(f"{sum(per.values()):7d}  total ({len(files)} files)")


if __name__ == "__main__":
    main()
