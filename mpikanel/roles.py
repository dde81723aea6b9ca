"""What each rank of a run does: rank 0 serves (and decides for every server), ranks 1..K-1
follow it on their key ranges, the others train."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from . import checkpoint as ckpt_mod
from .data import shard_range
from .engine.budget import fair_steps, total_samples
from .engine.server_core import ServerCore
from .hetero import Injector
from .metrics import SnapshotRecorder
from .progress import Progress
from .session import Session, hetero_spec
from .signals import StopSignals
from .worker_loop import WorkerStats, run_worker


def serve(comm, s: Session, params: np.ndarray, initial: np.ndarray, ckpt,
          stop: StopSignals) -> tuple[object, SnapshotRecorder, list[dict]]:
    """Rank 0: run the parameter server; returns its stats, the snapshot recorder, the last checkpoint."""
    from .comm.server import ParameterServer

    config, n_workers = s.config, s.n_workers
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
    with Progress(total, config) as on_progress:
        core = ServerCore(params, s.policy, n_workers, s.budget(), recorder, coordinator, on_progress, s.push_mode,
                          damping=config.staleness_lr, service=s.service_delay())
        if ckpt is not None:
            core.restore(ckpt.server, ckpt.server_arrays)
        stats = ParameterServer(comm, core, probes=s.schedule.uses_probes, servers=s.servers,
                                backoff=s.server_backoff(), flow=s.flow()).run()
    return stats, recorder, coordinator.written if coordinator is not None else []


def follow(comm, s: Session, params: np.ndarray, initial: np.ndarray, unapplied: np.ndarray | None) -> None:
    """Server ranks 1..K-1: serve their key range as rank 0 decides."""
    from .comm.follower import FollowerServer

    config, k = s.config, comm.Get_rank()
    keys = s.servers.range(k)

    def write_part(seq: int, own: np.ndarray, unapplied: np.ndarray | None) -> dict:
        return ckpt_mod.write_server_part(config.checkpoint_dir, seq, k, keys, own, initial[keys], unapplied,
                                          pause_s=ckpt_mod.hold_s(k, seq))

    follower = FollowerServer(comm, params, s.servers, s.n_workers, s.service_delay(), s.push_mode,
                              write_part if config.checkpoint_dir else None, unapplied, s.server_backoff(), s.flow())
    follower.run()


def work(comm, s: Session, params: np.ndarray, w: int, state: dict | None, stop: StopSignals) -> WorkerStats:
    """Worker w (rank K + w): train on its shard. Seeds, shards and injected heterogeneity follow
    w, not the rank, so a run is the same whatever the number of servers."""
    from .comm.worker import WorkerClient

    config, n_workers = s.config, s.n_workers
    rank = w + 1                    # the worker's rank as with one server
    def write_part(saved: dict, seq: int) -> dict:
        return ckpt_mod.write_worker_part(config.checkpoint_dir, seq, w, saved,
                                          pause_s=ckpt_mod.hold_s(comm.Get_rank(), seq))

    client = WorkerClient(comm, s.n_params, servers=s.servers, push_mode=s.push_mode, stop_requested=stop.requested,
                          write_part=write_part if config.checkpoint_dir else None, flow=s.flow())
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
                              s.schedule, resume=state, step_time=config.step_time)
    finally:
        client.close()
    return stats

