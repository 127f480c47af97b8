#!/usr/bin/env bash
# The whole test suite: static checks, then every pytest area. Exit non-zero on
# any failure, including "no tests ran" (pytest exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export PATH="$PWD/$VENV/bin:$PATH"

started=$SECONDS
echo "== ruff"
ruff check cli kube scheduler tests bench molecule scripts ansible_collections/decice/hybrid/plugins ansible_collections/decice/hybrid/roles
ruff format --check cli kube scheduler tests bench molecule scripts ansible_collections/decice/hybrid/plugins ansible_collections/decice/hybrid/roles
echo "== mypy"
mypy
echo "== pytest (static checks took $((SECONDS - started)) s)"
set +e
# two workers: the tests of each lab in one group on one worker (tests/suite_groups.py),
# everything else spread over both; the run ends with the slowest tests and the time of
# each area (tests/costreport.py)
python -m pytest -p no:cacheprovider -n "${PYTEST_WORKERS:-2}" "$@"
rc=$?
set -e
echo "test.sh: pytest exited $rc after $((SECONDS - started)) s in all"
if [ "$rc" = 5 ]; then
  echo "test.sh: pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
