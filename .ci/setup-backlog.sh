#!/usr/bin/env bash
# Installs the pinned Backlog.md CLI (npm `backlog.md`, command `backlog`) into a local npm prefix
# and exports BATON_BACKLOG_BIN for tests/tracker_backlog.rs (the real-CLI test, run with
# --include-ignored). Idempotent; meant to be `source`d by .ci/run (CI=true).
# Needs node >= 18 and npm (Debian: apt-get install -y nodejs npm). The package ships a prebuilt
# binary as an npm optional dependency (backlog.md-linux-x64), so nothing else is downloaded.
BACKLOG_MD_VERSION="1.52.0"
_baton_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BATON_BACKLOG_PREFIX="${BATON_BACKLOG_PREFIX:-$_baton_root/.ci/cache/backlog-md-$BACKLOG_MD_VERSION}"
_baton_backlog_bin="$BATON_BACKLOG_PREFIX/node_modules/.bin/backlog"
# shellcheck source=.ci/npm-lib.sh
source "$_baton_root/.ci/npm-lib.sh"

if [ ! -x "$_baton_backlog_bin" ] || [ "$("$_baton_backlog_bin" --version 2>/dev/null)" != "$BACKLOG_MD_VERSION" ]; then
    { baton_need_npm setup-backlog &&
        baton_npm_install setup-backlog "$BATON_BACKLOG_PREFIX" "backlog.md@$BACKLOG_MD_VERSION"; } \
        || return 1 2>/dev/null || exit 1
fi

if [ "$("$_baton_backlog_bin" --version 2>/dev/null)" = "$BACKLOG_MD_VERSION" ]; then
    export BATON_BACKLOG_BIN="$_baton_backlog_bin"
    echo "setup-backlog: BATON_BACKLOG_BIN=$BATON_BACKLOG_BIN ($BACKLOG_MD_VERSION)" >&2
else
    echo "setup-backlog: $_baton_backlog_bin is not backlog.md $BACKLOG_MD_VERSION" >&2
    return 1 2>/dev/null || exit 1
fi
