#!/bin/bash
# What the simulator costs, and K servers in it (docs/simulator.md "Scale", docs/scaling.md).
#   bash docs/results/sim-cost/measure.sh OUT
# 1. python -m mpikanel.sim --workers 16|1024 --sync asp --epochs 3: events, real s, set-up s, us per event,
#    peak RSS, test loss (OUT/scale-N.json);
# 2. 64 workers, 1M parameters, 5 ms steps, BSP and ASP on K = 1, 2, 4 servers, with sparse frames (the
#    default) and dense ones (8 MB a push: the server is the bottleneck); and a 1k-parameter model at
#    1,024 workers on K = 1 and 4 (OUT/servers-*.json).
set -euo pipefail
out=$1
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
for n in 16 1024; do
  "$py" -m mpikanel.sim --workers $n --sync asp --epochs 3 --quiet \
    --summary-json "$out/scale-$n.json"
done
big=(--workers 64 --step-time 0.005 --model logistic --data synthetic-sparse --synthetic-features 1000000
     --synthetic-rows 40000 --epochs 1 --lr 0.02 --l2 0 --quiet)
for push in auto dense; do
  for sync in bsp asp; do
    for k in 1 2 4; do
      "$py" -m mpikanel.sim "${big[@]}" --push $push --sync $sync --servers $k \
        --summary-json "$out/servers-$push-$sync-$k.json"
    done
  done
done
for k in 1 4; do
  "$py" -m mpikanel.sim --workers 1024 --step-time 0.005 --synthetic-features 100 --sync bsp --epochs 1 \
    --servers $k --quiet --summary-json "$out/servers-1k-$k.json"
done
"$py" - "$out" > "$out/results.md" <<'PY'
import json, sys
out = sys.argv[1]
load = lambda name: json.load(open(f"{out}/{name}.json"))
print("| workers | events | simulated run (real s) | set-up incl. data and JIT (s) | us per event | peak RSS MiB | test loss |")
print("|---|---|---|---|---|---|---|")
for n in (16, 1024):
    s = load(f"scale-{n}"); sim = s["sim"]
    print(f"| {n:,} | {sim['events']:,} | {sim['real_s']:.1f} | {sim['setup_s']:.1f} | {sim['us_per_event']:.0f} | "
          f"{sim['peak_rss_mib']:.0f} | {s['test_loss']:.4f} |")
print()
print("| 64 workers, 1M parameters | K = 1 | K = 2 | K = 4 |\n|---|---|---|---|")
for push in ("auto", "dense"):
    for sync in ("bsp", "asp"):
        runs = [load(f"servers-{push}-{sync}-{k}") for k in (1, 2, 4)]
        print(f"| {sync.upper()}, {push} frames: virtual wall s (server utilization) | " + " | ".join(
            f"{r['wall_s']:.3f} ({r['sim']['server_utilization']:.3f})" for r in runs) + " |")
        print(f"| {sync.upper()}, {push} frames: final test loss | " + " | ".join(
            f"{r['test_loss']:.4f}" for r in runs) + " |")
print()
one, four = load("servers-1k-1"), load("servers-1k-4")
print(f"1,024 workers, 1k parameters, BSP: virtual wall {one['wall_s']:.3f} s on one server, {four['wall_s']:.3f} s on four.")
PY
cat "$out/results.md"
