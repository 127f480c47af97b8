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
  printf '%s' "$lab_json" | "$python" -c 'import json,sys; sys.exit(0 if (json.load(sys.stdin) or {}).get("slurm_env") else 1)'; then
  hpc=1
  printf '%s' "$lab_json" | "$python" "$root/scripts/demo_hpc_spec.py" "$root/cli/decice/data/default-spec.yaml" > decice.yaml
  echo "== SLURM lab $lab_name found: hpc-0 is backed by interLink on it (decice.yaml)"
else
  rm -f decice.yaml  # the built-in default spec
fi

# With DECICE_DEMO_UPSTREAM=standins, the add-on charts come "from upstream" without a
# mirror: scripts/upstream_standins.py serves the mirror's real charts (DECICE_DEMO_MIRROR,
# default ../shared/mirror beside the checkout) on 127.0.0.1 in their upstream shapes (HTTP
# file, GitHub tag archive, OCI registry) and the spec's upstream.rewrite points at them.
if [ "${DECICE_DEMO_UPSTREAM:-}" = standins ]; then
  mirror=${DECICE_DEMO_MIRROR:-$root/../shared/mirror}
  rm -f upstream.yaml
  "$python" "$root/scripts/upstream_standins.py" --mirror "$mirror" --work "$work/standins" \
    --spec "$work/upstream.yaml" &
  standins=$!
  trap 'kill "$standins" 2>/dev/null; wait "$standins" 2>/dev/null || true' EXIT
  for _ in $(seq 1 900); do  # the first run may build helm (the sim's binaries) first
    [ -f upstream.yaml ] && break
    kill -0 "$standins" 2>/dev/null || { echo "the upstream stand-ins did not start" >&2; exit 1; }
    sleep 1
  done
  [ -f upstream.yaml ] || { echo "the upstream stand-ins did not start in 900 s" >&2; exit 1; }
  [ -f decice.yaml ] || cp "$root/cli/decice/data/default-spec.yaml" decice.yaml
  cat upstream.yaml >> decice.yaml
  echo "== upstream stand-ins serve the mirror's charts (upstream.rewrite in decice.yaml)"
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
