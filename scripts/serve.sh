#!/usr/bin/env bash
# Install what the main job needs, then run it: `visus serve` on loopback, with data in
# the same folder every visus command uses (--data, else data_dir in visus.toml, else
# $VISUS_DATA, else the user's data folder; the banner and `visus config show` say
# which), so `visus session list` lists the web chat's sessions. The model: --model,
# else default_model in visus.toml, else the first provider key set of
# ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, OPENROUTER_API_KEY, else the
# offline reference model; the banner says which, and why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh all
exec .venv/bin/visus serve "$@"
