# Shared by the setup scripts of the npm-installed CLIs (claude, copilot, backlog); sourced by them,
# never run alone (the name keeps it out of .ci/run's `setup-*.sh` loop).

# Install node and npm with apt-get when npm is missing. $1: the caller's name, for messages.
baton_need_npm() {
    command -v npm >/dev/null 2>&1 && return 0
    if command -v apt-get >/dev/null 2>&1; then
        apt-get update && apt-get install -y --no-install-recommends nodejs npm
    else
        echo "$1: npm is missing and apt-get is unavailable" >&2
        return 1
    fi
}

# Install the pinned package into a local prefix: baton_npm_install NAME PREFIX PACKAGE@VERSION.
baton_npm_install() {
    local name="$1" prefix="$2" spec="$3"
    mkdir -p "$prefix" || return 1
    [ -f "$prefix/package.json" ] || printf '{"name":"baton-ci-tool","private":true}\n' >"$prefix/package.json"
    (cd "$prefix" && DISABLE_AUTOUPDATER=1 npm install --no-fund --no-audit --loglevel=error \
        --save-exact --prefix "$prefix" "$spec") \
        || { echo "$name: npm install of $spec failed" >&2; return 1; }
}
