#!/usr/bin/env bash
# Stand-in for "python -m mpikanel.train ..." (set as MPIKANEL_PYTHON) that follows the training
# CLI's checkpoint/signal contract without MPI or numba, so the SLURM signal -> checkpoint ->
# exit 75 -> requeue -> resume plumbing of jobs/slurm/checkpointed.sbatch is tested on its own:
#   every rank runs FAKE_STEPS steps of 0.1 s; rank 0 prints "training started" (after the traps
#   are set) and "resumed from <ckpt>" when --resume latest finds one; on SIGUSR1/SIGTERM each rank
#   stops at the next step and says so, rank 0 writes <ckpt-dir>/ckpt-<step>, every rank exits 75; at the end
#   rank 0 writes the summary JSON and every rank exits 0.
set -u
rank=${PMI_RANK:-${PMIX_RANK:-${SLURM_PROCID:-0}}}  # mpiexec under SLURM: PMI_RANK; srun: SLURM_PROCID
ckpt_dir="" summary="" resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --checkpoint-dir) ckpt_dir=$2; shift ;;
    --summary-json) summary=$2; shift ;;
    --resume) resume=$2; shift ;;
  esac
  shift
done
stop=""
trap 'stop=USR1' USR1
trap 'stop=TERM' TERM
step=0
if [ "$resume" = latest ] && [ -n "$ckpt_dir" ]; then
  latest=$(ls -1 "$ckpt_dir" 2>/dev/null | grep '^ckpt-' | sort -t- -k2 -n | tail -1)
  if [ -n "$latest" ]; then
    step=${latest#ckpt-}
    [ "$rank" = 0 ] && echo "fake: resumed from $ckpt_dir/$latest (step $step)"
  else
    [ "$rank" = 0 ] && echo "fake: no checkpoint in $ckpt_dir: starting fresh"
  fi
fi
[ "$rank" = 0 ] && echo "fake: training started (rank 0 of ${SLURM_NTASKS:-?}, pid $$)"
while [ "$step" -lt "${FAKE_STEPS:-100}" ]; do
  if [ -n "$stop" ]; then
    [ "$rank" = 0 ] && : >"$ckpt_dir/ckpt-$step"
    echo "fake rank $rank: SIG$stop: checkpoint $ckpt_dir/ckpt-$step, exiting 75"
    exit 75
  fi
  sleep 0.1
  step=$((step + 1))
done
if [ "$rank" = 0 ] && [ -n "$summary" ]; then
  echo "{\"fake\": true, \"steps\": $step}" >"$summary"
  echo "fake: finished at step $step"
fi
exit 0
