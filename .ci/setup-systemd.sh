#!/usr/bin/env bash
# systemd-analyze for tests/ops_systemd.rs (`systemd-analyze verify` and `security --offline` on
# contrib/systemd/baton.service). Idempotent; meant to be `source`d by .ci/run (CI=true).
# Debian's `systemd` package: installing it in a container does not boot or start anything.
baton_setup_systemd() {
  if ! command -v systemd-analyze >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || { echo "setup-systemd: no systemd-analyze and no apt-get" >&2; return 1; }
    DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null || return 1
  fi
  BATON_SYSTEMD_ANALYZE="$(command -v systemd-analyze)" || return 1
  export BATON_SYSTEMD_ANALYZE
  echo "setup-systemd: BATON_SYSTEMD_ANALYZE=$BATON_SYSTEMD_ANALYZE ($("$BATON_SYSTEMD_ANALYZE" --version | head -n1))" >&2
}
baton_setup_systemd || { echo "setup-systemd: failed to install systemd-analyze" >&2; return 1 2>/dev/null || exit 1; }
