#!/usr/bin/env python3
"""Import cycles between the top-level modules of src/ (issue 22: imports point down only).

Usage: scripts/module_cycles.py [--graph]

Reads every `crate::<module>` path in src/ (use declarations and qualified paths alike, test
modules left out: `#[cfg(test)]` to the end of the file), builds the graph of top-level modules
(`src/<m>.rs` and `src/<m>/...` are module <m>), and prints each cycle (strongly connected
component of more than one module) with the edges that make it, naming one file per edge.
It also checks the core's rule: `orchestrator` imports no `runtime`, `http`, `app`, `check`,
`demo`, `durable`, `ops` and no implementation module of `agent`, `tracker` or `host` (their
`mod.rs` seams and `config` types are fine). Exits 1 on a cycle or a forbidden import, 0 otherwise. `--graph`
prints every edge as well.
"""
import re
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
# `crate::a::b` or `crate::{a, b::c}` (one level of braces is enough for this code base).
PATH = re.compile(r"\bcrate::(\{[^}]*\}|[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)")
NAME = re.compile(r"[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*")
CORE = "orchestrator"
CORE_FORBIDDEN_TOP = {"runtime", "http", "app", "check", "demo", "main", "durable", "ops"}
# Implementation submodules of the seams the core must not name.
SEAM_OK = {"agent": {"", "config"}, "tracker": {"", "config"}, "host": {""}}


def strip(text):
    """The text without line comments and without the trailing `#[cfg(test)]` module."""
    cut = re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod\s+\w+", text, re.M)
    if cut:
        text = text[: cut.start()]
    return re.sub(r"//[^\n]*", "", text)


def module_of(path):
    rel = path.relative_to(SRC)
    return rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]


def imports(path):
    """The `crate::` paths a file names, as tuples of segments."""
    out = []
    for m in PATH.finditer(strip(path.read_text())):
        body = m.group(1)
        names = NAME.findall(body) if body.startswith("{") else [body]
        out.extend(tuple(n.split("::")) for n in names)
    return out


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    show_graph = "--graph" in sys.argv[1:]
    edges = defaultdict(set)
    where = {}
    nodes = set()
    forbidden = []
    for path in sorted(SRC.rglob("*.rs")):
        src = module_of(path)
        nodes.add(src)
        for segs in imports(path):
            dst = segs[0]
            if dst == src or not (SRC / f"{dst}.rs").exists() and not (SRC / dst).is_dir():
                continue
            edges[src].add(dst)
            where.setdefault((src, dst), path.relative_to(SRC.parent))
            if src == CORE:
                sub = segs[1] if len(segs) > 1 and (SRC / dst / f"{segs[1]}.rs").exists() or (
                    len(segs) > 1 and (SRC / dst / segs[1]).is_dir()) else ""
                if dst in CORE_FORBIDDEN_TOP or (dst in SEAM_OK and sub not in SEAM_OK[dst]):
                    forbidden.append(f"{path.relative_to(SRC.parent)}: crate::{'::'.join(segs)}")
    cycles = [c for c in sccs(nodes, edges) if len(c) > 1]
    if show_graph:
        for a in sorted(edges):
            print(f"{a} -> {', '.join(sorted(edges[a]))}")
    for c in cycles:
        print(f"cycle: {' <-> '.join(c)}")
        for a in c:
            for b in sorted(edges[a] & set(c)):
                print(f"  {a} -> {b}  ({where[(a, b)]})")
    for f in forbidden:
        print(f"core imports an outer module: {f}")
    print(f"modules: {len(nodes)}, edges: {sum(len(v) for v in edges.values())}, "
          f"cycles: {len(cycles)}, forbidden core imports: {len(forbidden)}")
    return 1 if cycles or forbidden else 0


if __name__ == "__main__":
    sys.exit(main())
