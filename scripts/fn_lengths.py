#!/usr/bin/env python3
"""Functions in src/ longer than a limit (issue 10: none over ~80 lines without a reason).

Usage: scripts/fn_lengths.py [LIMIT]   (default 80). Prints `lines path:line name` for each
function whose body spans more than LIMIT lines, longest first, then the count. A function is
`fn name` up to the brace that closes its body; strings, chars and comments are skipped when
counting braces. Test modules (`#[cfg(test)]` to the end of the file) are left out.
"""
import re
import sys
from pathlib import Path

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)")


def code_only(text):
    """`text` with string/char literals and comments blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = len(re.match(r'r(#*)"', text[i:]).group(1))
            end = '"' + "#" * hashes
            j = text.find(end, i + 2 + hashes)
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:i + 12])
            out.append(" " * len(m.group(0))); i += len(m.group(0))
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(path):
    text = path.read_text()
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    lines = code_only(text).split("\n")
    for start, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            for ch in lines[end]:
                if ch == "{":
                    depth += 1; opened = True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened and depth == 0:
                    break  # a declaration without a body
            else:
                if opened and depth == 0:
                    yield end - start + 1, start + 1, m.group(1)
                    break
                continue
            break


def main():
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    root = Path(__file__).resolve().parent.parent / "src"
    long = sorted(
        ((n, f"{p.relative_to(root.parent)}:{line}", name)
         for p in sorted(root.rglob("*.rs")) for n, line, name in functions(p) if n > limit),
        reverse=True,
    )
    for n, where, name in long:
        print(f"{n:4d} {where} {name}")
    print(f"{len(long)} functions over {limit} lines")


if __name__ == "__main__":
    main()
