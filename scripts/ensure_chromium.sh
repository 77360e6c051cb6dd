#!/usr/bin/env bash
# Make sure Debian's Chromium is available for the browser test
# (tests/test_browser.py drives it through Python playwright with
# executable_path; no browser is ever downloaded by playwright itself).
#
# Idempotent. Always exits 0: when Chromium cannot be installed here it says
# why, and the browser test then fails under CI=true and skips locally.
set -u

CHROMIUM="${SPECBOOK_CHROMIUM:-/usr/bin/chromium}"

if [ -x "$CHROMIUM" ]; then
    echo "ensure_chromium: found $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown')); nothing to do."
    exit 0
fi

if [ "$(id -u)" != "0" ]; then
    echo "ensure_chromium: $CHROMIUM is missing and this is not root; not installing."
    echo "ensure_chromium: install it with 'sudo apt-get install -y chromium' to run the browser test."
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_chromium: $CHROMIUM is missing and apt-get is not available; not installing."
    exit 0
fi

echo "ensure_chromium: $CHROMIUM is missing; installing Debian's chromium package with apt-get."
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update; then
    echo "ensure_chromium: apt-get update failed; Chromium not installed."
    exit 0
fi
if ! apt-get install -y --no-install-recommends chromium; then
    echo "ensure_chromium: apt-get install chromium failed; Chromium not installed."
    exit 0
fi

if [ -x "$CHROMIUM" ]; then
    echo "ensure_chromium: installed $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")."
else
    echo "ensure_chromium: apt-get finished but $CHROMIUM is still missing."
fi
exit 0
