#!/usr/bin/env bash
# The main job on the embedded default target (sim), in a scratch directory:
# up -> status -> a sample workload -> down -> reset.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
decice="$root/${VENV:-.venv}/bin/decice"
python="$root/${VENV:-.venv}/bin/python"
work=${DECICE_DEMO_DIR:-$root/.decice-demo}
mkdir -p "$work"
cd "$work"

# With a SLURM lab in the demo directory (`decice lab create --slurm --nodes 3 --name
# demo-hpc` run in it; DECICE_DEMO_LAB names another), the virtual HPC node hpc-0 of the
# default spec is backed by interLink: decice-interlink-slurm on the lab's first node, as
# the lab's user, runs examples/hpc-pod.yaml as a SLURM job.
lab_name=${DECICE_DEMO_LAB:-demo-hpc}
hpc=""
if lab_json=$("$decice" lab status --name "$lab_name" --json 2>/dev/null) &&
  printf '%s' "$lab_json" | "$python" -c 'import json,sys; sys.exit(0 if json.load(sys.stdin).get("slurm_env") else 1)'; then
  hpc=1
  printf '%s' "$lab_json" | "$python" "$root/scripts/demo_hpc_spec.py" "$root/cli/decice/data/default-spec.yaml" > decice.yaml
  echo "== SLURM lab $lab_name found: hpc-0 is backed by interLink on it (decice.yaml)"
else
  rm -f decice.yaml  # the built-in default spec
fi

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
if [ -n "$hpc" ]; then
  echo "== a pod on the virtual HPC node, run as a SLURM job (examples/hpc-pod.yaml)"
  k apply -f "$root/examples/hpc-pod.yaml"
  for _ in $(seq 1 120); do
    phase=$(k get pod hpc-hello -o jsonpath='{.status.phase}')
    case "$phase" in Succeeded | Failed) break ;; esac
    sleep 1
  done
  k get pod hpc-hello -o wide
  k logs hpc-hello
  k delete -f "$root/examples/hpc-pod.yaml" --wait=true
fi
echo "== decice down"
"$decice" down
echo "== decice reset --yes"
"$decice" reset --yes
echo "== decice runs"
"$decice" runs
