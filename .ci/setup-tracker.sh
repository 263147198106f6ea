#!/usr/bin/env bash
# Tracker tests: GraphQL schema validation needs python3 + graphql-core (pinned). Idempotent.
# Sourced by .ci/run with CI=true (so it does not change shell options); exports BATON_PYTHON for
# tests/tracker_graphql_schema.rs.
baton_setup_tracker() {
  if ! command -v python3 >/dev/null 2>&1; then
    apt-get update || return 1
    apt-get install -y --no-install-recommends python3 python3-pip || return 1
  fi
  if ! python3 -c 'import graphql, sys; sys.exit(0 if graphql.__version__ == "3.2.8" else 1)' 2>/dev/null; then
    python3 -m pip install --quiet "graphql-core==3.2.8" \
      || python3 -m pip install --quiet --break-system-packages "graphql-core==3.2.8" \
      || return 1
  fi
  export BATON_PYTHON=python3
}
baton_setup_tracker || { echo "setup-tracker: failed to install graphql-core" >&2; return 1 2>/dev/null || exit 1; }
