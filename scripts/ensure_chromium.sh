#!/bin/sh
# Make sure Debian's headless-capable Chromium is at /usr/bin/chromium for the browser test
# (tests/browser). Playwright drives this binary: it cannot download its own browser on these machines.
# Idempotent: does nothing when the binary is already there. Installing needs root and apt-get; when either is
# missing it says why and exits 1, so the set-up path stops with that reason instead of a later obscure failure.
set -eu

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_chromium: $CHROMIUM is missing and apt-get is not available; install Chromium so that" \
        "$CHROMIUM exists (the browser test needs it)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure_chromium: $CHROMIUM is missing and installing it needs root; run as root:" \
        "apt-get update && apt-get install -y chromium" >&2
    exit 1
fi
echo "ensure_chromium: installing Debian's chromium (for the browser test)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -q || ! apt-get install -y -q chromium; then
    echo "ensure_chromium: apt-get could not install chromium (see the apt-get output above)" >&2
    exit 1
fi
if [ ! -x "$CHROMIUM" ]; then
    echo "ensure_chromium: the chromium package is installed but $CHROMIUM does not exist" >&2
    exit 1
fi
