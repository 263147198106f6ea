#!/usr/bin/env bash
# Installs the pinned Google Gemini CLI into a local npm prefix and exports BATON_GEMINI_BIN for the
# gemini real-CLI tests (tests/it/gemini_real_cli.rs). Idempotent; meant to be `source`d by .ci/run.
# Needs node >= 20 and npm (Debian: apt-get install -y nodejs npm).
GEMINI_NPM_VERSION="0.61.0"
_baton_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BATON_GEMINI_PREFIX="${BATON_GEMINI_PREFIX:-$_baton_root/.ci/cache/gemini-cli-$GEMINI_NPM_VERSION}"
_baton_gemini_bin="$BATON_GEMINI_PREFIX/node_modules/.bin/gemini"
# shellcheck source=.ci/npm-lib.sh
source "$_baton_root/.ci/npm-lib.sh"

if ! "$_baton_gemini_bin" --version 2>/dev/null | grep -q "^$GEMINI_NPM_VERSION\$"; then
    { baton_need_npm setup-gemini &&
        baton_npm_install setup-gemini "$BATON_GEMINI_PREFIX" "@google/gemini-cli@$GEMINI_NPM_VERSION"; } \
        || return 1 2>/dev/null || exit 1
fi

if "$_baton_gemini_bin" --version 2>/dev/null | grep -q "^$GEMINI_NPM_VERSION\$"; then
    export BATON_GEMINI_BIN="$_baton_gemini_bin"
    echo "setup-gemini: BATON_GEMINI_BIN=$BATON_GEMINI_BIN ($("$BATON_GEMINI_BIN" --version))" >&2
else
    echo "setup-gemini: $_baton_gemini_bin is not gemini $GEMINI_NPM_VERSION" >&2
    return 1 2>/dev/null || exit 1
fi
