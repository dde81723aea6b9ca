"""Set up and run one simulated training run: same config, data, kernels, cores and summary as
``mpikanel.train``, with ``--workers N`` workers on a virtual clock instead of MPI ranks."""
from __future__ import annotations

import dataclasses
import os
import resource
import time
from dataclasses import dataclass

import numpy as np

from ..config import TrainConfig
from ..data import data_spec, load_rows, load_test, shard_range
from ..engine.server_core import ServerCore
from ..engine.servermap import ServerMap
from ..engine.sparse import effective_mode
from ..engine.worker_core import StepPlan, worker_core
from ..engine.budget import fair_steps
from ..errors import InputError
from ..hetero import Injector
from ..kernels import bind, get_model, lazy_decay, set_threads, warmup
from ..metrics import SnapshotRecorder
from ..publish import publish
from ..session import Session, describe_checked, hetero_spec, step_plan, sync_for, val_rows
from .engine import SimClient, Simulator
from .models import NetworkModel, ServerModel, measure_step_s, step_times_from_metrics


@dataclass(frozen=True)
class SimOptions:
    """What the simulator models instead of measuring: worker count, step times, links, server."""

    workers: int
    step_time: float | None = None        # seconds per minibatch step (None: the config's --step-time, else measured)
    replay: str | None = None             # per-worker step times from a real run's metrics file
    network: NetworkModel = NetworkModel()
    server: ServerModel = ServerModel()


def simulate(config: TrainConfig, opts: SimOptions) -> dict:
    """Run `config` with opts.workers simulated workers; returns the summary (as mpikanel.train)."""
    if config.checkpoint_dir or config.resume:
        raise InputError("checkpoints are off in the simulator; drop --checkpoint-dir/--resume")
    if opts.workers < 1:
        raise InputError(f"--workers must be >= 1, got {opts.workers}")
    n = opts.workers
    t_setup = time.perf_counter()
    info, model = describe_checked(config, n, ranks_here=n + 1)    # one process holds every worker's copies
    spec = data_spec(config)
    n_val = val_rows(config, info.n_rows)
    train_rows = info.n_rows - n_val
    warmup(model)
    threads = set_threads(config.threads)
    test = bind(model, *_xy(load_test(spec, info)), info.n_classes)
    val = bind(model, *_xy(load_rows(spec, info, train_rows, info.n_rows)), info.n_classes) if n_val else None
    shards = _shards(spec, info, train_rows, n, model)
    plan = step_plan(config, info.n_classes, n, train_rows)
    n_params = model.n_params(info.n_features, info.n_classes)
    push_mode = effective_mode(config.push, shards[0].sparse)
    policy, schedule = sync_for(config, n)
    s = Session(config, info, model, n_params, plan, None, test, val, train_rows=train_rows,
                servers=ServerMap(n_params, config.servers), push_mode=push_mode, n_workers=n, policy=policy,
                schedule=schedule)
    params = s.initial_params()
    initial = params.copy()
    if opts.step_time is None and config.step_time is not None:
        opts = dataclasses.replace(opts, step_time=config.step_time)
    step_s = _step_times(opts, shards[0], params, plan, config.seed, n)

    recorder = SnapshotRecorder(config.snapshot_interval)
    core = ServerCore(params, s.policy, n, s.budget(), recorder, push_mode=push_mode, damping=config.staleness_lr)
    injected = hetero_spec(config)
    if opts.replay:     # replayed step times already hold the slowdown and pauses the real run saw
        injected = dataclasses.replace(injected, slowdown=None, pause_prob=0.0, pause_s=0.0)
    fair = fair_steps(config.epochs, train_rows, n, config.batch_size)
    injectors = [Injector(injected, w + 1, n, fair) for w in range(n)]
    sim = Simulator(core, [], injectors, step_s, config.batch_size, opts.network, opts.server, s.service_delay(),
                    clock=time.perf_counter, servers=config.servers)
    for w in range(n):
        client = SimClient(sim, w, n_params, push_mode)
        sim.clients.append(client)
        rng = np.random.default_rng([config.seed, w + 1])
        sim.gens.append(worker_core(client, shards[w], params, plan, rng, w + 1, injectors[w], s.schedule))
    setup_s = time.perf_counter() - t_setup
    t0 = time.perf_counter()
    load_before = os.getloadavg()[0]
    end = sim.run()
    real_s = time.perf_counter() - t0
    server_stats = core.finish(end)
    results = [sim.results[w] for w in range(n)]
    losses = [(0.0, 0, 0)] + [(shards[w].loss_sum(params), shards[w].rows, shards[w].correct(params))
                              for w in range(n)]
    produced = np.sum([st.produced for _, st in results], axis=0)
    workers = [st.public() for _, st in results]
    run_info = {"engine": "sim", "load_avg_before": load_before, "load_avg_after": os.getloadavg()[0],
                "threads": threads, "resumed_from": None, "checkpoint": None, "elapsed_before_s": 0.0,
                "sim": _sim_report(sim, opts, step_s, real_s, setup_s)}
    return publish(s, params, initial, losses, workers, produced, server_stats, end, recorder, run_info,
                   "simulator (virtual clock)", n + 1)


def _xy(shard):
    return shard.X, shard.y


def _shards(spec, info, train_rows: int, n: int, model) -> list:
    """Each worker's bound training rows (dense data is loaded once and sliced)."""
    whole = load_rows(spec, info, 0, train_rows)
    out = []
    for w in range(n):
        a, b = shard_range(train_rows, n, w)
        if isinstance(whole.X, np.ndarray):
            out.append(bind(model, whole.X[a:b], whole.y[a:b], info.n_classes))
        else:
            part = load_rows(spec, info, a, b)
            out.append(bind(model, part.X, part.y, info.n_classes))
    return out


def _step_times(opts: SimOptions, shard, params: np.ndarray, plan: StepPlan, seed: int, n: int) -> np.ndarray:
    """Per-worker base seconds per full minibatch step."""
    if opts.replay:
        return step_times_from_metrics(opts.replay, n)
    if opts.step_time is not None:
        if not opts.step_time > 0:
            raise InputError(f"--step-time must be > 0, got {opts.step_time}")
        return np.full(n, opts.step_time)
    scratch, local = shard.scratch(), params.copy()
    stepper = lazy_decay(shard, plan.l2) or shard          # the step the workers run (lazy L2 on CSR rows)
    measured = measure_step_s(lambda idx: stepper.step(local, idx, plan.lr, plan.l2, scratch),
                              shard.rows, plan.batch_size, seed=seed)
    return np.full(n, measured)


def _sim_report(sim: Simulator, opts: SimOptions, step_s: np.ndarray, real_s: float, setup_s: float) -> dict:
    st = sim.stats
    return {"workers": len(sim.gens), "events": st.events, "real_s": real_s, "setup_s": setup_s,
            "us_per_event": 1e6 * real_s / max(1, st.events),
            "servers": sim.servers, "server_busy_s": st.server_busy_s, "server_utilization": st.server_busy_s / max(sim.now, 1e-12),
            "queue_wait_s": st.queue_wait_s, "step_s_min": float(step_s.min()), "step_s_max": float(step_s.max()),
            "step_time_source": "replay" if opts.replay else ("fixed" if opts.step_time else "measured"),
            "network": {"latency_s": opts.network.latency_s, "bandwidth": opts.network.bandwidth},
            "server": {"push_s": opts.server.push_s, "bandwidth": opts.server.bandwidth},
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
