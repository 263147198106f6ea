#!/usr/bin/env bash
# Installs the pinned GitHub Copilot CLI into a local npm prefix (idempotent) and exports
# BATON_COPILOT_BIN (and BATON_COPILOT_CACHE_HOME) for tests/copilot_real_cli.rs. Meant to be `source`d (by .ci/run); running it
# directly also works and prints the export line.
#
#   BATON_COPILOT_PREFIX  where to install (default: $HOME/.cache/baton/copilot-<version>)
#
# The CLI is then run fully offline in BYOK mode against the fake model server in tests/it/support/.
COPILOT_NPM_VERSION="1.0.102"
# shellcheck source=.ci/npm-lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/npm-lib.sh"
_baton_copilot_setup() {
    local prefix="${BATON_COPILOT_PREFIX:-${HOME}/.cache/baton/copilot-${COPILOT_NPM_VERSION}}"
    local bin="${prefix}/node_modules/.bin/copilot"
    baton_need_npm setup-copilot || return 1
    local have=""
    if [ -x "$bin" ]; then
        have="$("$bin" --version 2>/dev/null | head -n1)"
    fi
    case "$have" in
        *" ${COPILOT_NPM_VERSION}."*|*" ${COPILOT_NPM_VERSION}") ;;
        *)
            baton_npm_install setup-copilot "$prefix" "@github/copilot@${COPILOT_NPM_VERSION}" || return 1
            ;;
    esac
    # `copilot --version` works offline (the `version` subcommand does a network check: avoid it).
    "$bin" --version >/dev/null 2>&1 || { echo "setup-copilot: $bin --version failed" >&2; return 1; }
    export BATON_COPILOT_BIN="$bin"
    # Where that first run extracted the CLI bundle (235 MB); the tests reuse it instead of
    # re-extracting into every temp HOME.
    export BATON_COPILOT_CACHE_HOME="${COPILOT_CACHE_HOME:-${HOME}/.cache/copilot}"
    echo "export BATON_COPILOT_BIN=$BATON_COPILOT_BIN"
    echo "export BATON_COPILOT_CACHE_HOME=$BATON_COPILOT_CACHE_HOME"
}
_baton_copilot_setup
