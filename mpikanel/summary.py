"""The run summary: final metrics, counters and per-worker timings, as a dict and as text."""
from __future__ import annotations

import hashlib
import platform
import sys
from typing import Any

import numpy as np

from ._version import __version__

#: a paced run (--step-time) whose compute outlasts the modeled step in more than this share of steps does not hold its pacing
PACING_MISSED_MAX = 0.05


def evaluate(s: Any, params: np.ndarray, initial: np.ndarray, losses: list[tuple[float, int, int]],
             workers: list[dict], produced: np.ndarray, server_stats: Any, wall: float,
             mpi_library: str, ranks: int) -> dict:
    """Assemble the summary on the server from the gathered shard losses and worker stats."""
    c = s.plan.n_classes
    loss_sum = sum(x[0] for x in losses)
    n_train = sum(x[1] for x in losses)
    correct = sum(x[2] for x in losses)
    test_loss, test_acc, n_test = _score(s.test, params)
    val_loss, val_acc, n_val = _score(getattr(s, "val", None), params)
    applied = params - initial             # sum of every delta added to the parameters
    received = applied if server_stats.unapplied is None else applied + server_stats.unapplied
    sent_norm = float(np.linalg.norm(produced))
    mismatch = float(np.linalg.norm(produced - received)) / max(sent_norm, 1e-300)
    for i, w in enumerate(workers):
        n = max(int(server_stats.pushes[i]), 1)
        w["staleness_mean"] = float(server_stats.staleness_sum[i]) / n
        w["staleness_max"] = int(server_stats.staleness_max[i])
    add_step_time_rel(workers)
    deltas_sent = int(sum(w["pushes"] for w in workers))
    return {
        "sync": s.config.sync,
        "model": s.model.name,
        "workers": len(workers),
        "ranks": ranks,
        "servers": s.config.servers,
        # per server rank: its key range, pushes and bytes received, busy seconds (and per push), peak RSS
        "server_ranks": getattr(server_stats, "servers", None),
        "data": s.info.description,
        "n_train": n_train,
        "n_test": n_test,
        "n_features": s.info.n_features,
        "n_classes": c,
        "n_params": int(params.size),
        "wall_s": wall,
        **pacing_fields(s.config.step_time, workers),
        "train_loss": loss_sum / max(n_train, 1),
        "train_accuracy": correct / max(n_train, 1),
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "n_val": n_val,
        "val_loss": val_loss,
        "val_accuracy": val_acc,
        "budget": s.config.budget,
        "samples": int(sum(w["samples"] for w in workers)),
        "samples_budget": (int(s.config.epochs * getattr(s, "train_rows", n_train))
                           if s.config.budget == "shared" else None),
        "deltas_sent": deltas_sent,
        "deltas_applied": int(server_stats.deltas_applied),
        "delta_sum_norm_sent": sent_norm,
        "delta_sum_norm_applied": float(np.linalg.norm(received)),
        "delta_sum_rel_error": mismatch,
        "params_norm": float(np.linalg.norm(params)),
        "params_sha256": hashlib.sha256(np.ascontiguousarray(params).tobytes()).hexdigest(),
        "pushes_per_s": deltas_sent / wall if wall > 0 else 0.0,
        # what --push chose (auto/dense/sparse as run) and the bytes the workers moved: push payloads
        # sent and replies received (each worker's own figures are in its line)
        "push": getattr(s, "push_mode", "dense"),
        "bytes_sent": int(sum(w.get("bytes_sent", 0) for w in workers)),
        "bytes_received": int(sum(w.get("bytes_received", 0) for w in workers)),
        "bytes_per_push": sum(w.get("bytes_sent", 0) for w in workers) / max(deltas_sent, 1),
        "server_busy_s": server_stats.busy_s,
        "server_service_s": float(getattr(server_stats, "service_s", 0.0)),
        "clock_spread_max": int(getattr(server_stats, "clock_spread_max", 0)),
        # ESP probes the server answered, and the server seconds that cost (all probes)
        "server_probes": int(getattr(server_stats, "probes", 0)),
        "server_probe_s": float(getattr(server_stats, "probe_s", 0.0)),
        # parameter copies replies were read from at once (one per version still being sent), and
        # the peak resident memory of rank 0 (the server; after training it also evaluates)
        "reply_snapshots_peak": int(getattr(server_stats, "reply_snapshots_peak", 0)),
        # push receive frames server 0 needed (its pool: held deltas plus the ones landing)
        "push_buffers": int(getattr(server_stats, "push_buffers", 0)),
        "rank0_peak_rss_mb": peak_rss_mb(),
        "per_worker": workers,
        "config": s.config.to_dict(),
        "versions": {"mpikanel": __version__, "python": platform.python_version(),
                     "numpy": np.__version__, "mpi": mpi_library},
    }


