#!/usr/bin/env bash
# Counts the rows of docs/conformance.md by status (the third column of its tables) and checks the
# counts line at the top of that page against them. Usage: scripts/conformance_count.sh (exit 1 on a
# mismatch or an unknown status). The test `conformance_doc::` checks the same and every test named.
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/conformance.md
statuses=$(awk -F'|' '/^\| / && NF == 6 && $2 !~ /^ *(§|row|-+) *$/ { s = $4; gsub(/^ +| +$/, "", s); print s }' "$doc")
count() { grep -cxF -- "$1" <<<"$statuses" || true; }
tested=$(count tested) untested=$(count "implemented, untested") partial=$(count partial)
missing=$(count missing) documented=$(count "documented choice") na=$(count n/a)
total=$(wc -l <<<"$statuses")
unknown=$((total - tested - untested - partial - missing - documented - na))
echo "total=$total tested=$tested untested=$untested partial=$partial missing=$missing documented=$documented n/a=$na"
if ((unknown > 0)); then
  echo "unknown status in $doc:"
  grep -vxE 'tested|implemented, untested|partial|missing|documented choice|n/a' <<<"$statuses"
  exit 1
fi
want="**Counts: $total statements: $tested tested, $untested implemented but untested, $partial partial, $missing missing, $documented documented"
if ! tr '\n' ' ' <"$doc" | grep -qF -- "$want"; then
  echo "the counts line of $doc does not start with: $want"
  exit 1
fi
