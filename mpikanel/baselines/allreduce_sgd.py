"""Horovod-style synchronous data-parallel SGD: the baseline the parameter server is compared with.

Usage: ``mpiexec -n R python -m mpikanel.baselines.allreduce_sgd [mpikanel.train's flags]``
(data, model, --lr, --batch-size, --epochs, --seed, --slowdown/--pause-*/--link-*, --metrics,
--summary-json, --quiet; --sync and --staleness are ignored).

Every one of the R ranks trains (there is no server, so R trainers against the parameter
server's R-1 workers): each step every rank takes one minibatch step of the same numba kernels
from the common parameters, then ``Allreduce(SUM)`` of the parameter deltas gives
params_new = params_old + sum of the deltas, exactly the parameter server's BSP update. All
ranks take the same number of steps (the smallest shard's). Heterogeneity injection uses
worker number rank+1, so ``--slowdown 1:4`` slows MPI rank 0 and the per-worker entries are
numbered 1..R like the server's workers. Rank 0 copies the parameters every
``--snapshot-interval`` s and evaluates the copies on the test set after training.

Per-step Allreduce durations are gathered after the run: per step, the shortest duration over
the ranks counts as communication (``comm_s``) and the rest of each rank's as waiting for
slower ranks (``wait_s``) -- no extra messages during training.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import mpikanel.comm  # noqa: F401  - MPICH heavy-yield and thread defaults before MPI starts
from mpi4py import MPI  # noqa: E402

from ..config import TrainConfig  # noqa: E402
from ..data import describe, load_rows, load_test, shard_range  # noqa: E402
from ..errors import InputError, TrainingError  # noqa: E402
from ..hetero import Injector, parse_hetero, sleep_for  # noqa: E402
from ..kernels import BoundModel, bind, get_model, warmup  # noqa: E402
from ..metrics import SnapshotRecorder, evaluate_curve  # noqa: E402
from ..train import agree, data_spec, hetero_spec  # noqa: E402
from ..worker_loop import BatchCursor, StepPlan  # noqa: E402
from .common import finish, make_summary  # noqa: E402


def _setup(config: TrainConfig, comm: MPI.Comm) -> tuple[BoundModel, BoundModel | None, str]:
    """Validate, load this rank's shard (rank 0 also the test set), compile the kernels."""
    size, rank = comm.Get_size(), comm.Get_rank()
    model = get_model(config.model)
    spec = data_spec(config)

    def check():
        if rank != 0:
            return None
        parse_hetero(hetero_spec(config), size)
        info = describe(spec)
        if info.n_rows < size:
            raise InputError(f"{info.description} has {info.n_rows} training rows, fewer than {size} ranks")
        return info

    info = comm.bcast(agree(comm, check), root=0)
    start, stop = shard_range(info.n_rows, size, rank)
    shard, test = agree(comm, lambda: (load_rows(spec, info, start, stop),
                                             load_test(spec, info) if rank == 0 else None))
    if rank == 0:
        warmup(model)
    comm.Barrier()
    if rank != 0:
        warmup(model)
    bound_test = bind(model, test.X, test.y, info.n_classes) if test is not None else None
    return bind(model, shard.X, shard.y, info.n_classes), bound_test, info.description


