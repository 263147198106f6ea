#!/usr/bin/env python3
"""Validate GraphQL documents against GitHub's public schema (graphql-core 3.2).

Usage: validate_graphql.py SCHEMA.graphql DOC.graphql [DOC.graphql ...]
Exit 0 when every document is valid; 1 with one line per error otherwise; 2 on usage/setup errors.

Each DOC must be a complete document as sent. The files under src/tracker/github/queries/ are not:
an operation there spreads fragments kept in queries/fragments/, which queries.rs appends at compile
time. tests/tracker_graphql_schema.rs writes the assembled documents to
target/tmp/graphql-documents/<OperationName>.graphql and passes those here (unused or undefined
fragments fail validation, so the per-operation fragment lists in queries.rs are checked too).

GitHub's published SDL repeats `UpdateIssueInput.labels` (243 times in the 2026-07 dump), which a
strict SDL validation rejects, so the schema is built with assume_valid_sdl=True; the documents
themselves are fully validated.
"""
import sys

try:
    from graphql import build_schema, parse, validate, GraphQLError
except ImportError:
    print("graphql-core is not installed (pip install graphql-core==3.2.8)", file=sys.stderr)
    sys.exit(2)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        schema = build_schema(f.read(), assume_valid_sdl=True)
    failed = 0
    for path in argv[2:]:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            errors = validate(schema, parse(text))
        except GraphQLError as e:
            errors = [e]
        for e in errors:
            failed += 1
            loc = e.locations[0] if e.locations else None
            where = f"{loc.line}:{loc.column}" if loc else "?"
            print(f"{path}:{where}: {e.message}")
        if not errors:
            print(f"ok {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
