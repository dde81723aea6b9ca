#!/bin/bash
# Which Intel MPI setting bounds the server's memory at 64 workers: measure.sh's job (1M and 1k
# parameters, 65 ranks, ASP, dense frames) under each setting below, with the server's resident
# memory split into private (RssAnon) and shared-memory (RssShmem) pages, sampled from /proc every
# 0.1 s (their peaks), beside the run's own peak RSS (getrusage).
#   bash docs/results/server-memory/settings.sh OUT [VENV]        # VENV default .venv (Intel MPI)
# Writes OUT/NAME-{1m,1k}.json (run summaries) and OUT/results.md.
set -euo pipefail
out=$1; venv=${2:-.venv}
mkdir -p "$out"
# name:settings (space-separated NAME=VALUE): Intel MPI's own allocator off; fewer and no extended
# shared-memory cells; single-copy CMA above 64 kB; upstream MPICH's shared-memory module (iqueue)
SETTINGS=(
  "default:"
  "malloc0:I_MPI_MALLOC=0"
  "cells:I_MPI_SHM_CELL_EXT_NUM_TOTAL=0 I_MPI_SHM_CELL_FWD_NUM=0 I_MPI_SHM_CELL_BWD_NUM=64 I_MPI_SHM_CELL_BWD_SIZE=65536"
  "cma:I_MPI_SHM_CMA=1 I_MPI_SHM_CMA_THRESHOLD=65536"
  "iqueue:MPIR_CVAR_CH4_SHM_POSIX_EAGER=iqueue"
)
job=(--servers 1 --sync asp --model logistic --data synthetic-sparse --synthetic-rows 14000 --epochs 1
     --lr 0.25 --l2 0 --snapshot-interval 1000 --push dense --quiet)

# the peak RssAnon and RssShmem (kB) of the rank-0 process tagged $1, until $2 (the job's pid) ends
sample() {
  local tag=$1 job=$2 pid="" anon=0 shm=0 a s f e
  while kill -0 "$job" 2>/dev/null; do
    if [ -z "$pid" ]; then
      for f in /proc/[0-9]*/environ; do
        # one read per process (gone or not ours: nothing, quietly)
        e=$({ tr '\0' '\n' <"$f"; } 2>/dev/null) || continue
        if grep -qx "MPIKANEL_MEMTAG=$tag" <<<"$e" && grep -qxE '(PMI_RANK|OMPI_COMM_WORLD_RANK)=0' <<<"$e"; then
          pid=${f#/proc/}; pid=${pid%/environ}; break
        fi
      done
    else
      a=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      s=$(awk '/^RssShmem:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
      [ "${a:-0}" -gt "$anon" ] && anon=$a
      [ "${s:-0}" -gt "$shm" ] && shm=$s
    fi
    sleep 0.1
  done
  echo "$anon $shm"
}

echo "| setting | server peak RSS 1M / 1k (MiB) | above it / model (8 MB) | peak RssAnon 1M / 1k (MiB) | peak RssShmem 1M / 1k (MiB) | pushes (1M) | test loss (1M) |" > "$out/results.md"
echo "|---|---|---|---|---|---|---|" >> "$out/results.md"
for spec in "${SETTINGS[@]}"; do
  name=${spec%%:*}; vars=${spec#*:}
  declare -A anon shm
  for size in 1m:1000000 1k:1000; do
    tag=${size%%:*}; feats=${size#*:}
    # shellcheck disable=SC2086  # vars is a list of NAME=VALUE words on purpose
    env MPIKANEL_MEMTAG="$name-$tag" $vars timeout 900 "$venv/bin/python" -m mpikanel.run -n "${RANKS:-65}" -- \
      python -m mpikanel.train "${job[@]}" --synthetic-features "$feats" --summary-json "$out/$name-$tag.json" &
    pid=$!
    read -r anon[$tag] shm[$tag] < <(sample "$name-$tag" "$pid")
    wait "$pid"
  done
  "$venv/bin/python" - "$out" "$name" "$vars" "${anon[1m]}" "${anon[1k]}" "${shm[1m]}" "${shm[1k]}" >> "$out/results.md" <<'PY'
import json, sys
out, name, vars_, a1m, a1k, s1m, s1k = sys.argv[1:]
def server(s):
    return (s.get("server_ranks") or [{"peak_rss_mb": s["rank0_peak_rss_mb"]}])[0]
big, small = (json.load(open(f"{out}/{name}-{t}.json")) for t in ("1m", "1k"))
rss = [server(big)["peak_rss_mb"], server(small)["peak_rss_mb"]]
mib = lambda kb: int(kb) / 1024
print(f"| {name}: `{vars_ or 'none'}` | {rss[0]:.0f} / {rss[1]:.0f} | {(rss[0] - rss[1]) / 7.63:.1f}x | "
      f"{mib(a1m):.0f} / {mib(a1k):.0f} | {mib(s1m):.0f} / {mib(s1k):.0f} | {server(big).get('pushes', '-')} | "
      f"{big['test_loss']:.4f} |")
PY
done
cat "$out/results.md"
