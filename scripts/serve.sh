#!/usr/bin/env bash
# Install what the main job needs, then run it: `visus serve` with data under
# ./.visus-data, on loopback. The model: --model, else default_model in visus.toml,
# else the first provider key set of ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY,
# OPENROUTER_API_KEY, else the offline reference model; the banner says which, and why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all
export VISUS_DATA="${VISUS_DATA:-$PWD/.visus-data}"
exec .venv/bin/visus serve "$@"
