#!/usr/bin/env bash
# Install what visus needs into .venv in this checkout. Idempotent and quiet when
# everything is already there. Usage: scripts/setup.sh [EXTRAS]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-all}"
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "visus: creating .venv with $($py --version)" >&2
  "$py" -m venv .venv
fi
# pip, minus the machine-specific "Location ... is ignored" noise some hosts' pip
# configuration prints for every package; pip's own exit status is kept.
pip_quiet() {
  .venv/bin/python -m pip "$@" 2>&1 | { grep -v "^WARNING: Location 'file:" || true; }
  return "${PIPESTATUS[0]}"
}
stamp=".venv/.visus-installed-$extras"
# Reinstall only when pyproject.toml changed since the last install of these extras.
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "visus: installing .[$extras] into .venv (first run takes a few minutes)" >&2
  pip_quiet install -q --disable-pip-version-check --upgrade pip
  pip_quiet install -q --disable-pip-version-check -e ".[$extras]"
  touch "$stamp"
fi
