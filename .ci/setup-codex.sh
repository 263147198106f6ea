#!/usr/bin/env bash
# Installs the pinned OpenAI Codex CLI into a local npm prefix and exports BATON_CODEX_BIN for the
# codex real-CLI tests (tests/it/codex_real_cli.rs). Idempotent; meant to be `source`d by .ci/run.
# Needs node >= 18 and npm (Debian: apt-get install -y nodejs npm). The npm package is a Node
# launcher plus the native binary (@openai/codex-linux-x64, an optional dependency).
CODEX_NPM_VERSION="0.169.0"
_baton_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BATON_CODEX_PREFIX="${BATON_CODEX_PREFIX:-$_baton_root/.ci/cache/codex-$CODEX_NPM_VERSION}"
_baton_codex_bin="$BATON_CODEX_PREFIX/node_modules/.bin/codex"
# shellcheck source=.ci/npm-lib.sh
source "$_baton_root/.ci/npm-lib.sh"

if ! "$_baton_codex_bin" --version 2>/dev/null | grep -q "^codex-cli $CODEX_NPM_VERSION\$"; then
    { baton_need_npm setup-codex &&
        baton_npm_install setup-codex "$BATON_CODEX_PREFIX" "@openai/codex@$CODEX_NPM_VERSION"; } \
        || return 1 2>/dev/null || exit 1
fi

if "$_baton_codex_bin" --version 2>/dev/null | grep -q "^codex-cli $CODEX_NPM_VERSION\$"; then
    export BATON_CODEX_BIN="$_baton_codex_bin"
    echo "setup-codex: BATON_CODEX_BIN=$BATON_CODEX_BIN ($("$BATON_CODEX_BIN" --version))" >&2
else
    echo "setup-codex: $_baton_codex_bin is not codex-cli $CODEX_NPM_VERSION" >&2
    return 1 2>/dev/null || exit 1
fi