def add_step_time_rel(workers: list[dict]) -> None:
    """Each worker's realized seconds per step (compute, injection, pacing) relative to the fastest
    worker's: what the injection plus CPU contention actually produced."""
    per_step = [_step_s(w) / w["steps"] if w["steps"] else 0.0 for w in workers]
    fastest = min((t for w, t in zip(workers, per_step) if w["steps"]), default=0.0)
    for w, mine in zip(workers, per_step):
        w["step_time_rel"] = mine / fastest if fastest > 0 else 1.0


def pacing_fields(step_time: float | None, workers: list[dict]) -> dict:
    """--step-time's summary keys (step_time, pacing_missed_share, pacing_held), and each worker's
    pacing_missed_share: the steps whose compute outlasted their modeled time, of all steps."""
    for w in workers:
        w["pacing_missed_share"] = w.get("pacing_missed", 0) / max(w["steps"], 1)
    paced = step_time is not None and any(w.get("paced_s", 0.0) > 0 for w in workers)
    missed = (sum(w.get("pacing_missed", 0) for w in workers) / max(sum(w["steps"] for w in workers), 1)
              if paced else None)
    return {"step_time": step_time, "pacing_missed_share": missed,
            "pacing_held": None if missed is None else missed <= PACING_MISSED_MAX}


def warn_pacing(summary: dict) -> None:
    """On stderr, 'pacing not held' when a paced run's compute outlasted its modeled steps too often."""
    if summary.get("pacing_held") is False:
        print(f"mpikanel: pacing not held: {summary['pacing_missed_share']:.0%} of steps computed longer than "
              f"their modeled time (--step-time {summary['step_time']:g})", file=sys.stderr, flush=True)


def _step_s(w: dict) -> float:
    """A worker's realized step seconds: compute, injection and any pacing sleep."""
    return w["compute_s"] + w["injected_s"] + w.get("pacing_s", 0.0)


