"""The job scripts in jobs/slurm/, submitted as they are to a real single-node SLURM (conftest.py).

Run: .venv/bin/python -m pytest -q tests/slurm   (~1.5 min on 2 idle cores; skipped, with the reason,
where scripts/slurm-local.sh cannot install or start SLURM)

Sizes are tiny (two or three ranks, 20000 synthetic rows) and come in through the scripts' own
knobs (MPIKANEL_ARGS, MPIKANEL_RUN_DIR, ... exported by sbatch), never through test-only code.

The signal tests trigger the checkpoint with `scancel --signal=USR1 --batch JOB`: exactly what
`#SBATCH --signal=B:USR1@T` does at T seconds before the limit (signal the batch shell, whose trap
forwards it to srun/mpiexec, which forward it to every rank). SLURM (22.05) holds a requeued batch
job for ~121 s (BeginTime); the tests release it with `scontrol update jobid=N starttime=now`, as an
operator could, once the first run's slurmstepd processes are gone and 3 s have passed (sooner, the
new run collides with the old one's step daemons or revoked credential), instead of waiting.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slurm_support import FINISHED, JOBS, Slurm

SMALL = "--synthetic-rows 20000 --epochs 1"
FAKE = Path(__file__).with_name("fake_python.sh")
# rank 0 prints one of these once the signal handlers are installed (the real CLI: "no checkpoint
# in DIR; starting fresh" / "resumed from ..."; the fake: "training started")
STARTED = re.compile(r"starting fresh|resumed from|training started")
#: the MPI of this Python is Open MPI (its launcher is prterun)
OPEN_MPI = Path(sys.executable).with_name("prterun").exists()
SRUN_OPEN_MPI = pytest.mark.skipif(OPEN_MPI, reason="Open MPI 5 ranks under srun need SLURM's PMIx plugin "
                                   "(srun --mpi=pmix), which loads libpmix: not installed with slurm-wlm here")
#: the least training time a signal test's job must still have ahead when it is signalled: the
#: signal goes scancel -> slurmctld -> slurmd -> batch shell -> launcher -> ranks
MARGIN_S = 3.0


def _sbatch_wait(slurm: Slurm, jobdir: Path, script: str, *opts: str, env: dict[str, str],
                 args: tuple[str, ...] = (), timeout: float = 150) -> subprocess.CompletedProcess:
    """`sbatch --wait` a job script; its exit code is the job's."""
    cmd = ["sbatch", "--wait", "--time=5", f"--output={jobdir}/%x-%j.out", *opts, str(JOBS / script), *args]
    try:
        return subprocess.run(cmd, env=env, cwd=jobdir, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        slurm.cmd("scancel", "--name", Path(script).stem, check=False)
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout}s")


def _logs(jobdir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(jobdir.glob("*.out")))


@pytest.mark.timeout(200, func_only=True)
@pytest.mark.parametrize("launcher", [pytest.param("srun", marks=SRUN_OPEN_MPI), "mpiexec"])
def test_train_job_completes(slurm: Slurm, jobdir: Path, launcher: str) -> None:
    t0 = time.monotonic()
    env = slurm.job_env(MPIKANEL_LAUNCHER=launcher, MPIKANEL_RUN_DIR=str(jobdir / "run"), MPIKANEL_ARGS=SMALL)
    proc = _sbatch_wait(slurm, jobdir, "train.sbatch", "--ntasks=3", env=env, args=("--sync", "ssp"))
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{_logs(jobdir)}"
    summary = json.loads((jobdir / "run" / "summary.json").read_text())
    assert summary["sync"] == "ssp" and summary["workers"] == 2
    assert f"launcher {launcher}" in _logs(jobdir)
    assert "training exited with code 0" in _logs(jobdir)
    sys.stderr.write(f"[slurm] train.sbatch ({launcher}) took {time.monotonic() - t0:.1f}s\n")


