"""What the Allreduce-family baselines share: set-up, the training loop, the summary and its files.

``allreduce_sgd`` (sum of the step deltas every step, the parameter server's BSP update) and
``local_sgd`` (H local steps, then the average of the parameters) are one loop here,
:func:`train_allreduce`, with two knobs: how many steps between Allreduces and the factor
the summed deltas are multiplied by. Both use the same data shards, numba kernels,
heterogeneity injection and pacing as the parameter server's workers (one
:class:`mpikanel.worker_loop.Pacer`: the slowdown scales each step's *CPU* time, or with
``--step-time`` each step lasts max(its compute, the modeled step), the rest slept), shared
work budget, validation split, metrics file and summary keys as ``mpikanel.train``.
:mod:`mpikanel.baselines.torch_ddp` (PyTorch DDP) trains in its own loop but takes its set-up,
:func:`rank_loop` and :func:`finish_ranks` from here.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._version import __version__
from ..config import TrainConfig
from ..data import DataInfo, data_spec, describe, load_rows, load_test, shard_range
from ..errors import InputError, TrainingError
from ..hetero import Injector, describe_hetero, parse_hetero, sleep_for
from ..kernels import CSR, BoundModel, bind
from ..evaluate import curve_of
from ..metrics import SnapshotRecorder, write_metrics
from ..summary import add_curve, add_step_time_rel, pacing_fields, warn_pacing
from ..engine.budget import total_samples
from ..session import agree, hetero_spec, model_for, start_params, val_rows, warm_ranks
from ..worker_loop import BatchCursor, Pacer, StepPlan

#: the baselines' --help on heterogeneity and pacing (the parameter server workers' own)
PACING_HELP = ("Heterogeneity uses worker number rank+1 (--slowdown 1:4 slows MPI rank 0). Paced exactly like "
               "mpikanel.train's workers, by the same code: with --step-time S every step lasts max(its compute, "
               "S x rows/--batch-size x the rank's --slowdown factor, plus --pause-s when it pauses), the rest "
               "slept; the summary records step_time, per-rank paced_s/pacing_s/pacing_missed and pacing_held. "
               "Without --step-time the slowdown scales each step's CPU time.")


def steps_for_samples(rows: int, batch_size: int, samples: int) -> int:
    """Steps a BatchCursor over `rows` rows needs to hand out at least `samples` samples."""
    per_epoch = math.ceil(rows / batch_size)
    full, rest = divmod(samples, rows)
    return full * per_epoch + math.ceil(rest / batch_size)


def budget_steps(config: TrainConfig, n_train: int, ranks: int, shard_rows: int) -> int:
    """This rank's steps: an equal share of EPOCHS x training rows (shared), or EPOCHS passes (per-worker)."""
    if config.budget == "per-worker":
        n = config.epochs * math.ceil(shard_rows / config.batch_size)
    else:
        share = math.ceil(total_samples(config.epochs, n_train) / ranks)
        n = steps_for_samples(shard_rows, config.batch_size, share)
    return n if config.max_steps is None else min(n, config.max_steps)


@dataclass
class Setup:
    """What every rank agreed on: its bound shard; rank 0 also the test and validation rows."""

    shard: BoundModel
    test: BoundModel | None
    val: BoundModel | None
    description: str
    n_train: int
    n_classes: int


def setup(config: TrainConfig, comm: Any) -> Setup:
    """Validate, load this rank's shard of the training rows (rank 0 also test and validation), compile.
    The model is a built-in one or a ``py:FILE:FACTORY`` one, built for the data's shape."""
    size, rank = comm.Get_size(), comm.Get_rank()
    spec = data_spec(config)
    built: dict[str, Any] = {}

    def check() -> DataInfo | None:
        if rank != 0:
            return None
        parse_hetero(hetero_spec(config), size)
        info = describe(spec)
        built["model"] = model_for(config, info)    # a py: model's file, factory and shape: one line
        if info.n_rows - val_rows(config, info.n_rows) < size:
            raise InputError(f"{info.description} has {info.n_rows} training rows, too few for {size} ranks")
        return info

    info = comm.bcast(agree(comm, check), root=0)
    model = agree(comm, lambda: built.get("model") or model_for(config, info))
    n_train = info.n_rows - val_rows(config, info.n_rows)
    start, stop = shard_range(n_train, size, rank)

    def load() -> tuple:
        extra = (load_test(spec, info), load_rows(spec, info, n_train, info.n_rows) if n_train < info.n_rows
                 else None) if rank == 0 else (None, None)
        return (load_rows(spec, info, start, stop), *extra)

    shard, test, val = agree(comm, load)
    warm_ranks(comm, model, sparse=isinstance(shard.X, CSR))
    bound = [None if d is None else bind(model, d.X, d.y, info.n_classes) for d in (shard, test, val)]
    return Setup(*bound, info.description, n_train, info.n_classes)


