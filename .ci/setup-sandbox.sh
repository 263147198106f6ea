#!/usr/bin/env bash
# bubblewrap for tests/it/sandbox.rs (`sandbox.kind: bubblewrap`): installs Debian's `bubblewrap`,
# checks that it can create the namespaces the sandbox uses, and exports BATON_BWRAP.
# Idempotent; meant to be `source`d by .ci/run (CI=true).
baton_setup_sandbox() {
  if ! command -v bwrap >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || { echo "setup-sandbox: no bwrap and no apt-get" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null || return 1
  fi
  # The flags Baton passes (user, PID, network namespaces; no nested user namespaces).
  bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --ro-bind / / \
    --proc /proc --dev /dev true ||
    { echo "setup-sandbox: bwrap cannot create namespaces here (a container without user namespaces?)" >&2; return 1; }
  BATON_BWRAP="$(command -v bwrap)" || return 1
  export BATON_BWRAP
  echo "setup-sandbox: BATON_BWRAP=$BATON_BWRAP ($("$BATON_BWRAP" --version))" >&2
}
baton_setup_sandbox || { echo "setup-sandbox: failed to set up bubblewrap" >&2; return 1 2>/dev/null || exit 1; }