@pytest.mark.timeout(240, func_only=True)
def test_sweep_array_completes(slurm: Slurm, jobdir: Path) -> None:
    t0 = time.monotonic()
    results = jobdir / "results"
    env = slurm.job_env(MPIKANEL_SYNCS="bsp asp", MPIKANEL_SEEDS="0 1", MPIKANEL_RESULTS=str(results),
                        MPIKANEL_ARGS=SMALL, **({"MPIKANEL_LAUNCHER": "mpiexec"} if OPEN_MPI else {}))
    proc = _sbatch_wait(slurm, jobdir, "sweep.sbatch", "--array=0-3", "--ntasks=2",
                        f"--output={jobdir}/%x-%A_%a.out", env=env, timeout=200)
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{_logs(jobdir)}"
    found = sorted(p.name for p in results.glob("*.json"))
    assert found == ["asp-seed0.json", "asp-seed1.json", "bsp-seed0.json", "bsp-seed1.json"], found
    for path in results.glob("*.json"):
        assert json.loads(path.read_text())["sync"] == path.name.split("-")[0]
    assert not list(results.glob("*.tmp-*"))
    sys.stderr.write(f"[slurm] sweep.sbatch (4 array tasks) took {time.monotonic() - t0:.1f}s\n")


def _signal_requeue_resume(slurm: Slurm, jobdir: Path, env: dict[str, str], ntasks: int, timeout: float,
                           trains_s: float, requeue_ntasks: int | None = None, nodes: int | None = None,
                           requeue_nodes: int | None = None) -> tuple[str, str, dict[str, str]]:
    """Submit checkpointed.sbatch with `sbatch --wait` (on `nodes` nodes if given), signal it once
    training runs, release the requeued job (with `requeue_ntasks` tasks on `requeue_nodes` nodes if
    given: another allocation), and wait for the end; returns (job id, the job's log, the last scontrol record
    seen: the finished job's, as SLURM keeps it for MinJobAge seconds and it is polled meanwhile).
    `trains_s`: the least time the first run trains after its STARTED line (paced by construction);
    the signal goes only while at least MARGIN_S of it is left."""
    name = f"ckpt-{uuid.uuid4().hex[:8]}"
    # --time/--signal: the script's own warning (B:USR1 300 s before the limit) must not fire here
    cmd = ["sbatch", "--wait", "--time=15", "--signal=B:USR1@60", f"--ntasks={ntasks}", f"--job-name={name}",
           *([f"--nodes={nodes}"] if nodes else []), f"--output={jobdir}/%x-%j.out", str(JOBS / "checkpointed.sbatch")]
    deadline = time.monotonic() + timeout
    not_yet = [time.monotonic()]    # when the STARTED line was last seen missing: it came later
    waiter = subprocess.Popen(cmd, env=env, cwd=jobdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job_id = ""
    try:
        job_id = slurm.wait_for("the job id", lambda: slurm.cmd("squeue", "-h", "-n", name, "-o", "%i",
                                                                 check=False).stdout.strip(), 20)
        log = jobdir / f"{name}-{job_id}.out"

        def started():
            now = time.monotonic()
            if log.exists() and STARTED.search(log.read_text()):
                return True
            not_yet[0] = now
            if slurm.job(job_id).get("JobState") in FINISHED:
                pytest.fail(f"job {job_id} ended before training started:\n{log.read_text()}")
            return False

        slurm.wait_for("training to start (log line)", started, max(5.0, deadline - time.monotonic() - 60),
                       interval=0.1)
        time.sleep(1.0)   # let it train a little
        left = trains_s - (time.monotonic() - not_yet[0])
        assert left >= MARGIN_S, f"only {left:.1f} s of training left: the signal could land after the end"
        slurm.cmd("scancel", "--signal=USR1", "--batch", job_id)
        t_signal = time.monotonic()
        # the first run checkpoints and exits 75; the script requeues the job (PENDING, Restarts=1)
        rec = slurm.wait_for("the job to be requeued",
                             lambda: (r := slurm.job(job_id)) and (int(r.get("Restarts", 0)) >= 1
                                                                    or r.get("JobState") in FINISHED) and r,
                             max(5.0, deadline - time.monotonic() - 30))
        assert int(rec.get("Restarts", 0)) >= 1, f"not requeued: {rec}\n{log.read_text()}"
        sys.stderr.write(f"[slurm] checkpointed + requeued {time.monotonic() - t_signal:.1f}s after the signal\n")
        # Released too early, the new run collides with the old one's step daemons (srun's PMI2:
        # "failed to send temp kvs") or with slurmd's revocation of the old credential, which has
        # 1 s resolution ("Job credential revoked"): wait for both, then release the held job.
        t_requeued = time.monotonic()
        slurm.wait_for("the first run's step daemons to exit", lambda: slurm.job_processes_gone(job_id), 30)
        time.sleep(max(0.0, t_requeued + 3.0 - time.monotonic()))
        rec = slurm.wait_for("the requeued job to be pending",
                             lambda: (r := slurm.job(job_id)) and r.get("JobState") in {"PENDING", "RUNNING", *FINISHED}
                             and r, 30)
        if rec.get("JobState") == "PENDING":
            if requeue_ntasks is not None:
                slurm.cmd("scontrol", "update", f"jobid={job_id}", f"NumTasks={requeue_ntasks}",
                          f"NumCPUs={requeue_ntasks}", *([f"NumNodes={requeue_nodes}"] if requeue_nodes else []))
            slurm.cmd("scontrol", "update", f"jobid={job_id}", "starttime=now")
        # SLURM forgets a finished job after MinJobAge (4 s here): poll its record while sbatch
        # --wait runs and keep the last one seen, so the final state is always checked
        last: dict[str, str] = {}
        while waiter.poll() is None and time.monotonic() < deadline:
            last = slurm.job(job_id) or last
            time.sleep(0.5)
        out, _ = waiter.communicate(timeout=max(5.0, deadline - time.monotonic()))
        last = slurm.job(job_id) or last
        assert waiter.returncode == 0, f"sbatch --wait -> {waiter.returncode}: {out}\n{log.read_text()}"
        return job_id, log.read_text(), last
    except subprocess.TimeoutExpired:
        pytest.fail(f"checkpointed job {job_id} did not finish in {timeout}s")
    finally:
        if waiter.poll() is None:
            if job_id:
                slurm.cancel(job_id)
            waiter.kill()
            waiter.wait(timeout=10)


@pytest.mark.timeout(150, func_only=True)
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_signal_requeue_plumbing(slurm: Slurm, jobdir: Path, launcher: str) -> None:
    """checkpointed.sbatch's trap/forward/requeue/resume with a stand-in trainer (fake_python.sh)
    that keeps the CLI's contract: the signal must reach every rank through srun or mpiexec."""
    ckpt = jobdir / "ckpt"
    env = slurm.job_env(MPIKANEL_LAUNCHER=launcher, MPIKANEL_PYTHON=str(FAKE), MPIKANEL_CKPT_DIR=str(ckpt),
                        FAKE_STEPS="80")
    job_id, log, rec = _signal_requeue_resume(slurm, jobdir, env, ntasks=2, timeout=120, trains_s=80 * 0.1)
    assert "run 0: got SIGUSR1" in log
    assert "fake rank 0: SIGUSR1" in log and "fake rank 1: SIGUSR1" in log, "every rank must get the signal"
    assert "run 0: training exited with code 75" in log and f"requeued job {job_id}" in log
    assert "run 1:" in log and "fake: resumed from" in log
    assert "run 1: training exited with code 0" in log
    assert json.loads((ckpt / "summary.json").read_text())["steps"] == 80
    assert rec.get("JobState") == "COMPLETED" and rec.get("Restarts") == "1", rec


_REFERENCE: dict[str, dict] = {}


def _uninterrupted(args: str, ntasks: int, tmp: Path) -> dict:
    """The summary of the same BSP run without SLURM or a signal (plain mpiexec), once per session."""
    if args not in _REFERENCE:
        from launch import run_train   # tests/launch.py: mpiexec with the project's MPI settings
        proc, summary = run_train(ntasks, *args.split(), tmp_path=tmp, timeout=150)
        assert proc.returncode == 0 and summary, f"uninterrupted reference run failed:\n{proc.stderr[-3000:]}"
        _REFERENCE[args] = summary
    return _REFERENCE[args]


#: seen twice as exit 137, once passing: a timing-dependent failure, so skipped rather than xfailed
SRUN_SIGNAL = pytest.mark.skip(reason="known issue: Intel MPI wheel under srun --mpi=pmi2: the SIGUSR1 srun "
                               "forwards can make rank 0's MPI_Waitsome fail ('Other MPI error', exit 137); "
                               "checkpointed.sbatch defaults to mpiexec, tested below")


@pytest.mark.timeout(360, func_only=True)   # the job (<= 180 s) and, once, the uninterrupted run (<= 150 s)
@pytest.mark.parametrize("launcher", [pytest.param("srun", marks=SRUN_SIGNAL), "mpiexec"])
def test_checkpointed_job_signal_requeue_resume(slurm: Slurm, jobdir: Path, tmp_path_factory, launcher: str) -> None:
    """The real trainer: SIGUSR1 -> checkpoint -> exit 75 -> requeue -> --resume latest -> done, and
    the requeued BSP run ends with the same loss and parameters as an uninterrupted run (README)."""
    t0 = time.monotonic()
    ckpt = jobdir / "ckpt"
    # 18000 x 8 samples over 2 workers, a 6 ms pause in every step of 64: >= 6.7 s of training
    args = "--synthetic-rows 20000 --epochs 8 --pause-prob 1 --pause-s 0.006"
    env = slurm.job_env(MPIKANEL_LAUNCHER=launcher, MPIKANEL_CKPT_DIR=str(ckpt), MPIKANEL_CKPT_EVERY="0",
                        MPIKANEL_ARGS=args)
    job_id, log, rec = _signal_requeue_resume(slurm, jobdir, env, ntasks=3, timeout=180,
                                              trains_s=18000 * 8 / 64 / 2 * 0.006)
    assert "run 0: got SIGUSR1" in log
    assert "run 0: training exited with code 75" in log and f"requeued job {job_id}" in log, log
    run1 = log[log.index("run 1:"):]
    assert "resumed from" in run1, log
    assert "run 1: training exited with code 0" in run1, log
    assert "checkpoint" in log[:log.index("run 0: training exited")], "run 0 wrote no checkpoint"
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["resumed_from"] and Path(summary["resumed_from"]).parent == ckpt, summary["resumed_from"]
    assert rec.get("JobState") == "COMPLETED" and rec.get("Restarts") == "1", rec
    ref = _uninterrupted(args, 3, tmp_path_factory.mktemp("uninterrupted"))
    assert summary["sync"] == ref["sync"] == "bsp"
    assert summary["test_loss"] == ref["test_loss"] and summary["train_loss"] == ref["train_loss"], \
        (summary["test_loss"], ref["test_loss"])
    assert summary["params_sha256"] == ref["params_sha256"], "BSP resumed from a checkpoint must be bitwise identical"
    sys.stderr.write(f"[slurm] checkpointed.sbatch ({launcher}: signal, requeue, resume) took {time.monotonic() - t0:.1f}s\n")


@pytest.mark.timeout(300, func_only=True)
def test_requeued_job_resumes_on_another_task_count(slurm: Slurm, jobdir: Path) -> None:
    """A requeue that gets a smaller allocation (4 tasks, then 3): the run resumes from the 4-rank
    checkpoint on 3 ranks, loses no work and completes the shared budget exactly."""
    ckpt = jobdir / "ckpt"
    # 18000 x 8 samples over 3 workers, an 8 ms pause in every step of 64: >= 6 s of training
    args = "--synthetic-rows 20000 --epochs 8 --pause-prob 1 --pause-s 0.008 --sync ssp"
    env = slurm.job_env(MPIKANEL_LAUNCHER="mpiexec", MPIKANEL_CKPT_DIR=str(ckpt), MPIKANEL_CKPT_EVERY="0",
                        MPIKANEL_ARGS=args)
    job_id, log, rec = _signal_requeue_resume(slurm, jobdir, env, ntasks=4, timeout=240,
                                              trains_s=18000 * 8 / 64 / 3 * 0.008, requeue_ntasks=3)
    assert "run 0: training exited with code 75" in log and f"requeued job {job_id}" in log, log
    run1 = log[log.index("run 1:"):]
    assert "resuming on 3" in run1 and "run 1: training exited with code 0" in run1, log
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["reshaped"]["ranks"] == 4 and summary["workers"] == 2, summary.get("reshaped")
    assert summary["samples"] + summary["reshaped"]["samples_before"] == summary["samples_budget"] == 8 * 18000
    assert summary["deltas_sent"] == summary["deltas_applied"] and summary["delta_sum_rel_error"] < 1e-9
    assert rec.get("JobState") == "COMPLETED" and rec.get("Restarts") == "1", rec


# ---------------------------------------------------------------- across emulated nodes (root)

def _part_hosts(manifest: dict) -> set[str]:
    """The hosts that wrote a checkpoint's parts, as its manifest names them."""
    return {part["host"] for part in manifest["files"]}


def _nodes_seen(summary: dict) -> dict[str, list[int]]:
    """The summary's node_ranks as {host: ranks}."""
    return {name: list(ranks) for name, ranks in summary["node_ranks"].items()}


@pytest.mark.timeout(240, func_only=True)
@pytest.mark.parametrize("launcher", [pytest.param("srun", marks=SRUN_OPEN_MPI), "mpiexec"])
def test_train_job_spans_two_nodes_and_bsp_matches_one_host(slurm_nodes: Slurm, jobdir: Path, tmp_path_factory,
                                                            launcher: str) -> None:
    """`sbatch -N 2`: the ranks run on both emulated nodes (TCP between them) and BSP gives the
    same model as the same job on one host."""
    t0 = time.monotonic()
    env = slurm_nodes.job_env(MPIKANEL_LAUNCHER=launcher, MPIKANEL_RUN_DIR=str(jobdir / "run"), MPIKANEL_ARGS=SMALL)
    proc = _sbatch_wait(slurm_nodes, jobdir, "train.sbatch", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
                        env=env)
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{_logs(jobdir)}"
    summary = json.loads((jobdir / "run" / "summary.json").read_text())
    assert summary["nodes"] == 2, summary.get("node_ranks")
    seen = _nodes_seen(summary)
    assert sorted(seen) == ["h0", "h1"] and sorted(r for ranks in seen.values() for r in ranks) == [0, 1, 2, 3], seen
    assert "ranks on h[0-1]" in _logs(jobdir), _logs(jobdir)
    ref = _uninterrupted(SMALL, 4, tmp_path_factory.mktemp("one-host"))
    assert ref["nodes"] == 1
    assert summary["params_sha256"] == ref["params_sha256"], "BSP across two nodes must match one host bitwise"
    sys.stderr.write(f"[slurm] train.sbatch -N 2 ({launcher}) took {time.monotonic() - t0:.1f}s\n")


@pytest.mark.timeout(300, func_only=True)
def test_checkpointed_job_on_two_nodes_is_requeued_onto_one(slurm_nodes: Slurm, jobdir: Path) -> None:
    """checkpointed.sbatch on 2 nodes x 2 ranks: signalled, every rank writes its part of the checkpoint
    from its own node into one directory; the requeued job gets 1 node and 3 ranks, resumes from
    those parts, loses no work and completes the shared budget exactly."""
    ckpt = jobdir / "ckpt"
    # 18000 x 8 samples over 3 workers, an 8 ms pause in every step of 64: >= 6 s of training
    args = "--synthetic-rows 20000 --epochs 8 --pause-prob 1 --pause-s 0.008 --sync ssp"
    env = slurm_nodes.job_env(MPIKANEL_LAUNCHER="mpiexec", MPIKANEL_CKPT_DIR=str(ckpt), MPIKANEL_CKPT_EVERY="0",
                              MPIKANEL_ARGS=args)
    job_id, log, rec = _signal_requeue_resume(slurm_nodes, jobdir, env, ntasks=4, nodes=2, timeout=240,
                                              trains_s=18000 * 8 / 64 / 3 * 0.008, requeue_ntasks=3, requeue_nodes=1)
    # across nodes Hydra passes on 75 or reports 255 (seen both); the script counts the checkpoint
    assert re.search(r"run 0: (training exited with code 75|the launcher reported \d+, but \S+ was committed "
                     r"after the signal: checkpointed \(75\))", log), log
    assert f"requeued job {job_id}" in log, log
    run1 = log[log.index("run 1:"):]
    assert "resuming on 3" in run1 and "run 1: training exited with code 0" in run1, log
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["nodes"] == 1, summary.get("node_ranks")
    assert summary["reshaped"]["ranks"] == 4 and summary["workers"] == 2, summary.get("reshaped")
    assert summary["samples"] + summary["reshaped"]["samples_before"] == summary["samples_budget"] == 8 * 18000
    assert summary["deltas_sent"] == summary["deltas_applied"] and summary["delta_sum_rel_error"] < 1e-9
    # the checkpoint the second run resumed from: its parts were written on both nodes
    manifest = json.loads((Path(summary["resumed_from"]) / "manifest.json").read_text())
    assert _part_hosts(manifest) == {"h0", "h1"}, manifest
    assert rec.get("JobState") == "COMPLETED" and rec.get("Restarts") == "1", rec
