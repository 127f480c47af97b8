#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for decice: host packages (when root),
# a virtualenv in .venv with decice and its test tools. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
WITH_TEST=${WITH_TEST:-0}

# Host packages: podman nodes (lab), SLURM submit host, the offline control-plane build (sim),
# strace (the hostile-input harness), docker-registry (a loopback OCI registry standing in for
# upstream registries in the add-on tests).
APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs openssh-client
              munge slurm-client rsync golang-1.19-go golang-github-modern-go-reflect2-dev
              dpkg-dev patch quilt unzip iproute2 strace docker-registry)
# The test suite only: headless Chromium opens the experiment report (tests/integration/test_experiment.py).
if [ "$WITH_TEST" = 1 ]; then
  APT_PACKAGES+=(chromium)
fi
# Packages wanted only when their command is missing (another vendor may provide it).
declare -A APT_FOR_COMMAND=([npm]=npm)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
for cmd in "${!APT_FOR_COMMAND[@]}"; do
  command -v "$cmd" >/dev/null || missing+=("${APT_FOR_COMMAND[$cmd]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing host packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bootstrap: not root; missing host packages (lab/sim need them): ${missing[*]}" >&2
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
if [ "$WITH_TEST" = 1 ]; then
  "$VENV/bin/python" -m pip install -q -e ".[test]"
else
  "$VENV/bin/python" -m pip install -q -e .
fi
# An editable install leaves the checkout's own modules uncompiled; where
# PYTHONDONTWRITEBYTECODE is set (CI machines set it) every decice process would compile
# them again - the CLI per command, the sim post-renderer per helm call, the node agent,
# the scheduler. Compile them once here (Python still recompiles a file edited later).
"$VENV/bin/python" -m compileall -q -j 0 cli kube scheduler >/dev/null
echo "bootstrap: ready ($("$VENV/bin/decice" --help >/dev/null && echo "decice installed in $VENV"))"
