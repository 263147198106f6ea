#!/usr/bin/env bash
# Installs headless Chromium for the dashboard browser test (tests/http_browser.rs).
# Idempotent; meant to be `source`d by .ci/run (CI=true) and runnable by hand as root.
# Debian's `chromium` package; the test runs it with --headless --no-sandbox --dump-dom.
# Not version-pinned on purpose: Debian replaces Chromium with each security update, so a
# pinned version would soon be uninstallable; the test only relies on --dump-dom.
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
if command -v chromium >/dev/null 2>&1; then
    BATON_CHROMIUM="$(command -v chromium)"
    export BATON_CHROMIUM
fi
