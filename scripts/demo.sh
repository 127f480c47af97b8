#!/usr/bin/env bash
# The main job on the embedded default target (sim), in a scratch directory:
# up -> status -> a sample workload -> down -> reset.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
decice="$root/${VENV:-.venv}/bin/decice"
work=${DECICE_DEMO_DIR:-$root/.decice-demo}
mkdir -p "$work"
cd "$work"

echo "== decice plan (built-in default spec: a small hybrid cluster on the simulator)"
"$decice" plan
echo "== decice up"
"$decice" up
echo "== decice status"
"$decice" status
status_json=$("$decice" status --json)
kubectl=$(printf '%s' "$status_json" | "$root/${VENV:-.venv}/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["sim"]["kubectl"])')
kubeconfig=$(printf '%s' "$status_json" | "$root/${VENV:-.venv}/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["kubeconfig"])')
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }
echo "== a sample workload (examples/sample-workload.yaml)"
k apply -f "$root/examples/sample-workload.yaml"
k wait --for=condition=complete job/sample-batch --timeout=120s
for _ in $(seq 1 60); do
  phases=$(k get pod sample-gpu sample-edge -o jsonpath='{.items[*].status.phase}')
  [ "$phases" = "Succeeded Succeeded" ] && break
  sleep 1
done
k get pods -o wide
k delete -f "$root/examples/sample-workload.yaml" --wait=true
echo "== decice down"
"$decice" down
echo "== decice reset --yes"
"$decice" reset --yes
echo "== decice runs"
"$decice" runs