def process_started_at() -> float | None:
    """When this process started, in epoch seconds (Linux /proc, to a clock tick), or None elsewhere."""
    import os
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rpartition(")")[2].split()[19])     # field 22: starttime
        with open("/proc/stat") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def cpu_fields(clocks: list[tuple[float, float | None, float]], servers: int, wall: float) -> dict:
    """Summary fields from every rank's (CPU seconds while training, process start, training start):
    the server ranks' CPU seconds summed, the cores the job used while training, and start-up
    seconds from the earliest rank's process start to the start of training."""
    cpus = [c[0] for c in clocks]
    starts = [c[1] for c in clocks if c[1] is not None]
    return {"server_cpu_s": sum(cpus[:servers]),
            "cores_used": sum(cpus) / wall if wall > 0 else None,
            "startup_s": clocks[0][2] - min(starts) if starts else None}


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (ru_maxrss is KiB on Linux)."""
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _score(rows: Any, params: np.ndarray) -> tuple[float | None, float | None, int]:
    """Mean loss, accuracy and row count of `params` on bound rows (None, None, 0 without rows)."""
    n = 0 if rows is None else rows.rows
    if not n:
        return None, None, 0
    return rows.loss_sum(params) / n, rows.correct(params) / n, n


def add_curve(summary: dict, curve: dict, target_loss: float | None) -> None:
    """Add the loss-vs-time curve and the time to reach `target_loss` to the summary."""
    from .metrics import first_touch, time_to_target

    summary["curve"] = {k: np.asarray(v).tolist() for k, v in curve.items()}
    summary["target_loss"] = target_loss
    known = target_loss is not None and len(curve["time_s"]) > 0
    # held: the time after which the test loss stays at or below the target; first touch beside it
    summary["time_to_target_s"] = time_to_target(curve["time_s"], curve["test_loss"], target_loss) if known else None
    summary["first_touch_s"] = first_touch(curve["time_s"], curve["test_loss"], target_loss) if known else None


def format_summary(d: dict) -> str:
    """Human-readable summary printed by rank 0 at the end of a run."""
    def f(x: float | None, spec: str = ".4f") -> str:
        return "n/a" if x is None else format(x, spec)

    lines = [
        f"mpikanel {d['versions']['mpikanel']}: {d['sync'].upper()} {d['model']} on {d['data']}, "
        f"{d['workers']} workers",
        f"  wall {d['wall_s']:.2f} s, {d['deltas_sent']} pushes ({d['pushes_per_s']:.0f}/s), "
        f"deltas applied {d['deltas_applied']}, {d['samples']} samples ({d['budget']} budget)",
        f"  {d.get('push', 'dense')} frames: {d.get('bytes_per_push', 0) / 1e3:.1f} kB per push, "
        f"{d.get('bytes_sent', 0) / 1e6:.1f} MB pushed, {d.get('bytes_received', 0) / 1e6:.1f} MB pulled",
        f"  train loss {f(d['train_loss'])}  acc {f(d['train_accuracy'], '.2%')}   "
        f"test loss {f(d['test_loss'])}  acc {f(d['test_accuracy'], '.2%')}",
        "  worker  steps  samples  compute_s  comm_s  wait_s  injected_s  step_x",
    ]
    if d.get("target_loss") is not None:
        reached = d.get("time_to_target_s")
        touch = d.get("first_touch_s")
        lines.insert(4, f"  time to test loss {d['target_loss']:g} (held to the end): "
                        + ("not held" if reached is None else f"{reached:.2f} s")
                        + ("" if touch is None else f"; first touched at {touch:.2f} s"))
    if d.get("cores_used") is not None:
        startup = "" if d.get("startup_s") is None else f"; start-up {d['startup_s']:.1f} s"
        lines.insert(4, f"  CPU while training: workers {sum(w.get('cpu_s', 0.0) for w in d['per_worker']):.2f} s, "
                        f"servers {d['server_cpu_s']:.2f} s, {d['cores_used']:.2f} cores used{startup}")
    if d.get("pacing_held") is not None:
        lines.insert(4, f"  paced at --step-time {d['step_time']:g} s: {d['pacing_missed_share']:.1%} of steps "
                        f"computed longer than modeled ({'held' if d['pacing_held'] else 'NOT held'})")
    if (d.get("nodes") or 1) > 1:
        lines.insert(4, f"  {d['nodes']} nodes: " + "; ".join(f"{name} ranks {','.join(map(str, ranks))}"
                                                           for name, ranks in d["node_ranks"].items()))
    if (d.get("servers") or 1) > 1 and d.get("server_ranks"):
        per = ", ".join(f"rank {r['rank']} keys {r['keys'][0]}..{r['keys'][1]} {r['busy_us_per_push']:.0f} us/push "
                        f"{r['peak_rss_mb']:.0f} MiB" for r in d["server_ranks"])
        lines.insert(4, f"  {d['servers']} servers: {per}")
    for w in d["per_worker"]:
        lines.append(f"  {w['rank']:>6}  {w['steps']:>5}  {w['samples']:>7}  {w['compute_s']:>9.2f}  "
                     f"{w['comm_s']:>6.2f}  {w['wait_s']:>6.2f}  {w['injected_s']:>10.2f}  "
                     f"{w['step_time_rel']:>6.2f}")
    return "\n".join(lines)
