"""Entry points: ``python -m mpikanel.train`` and the library call ``mpikanel.train(config, comm)``.

Ranks 0..K-1 serve the parameters (``--servers K``, default 1; rank 0 decides for all of them),
the other ranks train. Set-up (data, model, policy) is
validated collectively, so bad input raises the same InputError on every rank before
training starts; any failure after that aborts the whole job with the failing rank named.
"""
from __future__ import annotations

import dataclasses

import json
import os
import signal
import sys
import time
import types
from dataclasses import dataclass, replace
from typing import Any, Callable, TypeVar

import numpy as np

from .signals import StopSignals

# The CLI catches SIGTERM/SIGUSR1 from its first moment: SLURM may signal while the heavy
# imports below (numba, h5py, mpi4py) are still loading, and a default handler would kill the
# rank with 138/143 instead of checkpointing and exiting 75.
_EARLY_SIGNALS = StopSignals(enabled=True) if __name__ == "__main__" else None

from .comm import environment  # noqa: E402,F401  - sets MPICH defaults before mpi4py starts MPI
from .config import TrainConfig, make_config, resumed_config
from .data import DataInfo, Shard, data_spec, describe, load_rows, load_test, shard_range
from . import checkpoint as ckpt_mod
from .errors import InputError, NothingLeft
from .engine.budget import Budget, fair_steps, total_samples
from .evaluate import curve_of
from .model_io import save_model
from .preflight import check_fits, machine_memory
from .engine.server_core import ServerCore
from .hetero import HeteroSpec, Injector, ServerDelay, describe_hetero, parse_hetero
from .kernels import CSR, BoundModel, Model, bind, cache_is_cold, get_model, set_threads, warmup
from .metrics import SnapshotRecorder, evaluate_curve, write_metrics
from .engine.servermap import ServerMap
from .engine.sparse import effective_mode
from .summary import add_curve, cpu_fields, evaluate, format_summary, process_started_at
from . import sync as sync_models
from .sync import Schedule, SyncPolicy
from .worker_loop import StepPlan, WorkerStats, run_worker

T = TypeVar("T")

#: exit code of a run stopped by SIGTERM/SIGUSR1 after writing its checkpoint ("requeue me")
EXIT_CHECKPOINTED = 75


@dataclass
class Setup:
    """What every rank agreed on before training."""

    config: TrainConfig
    info: DataInfo
    model: Model
    n_params: int
    plan: StepPlan
    shard: BoundModel | None   # a worker's training rows, bound to the model's kernels
    test: BoundModel | None    # the server's test rows
    val: BoundModel | None = None   # the server's validation rows (--val-fraction)
    train_rows: int = 0        # training rows the workers share (validation rows excluded)
    servers: ServerMap | None = None   # which server rank owns which parameters
    push_mode: str = "dense"           # the frames pushes and replies use (mpikanel.engine.sparse.effective_mode)


def agree(comm, fn: Callable[[], T]) -> T:
    """Run fn on every rank; if any rank raised InputError, raise the first on all ranks."""
    try:
        result, error = fn(), None
    except InputError as exc:
        result, error = None, str(exc)
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise InputError(errors[0])
    return result  # type: ignore[return-value]


def policy_for(config: TrainConfig, n_workers: int) -> SyncPolicy:
    """The server-side sync policy a config asks for."""
    return sync_models.get(config.sync).make(config, n_workers)[0]


def schedule_for(config: TrainConfig, n_workers: int) -> Schedule:
    """The worker-side schedule a config asks for."""
    return sync_models.get(config.sync).make(config, n_workers)[1]


def hetero_spec(config: TrainConfig) -> HeteroSpec:
    """The heterogeneity injection a config asks for."""
    return HeteroSpec(slowdown=config.slowdown, pause_prob=config.pause_prob, pause_s=config.pause_s,
                      link_delay=config.link_delay, link_bandwidth=config.link_bandwidth, seed=config.seed)


