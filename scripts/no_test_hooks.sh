#!/usr/bin/env bash
# Issue 22: no test-only code in the shipped binary. Builds the release binary and fails if its
# strings name a test hook (`wedge`, `for_test`, `test_hook`, `test-hook`). Tests exercise
# failures through injected seams (the daemon's Clock, a listener shut down under the server)
# instead of hooks compiled into the daemon.
# Usage: scripts/no_test_hooks.sh   (honours CARGO_TARGET_DIR; defaults to ./target)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked >&2
if strings "$target/release/baton" | grep -i -E 'wedge|for_test|test.hook'; then
  echo "test hooks in $target/release/baton (the lines above)" >&2
  exit 1
fi
echo "no test hooks in $target/release/baton"
