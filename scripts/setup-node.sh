#!/usr/bin/env bash
# npm packages the tests drive as real third-party peers (tests/node/package.json:
# exact versions). Installed from the npm registry only; nothing downloads a browser.
# Skipped when node/npm are missing (the tests that need them then skip, saying why)
# and when node_modules is already newer than package.json.
set -euo pipefail
cd "$(dirname "$0")/../tests/node"
if ! command -v npm >/dev/null 2>&1; then
  echo "visus: npm not found; tests that drive npm packages will be skipped" >&2
  exit 0
fi
if [ -d node_modules ] && [ node_modules/.visus-installed -nt package.json ]; then exit 0; fi
echo "visus: installing the npm packages the tests drive (tests/node)" >&2
npm install --no-audit --no-fund --loglevel=error >/dev/null
touch node_modules/.visus-installed