def model_for(config: TrainConfig, info: DataInfo | None = None) -> Model:
    """The model a config names: a registered one, or (given the data's shape) a ``py:FILE:FACTORY`` one."""
    from .models import is_spec

    if not is_spec(config.model):
        return get_model(config.model, hidden=config.hidden, activation=config.activation)
    from .models import model_from_spec, parse_shape

    if info is None:
        raise ValueError("a py: model is built for a data shape: pass info")
    shape = parse_shape(config.input_shape)
    if shape is not None and int(np.prod(shape)) != info.n_features:
        raise InputError(f"--input-shape {config.input_shape} holds {int(np.prod(shape))} values, "
                         f"{info.description} has {info.n_features} features")
    if not info.row_bytes:
        raise InputError(f"--model {config.model}: py: models need dense rows (.npz/.h5, synthetic, "
                         f"fashion-mnist), {info.description} is sparse")
    gm = model_from_spec(config.model, info.n_features, info.n_classes, shape, threads=config.threads)
    return gm.as_model(config.model, info.n_features, info.n_classes, shape)


def _describe_checked(config: TrainConfig, n_workers: int, ranks_here: int) -> tuple[DataInfo, Model]:
    """Rank 0: the data's shape and the model, every setting checked, and the run's size against the
    memory of the machine that holds `ranks_here` of its ranks; InputError otherwise."""
    from .models import is_spec

    model = None if is_spec(config.model) else model_for(config)
    policy_for(config, n_workers)
    parse_hetero(hetero_spec(config), n_workers)
    if config.server_delay:
        ServerDelay(config.server_delay)
    for flag, path in (("--save-model", config.save_model), ("--metrics", config.metrics)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise InputError(f"{flag} {path}: its directory does not exist")
    info = describe(data_spec(config))
    if model is None:
        model = model_for(config, info)
    classes = max(info.n_classes, model.min_classes)
    hidden = f", {config.hidden} hidden units" if model.name == "mlp" else ""
    check_fits(model.name, model.n_params(info.n_features, classes), f"{info.n_features:,} features x {classes} "
               f"classes{hidden}", info.features_cause, ranks_here, -(-info.n_rows // n_workers) * info.row_bytes,
               machine_memory())
    if config.permute_features == "on" and not model.csr_keys:
        raise InputError(f"--permute-features on needs a linear model (logistic, softmax, svm, lsq), not {model.name}")
    if info.n_classes < model.min_classes or (model.max_classes and info.n_classes > model.max_classes):
        hint = " (use --model softmax)" if info.n_classes > 2 else ""
        raise InputError(f"model {model.name} needs {model.min_classes}"
                         f"{'' if model.max_classes == model.min_classes else '+'} classes, "
                         f"{info.description} has {info.n_classes}{hint}")
    if info.n_rows - val_rows(config, info.n_rows) < n_workers:
        raise InputError(f"{info.description} has {info.n_rows} training rows, fewer than the "
                         f"{n_workers} workers; use fewer ranks")
    return info, model


def val_rows(config: TrainConfig, n_rows: int) -> int:
    """Rows held out for validation: the last --val-fraction of the training rows."""
    return int(round(config.val_fraction * n_rows))


def budget_for(config: TrainConfig, n_workers: int, train_rows: int) -> Budget:
    """The run's work budget (shared samples and/or wall time) as the server enforces it."""
    total = total_samples(config.epochs, train_rows) if config.budget == "shared" else None
    return Budget(n_workers, total, config.batch_size, config.time_budget)


def step_plan(config: TrainConfig, n_classes: int, n_workers: int, train_rows: int) -> StepPlan:
    """Each worker's SGD plan: hyper-parameters, rate schedule, and its first lease of a shared budget."""
    shared = config.budget == "shared"
    lease = budget_for(config, n_workers, train_rows).initial_lease() if shared else None
    return StepPlan(config.epochs, config.batch_size, config.lr, config.l2, n_classes, config.max_steps,
                    lease=lease, schedule=config.lr_schedule, warmup=config.warmup,
                    budget_samples=total_samples(config.epochs, train_rows) if shared else None)


def warm_ranks(comm, model: Model, sparse: bool | None = None, quiet: bool = True) -> None:
    """Compile the model's kernels into the numba cache on rank 0 first; the others then load them.
    `sparse` (the data's kind, the same on every rank) loads only the CSR or only the dense kernels:
    each cached kernel costs a rank about a tenth of a second to load."""
    kinds = {} if sparse is None else {"dense": not sparse, "sparse": sparse}
    if comm.Get_rank() == 0:
        if not quiet and model.compiled and cache_is_cold():
            print("mpikanel: compiling kernels, once: ~20 s", file=sys.stderr, flush=True)
        warmup(model, **kinds)
    comm.Barrier()
    if comm.Get_rank() != 0:
        warmup(model, **kinds)


def setup(config: TrainConfig, comm) -> Setup:
    """Validate and load everything collectively; InputError on every rank if anything is wrong."""
    from mpi4py import MPI

    size, rank, k = comm.Get_size(), comm.Get_rank(), config.servers
    if size < k + 1:
        raise InputError(f"mpikanel needs at least {k + 1} MPI ranks ({k} server{'s' if k > 1 else ''} + workers), "
                         f"got {size}; run as: mpiexec -n {k + 3} python -m mpikanel.train"
                         + (f" --servers {k}" if k > 1 else ""))
    n_workers = size - k
    here = comm.Split_type(MPI.COMM_TYPE_SHARED)     # the ranks sharing this node's memory
    ranks_here = here.Get_size()
    here.Free()
    described = agree(comm, lambda: _describe_checked(config, n_workers, ranks_here) if rank == 0 else None)
    info = comm.bcast(described and described[0], root=0)   # the Model itself is not pickled
    model = agree(comm, lambda: model_for(config, info))
    spec = data_spec(config)

    n_val = val_rows(config, info.n_rows)
    train_rows = info.n_rows - n_val

    def load() -> tuple[Shard | None, Shard | None, Shard | None]:
        if rank == 0:
            val = load_rows(spec, info, train_rows, info.n_rows) if n_val else None
            return None, load_test(spec, info), val
        if rank < k:
            return None, None, None     # the other servers hold parameters only
        start, stop = shard_range(train_rows, n_workers, rank - k)
        return load_rows(spec, info, start, stop), None, None

    shard, test, val = agree(comm, load)
    sparse = comm.bcast(isinstance(test.X, CSR) if rank == 0 else None, root=0)
    warm_ranks(comm, model, sparse=sparse, quiet=config.quiet)
    plan = step_plan(config, info.n_classes, n_workers, train_rows)
    bound = [None if d is None else bind(model, d.X, d.y, info.n_classes) for d in (shard, test, val)]
    n_params = model.n_params(info.n_features, info.n_classes)
    return Setup(config, info, model, n_params, plan, *bound, train_rows=train_rows,
                 servers=ServerMap(n_params, k), push_mode=effective_mode(config.push, sparse))


def train(config: TrainConfig | dict | None = None, comm=None, _stop: StopSignals | None = None,
          **overrides: Any) -> dict:
    """Train with the given config on `comm` (default COMM_WORLD, always duplicated).

    Collective over `comm`: call it on every rank. Returns the run summary (the same
    dict on every rank). Raises InputError on every rank for bad input.
    """
    from mpi4py import MPI

    config = make_config(config, **overrides)
    comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
    stop = _stop if _stop is not None else StopSignals(enabled=bool(config.checkpoint_dir))
    try:
        found, resuming = None, False
        if config.resume:
            # the checkpointed run's settings, unless given now: read before anything is built from them
            found = agree(comm, lambda: _find_resume(config) if comm.Get_rank() == 0 else None)
            checkpointed = comm.bcast(found.config if found is not None else None, root=0)
            resuming = checkpointed is not None
            if resuming:
                config = resumed_config(config, checkpointed)
        s = setup(config, comm)
        threads = set_threads(config.threads)
        if s.model.source is not None:
            s.model.source.set_threads(config.threads)
        rank, k = comm.Get_rank(), config.servers
        # a checkpoint counts ranks as with one server (workers + 1), so it resumes on any --servers
        ranks = comm.Get_size() - k + 1
        # same seed on every rank -> identical start (zeros except e.g. the MLP's random weights)
        params = np.ascontiguousarray(s.model.init(s.n_params, s.info.n_features, s.info.n_classes,
                                                   np.random.default_rng([config.seed, 12345])), dtype=np.float64)
        initial = params.copy()
        ckpt, resumed_from = None, None
        if resuming:
            loaded = agree(comm, lambda: _prepare_resume(found, config, ranks, s) if rank == 0 else None)
            left = comm.bcast(loaded[2] if rank == 0 else None, root=0)
            if left:
                raise NothingLeft(left)
            ckpt, resumed_from = loaded[:2] if rank == 0 else (None, None)
            resumed_from = comm.bcast(resumed_from, root=0)
        my_state = unapplied = None
        if resumed_from is not None:
            if rank == 0:
                params[:], initial[:] = ckpt.params, ckpt.initial
            comm.Bcast(params, root=0)
            comm.Bcast(initial, root=0)
            # each worker reads its own part (rank 0 verified every part): no worker's arrays pass through rank 0
            my_state = comm.scatter([None] * k + ckpt.workers if rank == 0 else None, root=0)
            if my_state is not None:
                my_state = ckpt_mod.worker_state(my_state)
            # what a scaling policy held back: each server continues its own range of it
            if comm.bcast(rank == 0 and "unapplied" in ckpt.server_arrays, root=0):
                unapplied = ckpt.server_arrays["unapplied"] if rank == 0 else np.empty_like(params)
                comm.Bcast(unapplied, root=0)
        if config.checkpoint_dir:
            import h5py  # noqa: F401  (now, not at the first cut: every rank writes a part)
        comm.Barrier()
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        started_at, cpu0 = time.time(), time.process_time()
        if rank == 0:
            server_stats, recorder, written = _serve(comm, s, params, initial, ckpt, stop)
            stats = WorkerStats(rank=0, rows=0, produced=np.zeros(s.n_params))
        elif rank < k:
            _follow(comm, s, params, initial, unapplied)
            stats = WorkerStats(rank=rank, rows=0, produced=np.zeros(s.n_params))
            server_stats = recorder = written = None
        else:
            stats = _work(comm, s, params, rank - k, my_state, stop)
            server_stats = recorder = written = None
        wall = time.perf_counter() - t0
        cpu = (time.process_time() - cpu0, process_started_at(), started_at)
        comm.Bcast(params, root=0)
        summary = _finish(comm, s, params, initial, stats, server_stats, recorder, wall, cpu,
                          {"resumed_from": resumed_from, "checkpoint": written[-1]["path"] if written else None,
                           "checkpoints_written": written,
                           "reshaped": ckpt.server.get("reshaped") if ckpt is not None else None,
                           "elapsed_before_s": ckpt.elapsed_s if ckpt is not None else 0.0,
                           "load_avg_before": load_before, "load_avg_after": os.getloadavg()[0],
                           "threads": threads})
        return summary
    finally:
        if _stop is None:
            stop.restore()
        comm.Free()


def _find_resume(config: TrainConfig):
    """Rank 0: the checkpoint --resume names, read and verified (None for 'latest' in an empty directory)."""
    if config.resume != "latest":
        return ckpt_mod.load(config.resume, worker_arrays=False)
    ckpt, notes = ckpt_mod.load_latest(config.checkpoint_dir, worker_arrays=False)
    for note in notes:
        print(f"mpikanel: {note}", file=sys.stderr, flush=True)
    if ckpt is None:
        if notes:
            raise InputError(f"{config.checkpoint_dir}: no valid checkpoint to resume ({notes[-1]})")
        print(f"mpikanel: no checkpoint in {config.checkpoint_dir}; starting fresh", file=sys.stderr, flush=True)
    return ckpt


def _prepare_resume(ckpt, config: TrainConfig, ranks: int, s: Setup) -> tuple[Any, str | None, str | None]:
    """Rank 0: (the checkpoint as this run starts from it, its path, None), or (None, None, why nothing
    is left to do); InputError if it cannot continue this run."""
    if ckpt is None:
        return None, None, None
    ckpt_mod.check_compatible(ckpt, ranks, config.sync, s.model.name, s.n_params)
    left = remaining_work(ckpt, config, s.train_rows)
    if left is not None:
        return None, None, left
    if ckpt.ranks != ranks:
        if not config.quiet:
            print(f"mpikanel: {ckpt.path} was written by {ckpt.ranks} ranks; resuming on {ranks}: unsent work "
                  "folded into the parameters, shards dealt anew, sync state restarted", flush=True)
        ckpt = ckpt_mod.reshape(ckpt, ranks)
        # each worker starts on the lease the server's restored budget gives it
        budget = budget_for(config, ranks - 1, s.train_rows)
        budget.restore(ckpt.server["budget"])
        for w, start in enumerate(ckpt.workers):
            start["lease"] = int(budget.lease[w])
    if not config.quiet:
        print(f"mpikanel: resumed from {ckpt.path} ({ckpt.reason}, {ckpt.elapsed_s:.1f} s trained)", flush=True)
    return ckpt, str(ckpt.path), None


def remaining_work(ckpt, config: TrainConfig, train_rows: int) -> str | None:
    """Why a checkpoint leaves this run nothing to do (None: work is left); InputError when it has
    already done more than this run's budget."""
    done = samples_done(ckpt)
    budget = total_samples(config.epochs, train_rows)
    where = ckpt.path or "checkpoint"
    if ckpt.final:
        return f"{where} is the end of its run ({done} of {budget} samples done); nothing left"
    if config.max_steps is not None or config.time_budget is not None:
        return None      # the budget is not (only) samples: the run itself finds out
    if done > budget:
        was = ckpt.config.get("epochs")
        raise InputError(f"{where}: the checkpoint has done {done} samples, more than this run's budget of {budget} "
                         f"(--epochs {config.epochs} x {train_rows} rows); leave --epochs out to continue its "
                         f"run's budget" + (f" (--epochs {was})" if was is not None else ""))
    if done == budget:
        return f"the checkpoint has done {done} of the {budget} samples; nothing left"
    return None


def samples_done(ckpt) -> int:
    """Training samples a checkpoint's run has processed: pushed, plus what workers held unsent."""
    held = sum(int(w["state"]["schedule"].get("unsent_samples", 0)) for w in ckpt.workers if "state" in w)
    return int(ckpt.server["budget"]["counted"]) + held


def _serve(comm, s: Setup, params: np.ndarray, initial: np.ndarray, ckpt, stop: StopSignals):
    """Rank 0: run the parameter server; returns its stats, the snapshot recorder, the last checkpoint."""
    from .comm.server import ParameterServer

    config, n_workers = s.config, comm.Get_size() - s.config.servers
    if config.budget == "shared":
        total = -(-total_samples(config.epochs, s.train_rows) // config.batch_size)
    else:
        total = sum(s.plan.total_steps(b - a) for a, b in
                    (shard_range(s.train_rows, n_workers, w) for w in range(n_workers)))
    recorder = SnapshotRecorder(config.snapshot_interval)
    coordinator = None
    if config.checkpoint_dir:
        ckpt_mod.clean_temporaries(config.checkpoint_dir)
        every_s, every_steps = ckpt_mod.parse_every(config.checkpoint_every)
        ranges = [(r.start, r.stop) for r in (s.servers.range(k) for k in range(config.servers))]
        files = ckpt_mod.FileParts(config.checkpoint_dir, s.servers.range(0), initial, ranges, config.to_dict(),
                                   n_workers + 1, config.sync, s.model.name, config.keep_checkpoints, config.quiet)
        control = ckpt_mod.CheckpointControl(every_s, every_steps, seq=ckpt_mod.next_seq(config.checkpoint_dir))
        coordinator = ckpt_mod.CheckpointCoordinator(control, files, n_workers, time.perf_counter, stop.requested,
                                                     elapsed_before_s=ckpt.elapsed_s if ckpt is not None else 0.0)
        if ckpt is not None and not ckpt.server.get("reshaped"):
            # a worker that has left writes no part again: later checkpoints link its last one
            coordinator.entries = {int(e["index"]): {**e, "path": str((ckpt.path / e["file"]).resolve())}
                                   for e in ckpt.parts if e["role"] == "worker"}
    policy = policy_for(config, n_workers)
    budget = budget_for(config, n_workers, s.train_rows)
    service = ServerDelay(config.server_delay, config.seed) if config.server_delay else None
    with _progress(total, config) as on_progress:
        core = ServerCore(params, policy, n_workers, budget, recorder, coordinator, on_progress, s.push_mode,
                          damping=config.staleness_lr, service=service)
        if ckpt is not None:
            core.restore(ckpt.server, ckpt.server_arrays)
        probes = schedule_for(config, n_workers).uses_probes
        stats = ParameterServer(comm, core, probes=probes, servers=s.servers).run()
    return stats, recorder, coordinator.written if coordinator is not None else []


def _follow(comm, s: Setup, params: np.ndarray, initial: np.ndarray, unapplied: np.ndarray | None) -> None:
    """Server ranks 1..K-1: serve their key range as rank 0 decides."""
    from .comm.follower import FollowerServer

    config, k = s.config, comm.Get_rank()
    service = ServerDelay(config.server_delay, config.seed) if config.server_delay else None
    keys = s.servers.range(k)

    def write_part(seq: int, own: np.ndarray, unapplied: np.ndarray | None) -> dict:
        return ckpt_mod.write_server_part(config.checkpoint_dir, seq, k, keys, own, initial[keys], unapplied,
                                          pause_s=ckpt_mod.hold_s(k, seq))

    follower = FollowerServer(comm, params, s.servers, comm.Get_size() - config.servers, service, s.push_mode,
                              write_part if config.checkpoint_dir else None, unapplied)
    follower.run()


def _work(comm, s: Setup, params: np.ndarray, w: int, state: dict | None, stop: StopSignals) -> WorkerStats:
    """Worker w (rank K + w): train on its shard. Seeds, shards and injected heterogeneity follow
    w, not the rank, so a run is the same whatever the number of servers."""
    from .comm.worker import WorkerClient

    config, n_workers = s.config, comm.Get_size() - s.config.servers
    rank = w + 1                    # the worker's rank as with one server
    client = WorkerClient(comm, s.n_params, servers=s.servers, push_mode=s.push_mode)
    client.stop_requested = stop.requested
    if config.checkpoint_dir:
        def write_part(saved: dict, seq: int) -> dict:
            return ckpt_mod.write_worker_part(config.checkpoint_dir, seq, w, saved,
                                              pause_s=ckpt_mod.hold_s(comm.Get_rank(), seq))
        client.write_part = write_part
    plan = s.plan
    if state is not None and "reshaped_seq" in state:
        # a start on another worker count: a new pass over the new shard, in a new order, on the
        # lease the server's restored budget gives this worker
        rng = np.random.default_rng([config.seed, rank, int(state["reshaped_seq"])])
        plan, state = replace(plan, lease=int(state["lease"])), None
    else:
        rng = np.random.default_rng([config.seed, rank])
    injector = Injector(hetero_spec(config), rank, n_workers,
                        fair_steps(config.epochs, s.train_rows, n_workers, config.batch_size))
    try:
        _, stats = run_worker(client, s.shard, params, plan, rng, rank, injector,
                              schedule_for(config, n_workers), resume=state, step_time=config.step_time)
    finally:
        client.close()
    return stats


def _finish(comm, s: Setup, params: np.ndarray, initial: np.ndarray, stats: WorkerStats, server_stats,
            recorder: SnapshotRecorder | None, wall: float, cpu: tuple, run_info: dict) -> dict:
    """Collective end of run: train loss from the shards, test metrics, summary on every rank.
    `cpu`: this rank's process CPU seconds while training, process start and training start (epoch seconds)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    if rank < s.config.servers:
        shard_loss = (0.0, 0, 0)
    else:
        shard_loss = (s.shard.loss_sum(params), s.shard.rows, s.shard.correct(params))
    losses = comm.gather(shard_loss, root=0)
    worker_stats = comm.gather({**stats.public(), "cpu_s": cpu[0]}, root=0)
    clocks = comm.gather(cpu, root=0)
    produced = np.zeros_like(params) if rank == 0 else None
    comm.Reduce(stats.produced, produced, op=MPI.SUM, root=0)
    summary = None
    if rank == 0:
        run_info = {**run_info, **cpu_fields(clocks, s.config.servers, wall)}
        summary = publish(s, params, initial, losses, worker_stats[s.config.servers:], produced, server_stats, wall,
                          recorder, run_info, MPI.Get_library_version().splitlines()[0], comm.Get_size())
    return comm.bcast(summary, root=0)


def publish(s: Setup, params: np.ndarray, initial: np.ndarray, losses: list, workers: list[dict],
            produced: np.ndarray, server_stats, wall: float, recorder: SnapshotRecorder, run_info: dict,
            transport: str, ranks: int) -> dict:
    """The run summary from the gathered results; writes the metrics file and JSON, prints it."""
    summary = evaluate(s, params, initial, losses, workers, produced, server_stats, wall,
                       mpi_library=transport, ranks=ranks)
    summary["scenario"] = s.config.scenario or describe_hetero(hetero_spec(s.config))
    summary.update(run_info)
    summary["stopped"] = bool(server_stats.stopped)
    if summary.get("pacing_held") is False:
        print(f"mpikanel: pacing not held: {summary['pacing_missed_share']:.0%} of steps computed longer than "
              f"their modeled time (--step-time {s.config.step_time:g})", file=sys.stderr, flush=True)
    if server_stats.policy_report is not None:
        summary[s.config.sync] = server_stats.policy_report
    curve = _curve(s, recorder)
    add_curve(summary, curve, s.config.target_loss)
    if s.config.metrics:
        write_metrics(s.config.metrics, summary, curve, summary["per_worker"],
                      {"sync": s.config.sync, "model": s.model.name, "workers": summary["workers"],
                       "seed": s.config.seed, "scenario": summary["scenario"],
                       "command": " ".join(sys.argv), "versions": summary["versions"]})
    if s.config.save_model:
        save_model(s.config.save_model, params, s.config.to_dict(), s.info.n_features, s.info.label_values)
        summary["model_file"] = s.config.save_model
        if not s.config.quiet:
            print(f"mpikanel: model saved to {s.config.save_model} (use it with: python -m mpikanel.predict --model "
                  f"{s.config.save_model} --data FILE, or mpikanel.load_model)", flush=True)
    if s.config.summary_json:
        with open(s.config.summary_json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if not s.config.quiet:
        print(format_summary(summary), flush=True)
    return summary


def _curve(s: Setup, recorder: SnapshotRecorder) -> dict:
    """Test (and validation) loss/accuracy of every parameter snapshot, evaluated after training."""
    if s.test is None or s.test.rows == 0:
        return evaluate_curve([], lambda p: 0.0, None)
    return curve_of(recorder.snapshots, {"test": s.test, "val": s.val}, s.config.hidden, s.config.activation)


def _show_progress(mode: str) -> bool:
    """Whether rank 0 draws a progress bar (its stderr is a pipe under mpiexec even on a terminal)."""
    if mode != "auto":
        return mode == "on"
    if sys.stderr.isatty():
        return True
    env = os.environ
    interactive = env.get("TERM", "dumb") != "dumb"
    return interactive and not any(k in env for k in ("CI", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"))


class _progress:
    """tqdm progress on rank 0 when stderr is a terminal; a no-op otherwise."""

    def __init__(self, total: int, config: TrainConfig) -> None:
        self.bar = None
        if not config.quiet and _show_progress(config.progress):
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="step", desc=f"{config.sync} {config.model}",
                            mininterval=0.5, file=sys.stderr)
        self.last = 0

    def __enter__(self) -> Callable[[Any], None] | None:
        return self.update if self.bar is not None else None

    def update(self, stats: Any) -> None:
        steps, pushes = int(stats.steps.sum()), int(stats.pushes.sum())
        if steps - self.last >= max(1, self.bar.total // 200):
            self.bar.update(steps - self.last)
            self.last = steps
            # steps that did not get their own push: skips (ESP) or local steps (PSP)
            self.bar.set_postfix(pushes=pushes, skip_rate=f"{max(0.0, 1 - pushes / max(steps, 1)):.0%}", refresh=False)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            if exc[0] is None:
                self.bar.update(self.bar.total - self.last)
            self.bar.close()


def resume_command(ranks: int, checkpoint_dir: str) -> str:
    """The command that continues a stopped run (its settings come from the checkpoint)."""
    import shlex

    return f"mpiexec -n {ranks} python -m mpikanel.train --checkpoint-dir {shlex.quote(checkpoint_dir)} --resume latest"


def main(argv: list[str] | None = None) -> int:
    """CLI: parse flags, train, print the summary; 2 on bad input, 75 when stopped by a signal
    after checkpointing, MPI Abort on failure."""
    from .comm.cli import run_cli

    stop = _EARLY_SIGNALS if _EARLY_SIGNALS is not None else StopSignals(enabled=True)

    def body(config: TrainConfig, world) -> int:
        if not config.checkpoint_dir:
            stop.restore()            # nothing to checkpoint: signals end the job as usual
            if stop.requested():          # a signal during start-up
                if stop.signum == signal.SIGINT and world.Get_rank() == 0:
                    print("mpikanel: interrupted", file=sys.stderr, flush=True)
                return 128 + (stop.signum or 15)
        summary = train(config, world, _stop=stop)
        if not summary["stopped"]:
            return 0
        if world.Get_rank() == 0:
            print(f"mpikanel: stopped after writing {summary['checkpoint']}; resume with: "
                  f"{resume_command(world.Get_size(), config.checkpoint_dir)}", file=sys.stderr, flush=True)
        return EXIT_CHECKPOINTED

    return run_cli("mpikanel", body, argv)


class _CallableModule(types.ModuleType):
    """Lets ``mpikanel.train(config)`` work although ``mpikanel.train`` is also this module."""

    def __call__(self, config: TrainConfig | dict | None = None, comm=None, **overrides: Any) -> dict:
        return train(config, comm, **overrides)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
