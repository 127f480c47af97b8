#!/usr/bin/env bash
# The main job on the embedded default target (sim), in a scratch directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
decice="$root/${VENV:-.venv}/bin/decice"
work=${DECICE_DEMO_DIR:-$root/.decice-demo}
mkdir -p "$work"
cd "$work"
echo "== decice plan (built-in default spec: a small hybrid cluster on the simulator)"
"$decice" plan
