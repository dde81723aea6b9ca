"""A run's set-up, built once from the config and the registries: the data, the model, the sync
policy and schedule, the budget and the step plan.

``python -m mpikanel.train`` (and the library call), the simulator and the baselines all build
their runs from here, so they check a config and read data the same way. Collective functions
take a communicator but import no MPI: the entry points pass it in.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

import numpy as np

from . import sync as sync_models
from .comm.environment import srun_singleton
from .config import TrainConfig
from .data import DataInfo, Shard, data_spec, describe, load_rows, load_test, shard_range
from .engine.arrivals import backoff_for
from .engine.flow import flow_controlled
from .engine.budget import Budget, total_samples
from .engine.servermap import ServerMap
from .engine.sparse import effective_mode
from .engine.worker_core import StepPlan
from .errors import InputError
from .hetero import HeteroSpec, ServerDelay, parse_hetero
from .kernels import CSR, BoundModel, Model, bind, cache_is_cold, get_model, kernels_cached, mark_cached, warmup
from .preflight import check_fits, machine_memory
from .sync import Schedule, SyncPolicy

T = TypeVar("T")


@dataclass
class Session:
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
    n_workers: int = 1
    policy: SyncPolicy | None = None   # the server's sync policy (built once, here)
    schedule: Schedule | None = None   # the workers' sync schedule
    ranks_here: int = 1                # ranks of the job on this rank's node (the servers' waits)

    def budget(self) -> Budget:
        """A fresh work budget for this run, as the server enforces it."""
        return budget_for(self.config, self.n_workers, self.train_rows)

    def server_backoff(self) -> float:
        """The servers' waits' backoff: gentler where this node has a core for every rank."""
        return backoff_for(self.ranks_here, os.cpu_count() or 1)

    def flow(self) -> bool:
        """Whether pushes ask the servers first (--flow-control; mpikanel.engine.flow)."""
        widest = max(r.stop - r.start for r in map(self.servers.range, range(self.servers.servers)))
        return flow_controlled(self.config.flow_control, self.push_mode, 8 * widest, self.n_workers)

    def initial_params(self) -> np.ndarray:
        """The parameters every rank starts from (the same seed everywhere: the same start)."""
        return start_params(self.model, self.n_params, self.info.n_features, self.info.n_classes, self.config.seed)

    def service_delay(self) -> ServerDelay | None:
        """The injected service time of a server (--server-delay), or None."""
        return ServerDelay(self.config.server_delay, self.config.seed) if self.config.server_delay else None


def start_params(model: Model, n_params: int, n_features: int, n_classes: int, seed: int) -> np.ndarray:
    """A run's starting parameters: zeros, or e.g. the MLP's random weights, from the run's seed."""
    return np.ascontiguousarray(model.init(n_params, n_features, n_classes, np.random.default_rng([seed, 12345])),
                                dtype=np.float64)


def agree(comm: Any, fn: Callable[[], T]) -> T:
    """Run fn on every rank; if any rank raised InputError, raise the first on all ranks."""
    try:
        result, error = fn(), None
    except InputError as exc:
        result, error = None, str(exc)
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise InputError(errors[0])
    return result  # type: ignore[return-value]


def sync_for(config: TrainConfig, n_workers: int) -> tuple[SyncPolicy, Schedule]:
    """The server-side sync policy and the worker-side schedule a config asks for."""
    return sync_models.get(config.sync).make(config, n_workers)


def hetero_spec(config: TrainConfig) -> HeteroSpec:
    """The heterogeneity injection a config asks for."""
    return HeteroSpec(slowdown=config.slowdown, pause_prob=config.pause_prob, pause_s=config.pause_s,
                      link_delay=config.link_delay, link_bandwidth=config.link_bandwidth, seed=config.seed)


def data_info(config: TrainConfig) -> DataInfo:
    """The shape of the data a config names (rows, features, classes), read without loading it."""
    return describe(data_spec(config))


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


def describe_checked(config: TrainConfig, n_workers: int, ranks_here: int) -> tuple[DataInfo, Model]:
    """Rank 0: the data's shape and the model, every setting checked, and the run's size against the
    memory of the machine that holds `ranks_here` of its ranks; InputError otherwise."""
    from .models import is_spec

    model = None if is_spec(config.model) else model_for(config)
    sync_for(config, n_workers)
    parse_hetero(hetero_spec(config), n_workers)
    if config.server_delay:
        ServerDelay(config.server_delay)
    for flag, path in (("--save-model", config.save_model), ("--metrics", config.metrics)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise InputError(f"{flag} {path}: its directory does not exist")
    info = data_info(config)
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


def preload(config: TrainConfig) -> None:
    """What a rank other than 0 does while rank 0 reads the data's shape: import a py: model's file
    (JAX takes each rank seconds), so that the ranks do it at once rather than after rank 0."""
    from .models import is_spec, preload_factory

    if is_spec(config.model):
        preload_factory(config.model, config.threads)


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


def warm_ranks(comm: Any, model: Model, sparse: bool | None = None, quiet: bool = True) -> None:
    """Load the model's kernels from numba's cache on every rank at once, or, where some rank finds
    them not cached, compile them on rank 0 first and then load them on the others.
    `sparse` (the data's kind, the same on every rank) loads only the CSR or only the dense kernels:
    each cached kernel costs a rank about a tenth of a second to load."""
    kinds = {} if sparse is None else {"dense": not sparse, "sparse": sparse}
    # where every rank finds them cached (a marker per host and CPU), all load at once: rank 0's
    # turn alone cost each launch half a second of numba's start-up
    if comm.allreduce(0 if kernels_cached(model, **kinds) else 1) == 0:
        warmup(model, **kinds)
        return
    if comm.Get_rank() == 0:
        if not quiet and model.compiled and cache_is_cold():
            print("mpikanel: compiling kernels, once: ~20 s", file=sys.stderr, flush=True)
        warmup(model, **kinds)
        mark_cached(model, **kinds)
    comm.Barrier()
    if comm.Get_rank() != 0:
        warmup(model, **kinds)
        mark_cached(model, **kinds)     # the cache of this rank's host, where it is not rank 0's


def open_session(config: TrainConfig, comm: Any, ranks_here: int) -> Session:
    """Validate and load everything collectively; InputError on every rank if anything is wrong.
    `ranks_here`: the ranks of `comm` on this rank's node (their memory is checked together)."""
    size, rank, k = comm.Get_size(), comm.Get_rank(), config.servers
    if size < k + 1:
        why = srun_singleton(size)
        raise InputError(f"mpikanel needs at least {k + 1} MPI ranks ({k} server{'s' if k > 1 else ''} + workers), "
                         f"got {size}; " + (why or f"run as: mpiexec -n {k + 3} python -m mpikanel.train"
                                            + (f" --servers {k}" if k > 1 else "")))
    n_workers = size - k
    described = agree(comm, lambda: describe_checked(config, n_workers, ranks_here) if rank == 0 else preload(config))
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
    policy, schedule = sync_for(config, n_workers)
    return Session(config, info, model, n_params, plan, *bound, train_rows=train_rows,
                   servers=ServerMap(n_params, k), push_mode=effective_mode(config.push, sparse),
                   n_workers=n_workers, policy=policy, schedule=schedule, ranks_here=ranks_here)
