#!/usr/bin/env bash
# SSH worker figures (issue 14), against private OpenSSH servers on 127.0.0.1:
#   * dispatch -> remote agent process running, multiplexed (median of 25; target <= 150 ms)
#   * Baton's own memory per remote running agent (target <= 1 MiB)
#   * 20 remote agents on 2 hosts: 0 failures, 0 processes left after SIGTERM
# Needs sshd: `source .ci/setup-ssh.sh` (exports BATON_SSHD). Prints the FIGURE lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
export BATON_SSHD="${BATON_SSHD:-/usr/sbin/sshd}"
[ -x "$BATON_SSHD" ] || { echo "ssh.sh: no sshd at $BATON_SSHD (source .ci/setup-ssh.sh)" >&2; exit 1; }
for t in ssh_host::bench_dispatch_to_remote_agent_running ssh_daemon::bench_twenty_remote_agents_on_two_hosts; do
    cargo test --release --quiet --test it "$t" -- --include-ignored --exact --nocapture 2>&1 | grep -E '^FIGURE|panicked|FAILED' || true
done
