#!/usr/bin/env bash
# Installs the pinned Claude Code CLI into a local npm prefix and exports BATON_CLAUDE_BIN for
# tests/claude_real_cli.rs. Idempotent; meant to be `source`d by .ci/run (CI=true).
# Needs node >= 18 and npm (Debian: apt-get install -y nodejs npm).
CLAUDE_CODE_VERSION="2.1.332"
_baton_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BATON_CLAUDE_PREFIX="${BATON_CLAUDE_PREFIX:-$_baton_root/.ci/cache/claude-code-$CLAUDE_CODE_VERSION}"
_baton_claude_bin="$BATON_CLAUDE_PREFIX/node_modules/.bin/claude"
# shellcheck source=.ci/npm-lib.sh
source "$_baton_root/.ci/npm-lib.sh"

if [ ! -x "$_baton_claude_bin" ] || ! "$_baton_claude_bin" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "; then
    # Pinned exact version; a bare `npm install @anthropic-ai/claude-code` on node 20 picks an old release.
    { baton_need_npm setup-claude &&
        baton_npm_install setup-claude "$BATON_CLAUDE_PREFIX" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"; } \
        || return 1 2>/dev/null || exit 1
fi

if "$_baton_claude_bin" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "; then
    export BATON_CLAUDE_BIN="$_baton_claude_bin"
    echo "setup-claude: BATON_CLAUDE_BIN=$BATON_CLAUDE_BIN ($("$BATON_CLAUDE_BIN" --version))" >&2
else
    echo "setup-claude: $_baton_claude_bin is not claude $CLAUDE_CODE_VERSION" >&2
    return 1 2>/dev/null || exit 1
fi
