#!/usr/bin/env bash
# Run lint, then the whole suite. pytest's exit code 5 (no tests collected) is a
# failure here: a suite that silently runs nothing must not pass.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check . || exit 1
.venv/bin/ruff format --check . || { echo "run-tests: ruff format would change files: run make format" >&2; exit 1; }
.venv/bin/python -m pytest -q --durations=40 "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "run-tests: no tests were collected: that is a failure" >&2
  exit 1
fi
exit $rc
