#!/usr/bin/env bash
# Install what the main job needs, then run it: `visus serve` on its embedded
# defaults (the offline reference model, data under ./.visus-data, loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all
export VISUS_DATA="${VISUS_DATA:-$PWD/.visus-data}"
exec .venv/bin/visus serve "$@"
