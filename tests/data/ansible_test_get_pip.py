"""Stand-in for pip's get-pip bootstrap script that ansible-test runs in each new venv
(its own download host is not reachable here): pip from the interpreter's ensurepip, then
the pinned pip from the machine's configured package index."""

import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
