#!/usr/bin/env bash
# Profile (not a test): what the whole CI run spends the machine's CPU on, by program.
#
#   bench/suite/cpu_by_command.sh [WORK_DIR]
#
# Clones this checkout into WORK_DIR (default /tmp/decice-suite-cpu) with ../shared beside
# it, as CI does, and runs `bash .ci/run` there under BSD process accounting (the kernel
# records every process that exits; Debian's acct package, installed here when missing) and
# vmstat every 30 s. Prints the suite's outcome, the CPUs' user, system and idle shares over
# the run (bootstrap included), and `sa -a`: per program name, the processes, their real minutes and their
# CPU minutes (user + system; a name ending in * forked without exec, as Ansible's workers
# do). Processes still running at the end (none, once the suite's stacks are down) and the
# kernel's own interrupt work are not in the table. Needs root (accton) and an otherwise
# idle machine; takes as long as a CI run.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
work=${1:-/tmp/decice-suite-cpu}
command -v accton >/dev/null || apt-get install -y -q acct >/dev/null
rm -rf "$work"
mkdir -p "$work"
git clone -q "$here" "$work/main"
ln -s "$(cd "$here/../shared" && pwd)" "$work/shared"
acct="$work/pacct"
: >"$acct"
accton "$acct" >/dev/null
vmstat -t 30 >"$work/vmstat.log" &
vmstat_pid=$!
set +e
(cd "$work/main" && DECICE_TEST_TIMES="$work/times.json" bash .ci/run >"$work/run.log" 2>&1)
rc=$?
set -e
accton off >/dev/null
kill "$vmstat_pid" 2>/dev/null || true
echo "== .ci/run exited $rc: $(grep -E '^=+ .* in [0-9.]+s' "$work/run.log" | tail -1)"
# vmstat's columns: r b swpd free buff cache si so bi bo in cs us sy id wa st date time
awk 'NR > 2 && $15 ~ /^[0-9]+$/ { n++; us += $13; sy += $14; id += $15 }
  END { if (n) printf "== CPU over the run: user %.0f %%, system %.0f %%, idle %.0f %% (%d samples of 30 s)\n", us / n, sy / n, id / n, n }' \
  "$work/vmstat.log"
echo "== CPU by program (sa -a: processes, real min, CPU min)"
sa -a "$acct" | head -40 || true  # head closing the pipe is not a failure