def injected_step(shard: BoundModel, local: np.ndarray, idx: np.ndarray, plan: StepPlan, scratch: Any,
                  pacer: Pacer, progress: float = 0.0) -> tuple[float, float, float]:
    """One SGD step at `progress` through the budget (the rate schedule's), then the pacer's sleep
    (the parameter server workers' own); (compute s, slept s, of it injected s)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    shard.step(local, idx, plan.rate_for(idx.size, progress), plan.l2, scratch)
    return pacer.finish_step(time.perf_counter() - t0, time.thread_time() - c0, int(idx.size))


@dataclass
class RankLoop:
    """What a baseline rank's training loop starts from: the step plan, the shared step count, the
    injector and pacer (worker number rank+1), the minibatch cursor, rank 0's recorder, the stats."""

    plan: StepPlan
    n_steps: int
    injector: Injector
    pacer: Pacer
    cursor: BatchCursor
    recorder: SnapshotRecorder | None
    stats: dict


def rank_loop(config: TrainConfig, comm: Any, s: Setup) -> RankLoop:
    """The loop state of this rank (collective: the ranks agree on the most steps of any rank's share)."""
    from mpi4py import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    plan = StepPlan(config.epochs, config.batch_size, config.lr, config.l2, s.n_classes, None,
                    schedule=config.lr_schedule, warmup=config.warmup)
    n_steps = comm.allreduce(budget_steps(config, s.n_train, size, s.shard.rows), op=MPI.MAX)
    injector = Injector(hetero_spec(config), rank + 1, size, n_steps)
    cursor = BatchCursor(s.shard.rows, StepPlan(n_steps, config.batch_size, config.lr, config.l2, s.n_classes,
                                                n_steps), np.random.default_rng([config.seed, rank + 1]))
    stats = {"rank": rank + 1, "mpi_rank": rank, "rows": s.shard.rows, "steps": 0, "pushes": 0, "samples": 0,
             "compute_s": 0.0, "injected_s": 0.0, "pacing_s": 0.0, "slowdown": injector.factor}
    return RankLoop(plan, n_steps, injector, Pacer(injector, config.batch_size, config.step_time), cursor,
                    SnapshotRecorder(config.snapshot_interval) if rank == 0 else None, stats)


def train_allreduce(config: TrainConfig, comm: Any, kind: str, every: int, scale: float,
                    extra: dict | None = None) -> dict | None:
    """Every rank trains; every `every` steps Allreduce(SUM) of the deltas, params += scale x sum.

    Returns the summary on rank 0 (None elsewhere). Heterogeneity uses worker number rank+1.
    """
    from mpi4py import MPI

    rank = comm.Get_rank()
    s = setup(config, comm)
    loop = rank_loop(config, comm, s)
    plan, n_steps, injector, pacer, cursor, recorder, stats = (loop.plan, loop.n_steps, loop.injector, loop.pacer,
                                                               loop.cursor, loop.recorder, loop.stats)
    n_params = s.shard.model.n_params(s.shard.X.shape[1], s.n_classes)
    # the same start as mpikanel.train (zeros, or e.g. the MLP's seeded random weights)
    params = start_params(s.shard.model, n_params, s.shard.X.shape[1], s.n_classes, config.seed)
    local, delta, summed = params.copy(), np.zeros(n_params), np.zeros(n_params)
    scratch = s.shard.scratch()
    reduce_s: list[float] = []
    load_before = os.getloadavg()[0]
    comm.Barrier()
    t_start = time.perf_counter()
    if recorder is not None:
        recorder.maybe_snapshot(0.0, params, 0)
    for step in range(1, n_steps + 1):
        idx = cursor.next()
        compute, slept, injected = injected_step(s.shard, local, idx, plan, scratch, pacer, (step - 0.5) / n_steps)
        stats["steps"] += 1
        stats["samples"] += len(idx)
        stats["compute_s"] += compute
        stats["injected_s"] += injected
        stats["pacing_s"] += slept - injected
        if step % every and step != n_steps:
            continue
        np.subtract(local, params, out=delta)
        if not np.isfinite(delta.sum()):
            raise TrainingError(f"rank {rank} produced non-finite parameters at step {step} "
                                f"(learning rate {plan.lr} too high?)")
        link = injector.link_delay(8 * n_params)
        sleep_for(link)
        stats["injected_s"] += link
        t2 = time.perf_counter()
        comm.Allreduce(delta, summed, op=MPI.SUM)
        params += scale * summed
        local[:] = params
        t3 = time.perf_counter()
        reduce_s.append(t3 - t2)
        stats["pushes"] += 1
        if recorder is not None:
            recorder.maybe_snapshot(t3 - t_start, params, stats["pushes"])
    wall = time.perf_counter() - t_start
    stats["paced_s"], stats["pacing_missed"] = pacer.paced_s, pacer.missed
    if recorder is not None:
        recorder.final(wall, params, stats["pushes"])
    stats["load_avg"] = (load_before, os.getloadavg()[0])
    return finish_ranks(config, comm, s, kind, params, recorder, wall, stats, np.asarray(reduce_s), extra or {})


