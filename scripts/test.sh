#!/usr/bin/env bash
# Install everything the tests need, then run the whole suite: lint, format check,
# strict type check and pytest. Extra arguments go to pytest (after ours: `-n 0` runs
# it in one process). Two workers, a file to one worker (its module's servers start
# once): docs/CONTRIBUTING.md has the measurements.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev || exit 1
bash scripts/setup-system.sh || exit 1
bash scripts/setup-node.sh || exit 1
export PATH="$PWD/.venv/bin:$PATH"
status=0
echo "== ruff check";   ruff check src tests benchmarks conftest.py || status=1
echo "== ruff format";  ruff format --check src tests benchmarks conftest.py || status=1
echo "== mypy --strict"; mypy || status=1
echo "== pytest"
pytest -n 2 --dist loadfile "$@"
rc=$?
[ $rc -ne 0 ] && status=$rc
exit $status
