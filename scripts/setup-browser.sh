#!/usr/bin/env bash
# Debian's Chromium for the web chat's browser tests (Playwright drives it; it never
# downloads a browser of its own). Skipped when already present.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "visus: chromium not found and cannot apt-get it; browser tests will be skipped" >&2
  exit 0
fi
echo "visus: installing Debian chromium for the browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
