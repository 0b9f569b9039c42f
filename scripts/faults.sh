#!/usr/bin/env bash
# The fault-injection suite (docs/reliability.md): kills ranks and launchers
# of real `actkit pipeline` / `actkit dp` runs, fills their disks, flips bits
# in their checkpoints, and classifies each outcome. The work is done by
# faults.py beside this script (python3, standard library only).
#
#   scripts/faults.sh --short                  CI-sized: every fault kind, a few minutes
#   scripts/faults.sh [--seed N] [--faults N]  the full run (210 faults by default)
#   scripts/faults.sh --binary PATH            another actkit (default build/bin/actkit)
#
# The last line is the summary ("faults: N injected, C clean failures, ...");
# the exit status is nonzero if any run hung, crashed, lost a checkpoint or
# succeeded with corrupted results. Run as root: the full-disk faults mount a
# tmpfs in a private mount namespace (never on the host).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=$(command -v python3 || echo /usr/bin/python3)
exec "$python" "$here/faults.py" "$@"
