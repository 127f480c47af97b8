#!/usr/bin/env bash
# The whole test suite: static checks, then every pytest area. Exit non-zero on
# any failure, including "no tests ran" (pytest exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"

echo "== ruff"
ruff check cli scheduler tests bench molecule
ruff format --check cli scheduler tests bench molecule
echo "== mypy"
mypy
echo "== pytest"
set +e
# two workers: the tests that use the labs or this machine on one, in order (the "host"
# group, tests/conftest.py), everything else spread over both
python -m pytest -p no:cacheprovider --durations=40 -n "${PYTEST_WORKERS:-2}" "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