def finish_ranks(config: TrainConfig, comm: Any, s: Setup, kind: str, params: np.ndarray,
            recorder: SnapshotRecorder | None, wall: float, stats: dict, reduce_s: np.ndarray,
            extra: dict) -> dict | None:
    """Split Allreduce time into comm and wait, gather train loss, evaluate and write on rank 0.

    Per Allreduce the shortest duration over the ranks counts as communication (``comm_s``),
    the rest of each rank's as waiting for slower ranks (``wait_s``).
    """
    from mpi4py import MPI

    from ..comm.waits import barrier

    floor = np.array(comm.allgather(reduce_s)).min(axis=0) if reduce_s.size else np.zeros(0)
    stats["comm_s"] = float(floor.sum())
    stats["wait_s"] = float((reduce_s - floor).sum())
    load_before, load_after = stats.pop("load_avg")
    workers = comm.gather(stats, root=0)
    losses = comm.gather((s.shard.loss_sum(params), s.shard.rows, s.shard.correct(params)), root=0)
    if comm.Get_rank() != 0:
        barrier(comm)           # asleep while rank 0 evaluates: MPI's own waits would poll a core each
        return None
    add_step_time_rel(workers)
    n_train = sum(x[1] for x in losses)
    curve = curve_of(recorder.snapshots, {"test": s.test, "val": s.val}, config.hidden, config.activation,
                     config.curve_points)
    summary = make_summary(kind, config, s.shard.model.name, comm.Get_size(), workers, wall, {
        "data": s.description, "n_train": n_train, "n_test": s.test.rows, "n_val": 0 if s.val is None else s.val.rows,
        "n_params": int(params.size), "train_loss": sum(x[0] for x in losses) / n_train,
        "train_accuracy": sum(x[2] for x in losses) / n_train,
        "test_loss": s.test.loss_sum(params) / s.test.rows, "test_accuracy": s.test.correct(params) / s.test.rows,
        **_val_metrics(s.val, params), "deltas_sent": int(sum(w["pushes"] for w in workers)),
        "budget": config.budget, "samples": int(sum(w["samples"] for w in workers)),
        "samples_budget": total_samples(config.epochs, s.n_train) if config.budget == "shared" else None,
        "params_norm": float(np.linalg.norm(params)), **pacing_fields(config.step_time, workers),
        "load_avg_before": load_before, "load_avg_after": load_after, **extra},
        mpi_library=MPI.Get_library_version().splitlines()[0])
    finish(config, summary, curve)
    barrier(comm)
    return summary


def _val_metrics(val: BoundModel | None, params: np.ndarray) -> dict:
    if val is None:
        return {"val_loss": None, "val_accuracy": None}
    return {"val_loss": val.loss_sum(params) / val.rows, "val_accuracy": val.correct(params) / val.rows}


def make_summary(kind: str, config: TrainConfig, model: str, ranks: int, workers: list[dict],
                 wall_s: float, results: dict[str, Any], mpi_library: str = "") -> dict:
    """A summary dict with the keys of mpikanel.train's (sync = the baseline's name)."""
    summary = {"sync": kind, "model": model, "workers": len(workers), "ranks": ranks, "wall_s": wall_s,
               "per_worker": workers, "config": config.to_dict(),
               "scenario": config.scenario or describe_hetero(hetero_spec(config)),
               "versions": {"mpikanel": __version__, "python": platform.python_version(),
                            "numpy": np.__version__, "mpi": mpi_library}}
    summary.update(results)
    return summary


def finish(config: TrainConfig, summary: dict, curve: dict, extra_attrs: dict | None = None) -> None:
    """Add the curve, write the metrics file and summary JSON the config asks for, print unless quiet."""
    add_curve(summary, curve, config.target_loss)
    warn_pacing(summary)
    if config.metrics:
        attrs = {"sync": summary["sync"], "model": summary["model"], "workers": summary["workers"],
                 "seed": config.seed, "scenario": summary["scenario"], "command": " ".join(sys.argv),
                 "versions": summary["versions"], **(extra_attrs or {})}
        write_metrics(config.metrics, summary, curve, summary["per_worker"], attrs)
    if config.summary_json:
        with open(config.summary_json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if not config.quiet:
        reached = summary.get("time_to_target_s")
        print(f"{summary['sync']} {summary['model']}: {summary['workers']} trainers, wall {summary['wall_s']:.2f} s, "
              f"test loss {summary['test_loss']:.4f}, acc {summary['test_accuracy']:.2%}"
              + ("" if summary.get("pacing_held") is None else f", paced at --step-time {summary['step_time']:g} s "
                 f"({'held' if summary['pacing_held'] else 'NOT held'})")
              + ("" if config.target_loss is None else
                 f", time to {config.target_loss:g}: " + ("not reached" if reached is None else f"{reached:.2f} s")),
              flush=True)
