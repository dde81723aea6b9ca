#!/bin/bash
# the restart goal: 8 workers checkpointed mid-run, resumed on 4 and on 12, against an uninterrupted 8-worker run
set -u
cd "$(dirname "$0")/../../.."
export NUMBA_CACHE_DIR=$PWD/.numba-cache
R=${OUT:-/tmp/reshape}; rm -rf "$R"; mkdir -p "$R"
run() { timeout 900 .venv/bin/python -m mpikanel.run -n "$1" -- .venv/bin/python -m mpikanel.train --quiet --sync bsp --seed "$SEED" --epochs 3 "${@:2}"; }
for SEED in 0 1 2; do
  run 9 --summary-json $R/u8-$SEED.json
  run 9 --checkpoint-dir $R/ck-$SEED --checkpoint-every 2000steps --summary-json $R/c8-$SEED.json
  first=$(ls -d $R/ck-$SEED/ckpt-* | head -1)
  cp -r "$first" $R/mid-$SEED
  for n in 5 13; do
    run $n --resume $R/mid-$SEED --summary-json $R/r$((n-1))-$SEED.json
  done
done
OUT=$R python3 - <<'PY'
import json, glob
import os; R = os.environ.get("OUT", "/tmp/reshape")
for seed in (0, 1, 2):
    u = json.load(open(f"{R}/u8-{seed}.json"))
    line = [f"seed {seed}: uninterrupted 8 workers {u['test_loss']:.4f}"]
    for w in (4, 12):
        r = json.load(open(f"{R}/r{w}-{seed}.json"))
        line.append(f"resumed on {w}: {r['test_loss']:.4f} ({100*(r['test_loss']/u['test_loss']-1):+.2f}%, reshaped={r.get('reshaped')}, samples {r.get('samples')}/{r.get('samples_budget')}, lost {r.get('delta_sum_rel_error'):.1e})")
    print("; ".join(line))
PY