def train(config: TrainConfig, comm: MPI.Comm) -> dict | None:
    """Collective allreduce SGD; returns the summary on rank 0 (None elsewhere)."""
    size, rank = comm.Get_size(), comm.Get_rank()
    shard, test, description = _setup(config, comm)
    plan = StepPlan(config.epochs, config.batch_size, config.lr, config.l2, shard.n_classes, config.max_steps)
    n_steps = comm.allreduce(plan.total_steps(shard.rows), op=MPI.MIN)
    n_params = shard.model.n_params(shard.X.shape[1], shard.n_classes)
    # the same start as mpikanel.train (zeros, or e.g. the MLP's seeded random weights)
    params = np.ascontiguousarray(shard.model.init(n_params, shard.X.shape[1], shard.n_classes,
                                                   np.random.default_rng([config.seed, 12345])), dtype=np.float64)
    local = np.zeros(n_params)
    delta, summed = np.zeros(n_params), np.zeros(n_params)
    scratch = shard.scratch()
    injector = Injector(hetero_spec(config), rank + 1, size)
    rng = np.random.default_rng([config.seed, rank + 1])
    recorder = SnapshotRecorder(config.snapshot_interval) if rank == 0 else None
    reduce_s = np.zeros(n_steps)
    compute_s = 0.0
    comm.Barrier()
    t_start = time.perf_counter()
    if recorder is not None:
        recorder.maybe_snapshot(0.0, params, 0)
    cursor = BatchCursor(shard.rows, plan, rng)
    for step in range(1, n_steps + 1):
        idx = cursor.next()
        t0 = time.perf_counter()
        local[:] = params
        shard.step(local, idx, plan.lr, plan.l2, scratch)
        np.subtract(local, params, out=delta)
        t1 = time.perf_counter()
        compute_s += t1 - t0
        if not np.isfinite(delta.sum()):
            raise TrainingError(f"rank {rank} produced non-finite parameters at step {step} "
                                f"(learning rate {plan.lr} too high?)")
        sleep_for(injector.compute_delay(t1 - t0) + injector.link_delay(8 * n_params))
        t2 = time.perf_counter()
        comm.Allreduce(delta, summed, op=MPI.SUM)
        params += summed
        t3 = time.perf_counter()
        reduce_s[step - 1] = t3 - t2
        if recorder is not None:
            recorder.maybe_snapshot(t3 - t_start, params, step)
    wall = time.perf_counter() - t_start
    if recorder is not None:
        recorder.final(wall, params, n_steps)
    return _finish(config, comm, shard, test, description, params, recorder, wall,
                   {"rank": rank + 1, "mpi_rank": rank, "rows": shard.rows, "steps": n_steps, "pushes": n_steps,
                    "compute_s": compute_s, "injected_s": injector.injected_s, "slowdown": injector.factor},
                   reduce_s)


def _finish(config: TrainConfig, comm: MPI.Comm, shard: BoundModel, test: BoundModel | None, description: str,
            params: np.ndarray, recorder: SnapshotRecorder | None, wall: float, stats: dict,
            reduce_s: np.ndarray) -> dict | None:
    """Split Allreduce time into comm and wait, gather train loss, evaluate and write on rank 0."""
    all_reduce_s = np.array(comm.allgather(reduce_s))            # (ranks, steps)
    floor = all_reduce_s.min(axis=0) if all_reduce_s.size else np.zeros(0)
    stats["comm_s"] = float(floor.sum())
    stats["wait_s"] = float((reduce_s - floor).sum())
    workers = comm.gather(stats, root=0)
    losses = comm.gather((shard.loss_sum(params), shard.rows, shard.correct(params)), root=0)
    if comm.Get_rank() != 0:
        return None
    n_train = sum(x[1] for x in losses)
    curve = evaluate_curve(recorder.snapshots, lambda p: test.loss_sum(p) / test.rows,
                           lambda p: test.correct(p) / test.rows)
    summary = make_summary("allreduce", config, shard.model.name, comm.Get_size(), workers, wall, {
        "data": description, "n_train": n_train, "n_test": test.rows, "n_params": int(params.size),
        "train_loss": sum(x[0] for x in losses) / n_train, "train_accuracy": sum(x[2] for x in losses) / n_train,
        "test_loss": test.loss_sum(params) / test.rows, "test_accuracy": test.correct(params) / test.rows,
        "deltas_sent": int(sum(w["pushes"] for w in workers)), "params_norm": float(np.linalg.norm(params))},
        mpi_library=MPI.Get_library_version().splitlines()[0])
    finish(config, summary, curve)
    return summary


def main(argv: list[str] | None = None) -> int:
    """CLI: 2 on bad input (every rank), MPI Abort naming the rank on any failure during training."""
    from ..comm.cli import run_cli

    def body(config, world) -> int:
        train(config, world)
        return 0

    return run_cli("allreduce_sgd", body, argv)


if __name__ == "__main__":
    sys.exit(main())
