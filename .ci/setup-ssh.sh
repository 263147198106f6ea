#!/usr/bin/env bash
# Installs OpenSSH (client and server) for tests/ssh_*.rs, which start private `sshd -D` instances
# on 127.0.0.1, and exports BATON_SSHD. Idempotent; meant to be `source`d by .ci/run (CI=true).
if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null 2>&1 || ! command -v ssh-keygen >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        apt-get update && apt-get install -y openssh-server openssh-client
    fi
fi
if [ -x /usr/sbin/sshd ]; then
    # The privilege separation directory sshd insists on.
    mkdir -p /run/sshd 2>/dev/null || true
    export BATON_SSHD=/usr/sbin/sshd
    echo "setup-ssh: BATON_SSHD=$BATON_SSHD ($(ssh -V 2>&1))" >&2
else
    echo "setup-ssh: sshd not available; the SSH tests stay ignored" >&2
fi
