"""HDF5 checkpoints, written by the server only: atomic, checksummed, validated on load.

Layout of ``ckpt-NNNNNN.h5``:
  attrs     format, schema, mpikanel version, config (JSON), ranks, n_params, sync, model,
            seq, elapsed_s, final, reason, server (JSON: book, counters, policy state)
  /params   global parameters (float64)         /initial  parameters at the start of the run
  /server/* per-worker server arrays (book and counters), /server/unapplied if any
  /workers/wN  attrs: state (JSON) — datasets: unsent, produced, order
Every dataset is a compressed chunk with a fletcher32 checksum, so a flipped byte is found
on read. Writes go to a temporary file in the same directory, are flushed and fsynced, renamed
over the final name with os.replace, and the directory is fsynced: a crash leaves either the
old set of checkpoints or the new one, never a torn file under a checkpoint name.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

FORMAT = "mpikanel-checkpoint"
SCHEMA = 1
_NAME = re.compile(r"^ckpt-(\d{6,})\.h5$")
_TMP_PREFIX = ".ckpt-"


@dataclass
class Checkpoint:
    """Everything a run needs to continue exactly where it stopped."""

    params: np.ndarray
    initial: np.ndarray
    config: dict
    ranks: int
    sync: str
    model: str
    server: dict                                  # JSON-able: book, counters, policy state
    server_arrays: dict[str, np.ndarray]
    workers: list[dict]                           # per worker: JSON-able state + arrays
    elapsed_s: float = 0.0
    final: bool = False
    reason: str = ""
    seq: int = 0
    path: Path | None = field(default=None, compare=False)
    version: str = ""


def _dataset(group: Any, name: str, data: np.ndarray) -> None:
    data = np.ascontiguousarray(data)
    if data.size == 0:
        group.create_dataset(name, data=data)
        return
    group.create_dataset(name, data=data, chunks=True, compression="gzip", compression_opts=1,
                         fletcher32=True)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoint_paths(directory: str | Path) -> list[Path]:
    """Checkpoint files in a directory, newest (highest sequence number) first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def clean_temporaries(directory: str | Path) -> list[Path]:
    """Remove temporaries left by a crashed write; they are never loaded."""
    d = Path(directory)
    removed = []
    if d.is_dir():
        for p in d.iterdir():
            if p.name.startswith(_TMP_PREFIX) and ".tmp" in p.name:
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed


def save(directory: str | Path, ckpt: Checkpoint, keep: int = 3) -> Path:
    """Write atomically as the next ckpt-NNNNNN.h5 and keep only the newest `keep`."""
    import h5py
    from . import __version__

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    existing = checkpoint_paths(d)
    seq = int(_NAME.match(existing[0].name).group(1)) + 1 if existing else 1
    final = d / f"ckpt-{seq:06d}.h5"
    tmp = d / f"{_TMP_PREFIX}{seq:06d}.h5.tmp-{os.getpid()}"
    with h5py.File(tmp, "w", locking=False, libver=("v108", "latest")) as f:
        f.attrs.update({"format": FORMAT, "schema": SCHEMA, "mpikanel_version": __version__,
                        "config": json.dumps(ckpt.config, sort_keys=True), "ranks": ckpt.ranks,
                        "n_params": int(ckpt.params.size), "sync": ckpt.sync, "model": ckpt.model,
                        "seq": seq, "elapsed_s": ckpt.elapsed_s, "final": ckpt.final,
                        "reason": ckpt.reason, "created": time.time(),
                        "server": json.dumps(ckpt.server)})
        _dataset(f, "params", ckpt.params)
        _dataset(f, "initial", ckpt.initial)
        g = f.create_group("server")
        for key, value in ckpt.server_arrays.items():
            _dataset(g, key, np.asarray(value))
        wg = f.create_group("workers")
        for i, w in enumerate(ckpt.workers):
            sub = wg.create_group(f"w{i}")
            sub.attrs["state"] = json.dumps(w["state"])
            for key in ("unsent", "produced", "order"):
                _dataset(sub, key, np.asarray(w[key]))
        f.flush()
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    _fsync_dir(d)
    for old in checkpoint_paths(d)[max(1, keep):]:
        old.unlink(missing_ok=True)
    return final


def load(path: str | Path) -> Checkpoint:
    """Read and fully verify a checkpoint; InputError naming the file and the reason if bad."""
    import h5py

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such checkpoint")
    try:
        with h5py.File(p, "r", locking=False) as f:
            if f.attrs.get("format") != FORMAT:
                raise InputError(f"{p}: not an mpikanel checkpoint")
            schema = int(f.attrs.get("schema", -1))
            if schema != SCHEMA:
                raise InputError(f"{p}: checkpoint schema {schema}, this mpikanel reads schema {SCHEMA}")
            a = f.attrs
            params = f["params"][()]
            if params.size != int(a["n_params"]):
                raise InputError(f"{p}: inconsistent checkpoint (parameter count)")
            workers = []
            for i in range(int(a["ranks"]) - 1):
                sub = f["workers"][f"w{i}"]
                workers.append({"state": json.loads(sub.attrs["state"]),
                                **{k: sub[k][()] for k in ("unsent", "produced", "order")}})
            return Checkpoint(params=params, initial=f["initial"][()], config=json.loads(a["config"]),
                              ranks=int(a["ranks"]), sync=str(a["sync"]), model=str(a["model"]),
                              server=json.loads(a["server"]),
                              server_arrays={k: v[()] for k, v in f["server"].items()},
                              workers=workers, elapsed_s=float(a["elapsed_s"]), final=bool(a["final"]),
                              reason=str(a["reason"]), seq=int(a["seq"]), path=p,
                              version=str(a["mpikanel_version"]))
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{p}: corrupted or truncated checkpoint ({first})") from None


def load_latest(directory: str | Path) -> tuple[Checkpoint | None, list[str]]:
    """The newest valid checkpoint in a directory (None if there is none), and notes on the
    invalid newer ones that were skipped."""
    notes = []
    for p in checkpoint_paths(directory):
        try:
            return load(p), notes
        except InputError as exc:
            notes.append(f"skipping invalid checkpoint: {exc}")
    return None, notes


def check_compatible(ckpt: Checkpoint, ranks: int, sync: str, model: str, n_params: int) -> None:
    """InputError unless the checkpoint can resume this run (another rank count: see reshape)."""
    where = ckpt.path or "checkpoint"
    if ckpt.ranks != ranks and ckpt.config.get("budget", "shared") != "shared":
        # ranks count as with one server (workers + 1); with --servers K a run has workers + K
        raise InputError(f"{where}: written by {ckpt.ranks - 1} workers, this run has {ranks - 1}; a --budget "
                         f"per-worker run keeps each worker's own epochs, so resume it on {ckpt.ranks - 1} workers "
                         f"(mpiexec -n {ckpt.ranks - 1} + the number of --servers)")
    if ckpt.sync != sync:
        raise InputError(f"{where}: written by a --sync {ckpt.sync} run, this run is --sync {sync}")
    if ckpt.model != model or ckpt.params.size != n_params:
        raise InputError(f"{where}: holds model {ckpt.model} with {ckpt.params.size} parameters, "
                         f"this run trains {model} with {n_params}")


def reshape(ckpt: Checkpoint, ranks: int) -> Checkpoint:
    """The checkpoint as a start for `ranks` ranks (a different worker count; shared budget only).

    Nothing done is lost: every worker's unsent local work is added to the parameters (as the
    server would have added it), and the samples it holds count against the budget. The new
    workers start from those parameters with equal clocks and fresh sync state (the PSP
    predictor relearns within a few rounds); the rows are dealt into the new number of shards as
    in a fresh run, and each worker starts a new pass over its shard in an order drawn from
    (seed, rank, the checkpoint's seq). Delta accounting restarts at the cut: `initial` becomes
    the folded parameters, so the resumed run checks that no delta of its own was lost.
    """
    unsent = sum((np.asarray(w["unsent"], dtype=np.float64) for w in ckpt.workers), np.zeros_like(ckpt.params))
    unsent_samples = sum(int(w["state"]["schedule"].get("unsent_samples", 0)) for w in ckpt.workers)
    params = ckpt.params + unsent
    budget = dict(ckpt.server["budget"], counted=int(ckpt.server["budget"]["counted"]) + unsent_samples, lease=None)
    server = {"version": int(ckpt.server["version"]), "deltas_applied": 0, "busy_s": 0.0, "policy": None,
              "budget": budget, "reshaped": {"ranks": ckpt.ranks, "samples_before": budget["counted"],
                                             "seq": ckpt.seq}}
    return Checkpoint(params=params, initial=params.copy(), config=ckpt.config, ranks=ranks, sync=ckpt.sync,
                      model=ckpt.model, server=server, server_arrays={},
                      workers=[{"reshaped_seq": ckpt.seq} for _ in range(ranks - 1)], elapsed_s=ckpt.elapsed_s,
                      reason=ckpt.reason, seq=ckpt.seq, path=ckpt.path, version=ckpt.version)


@dataclass
class CheckpointControl:
    """When the server checkpoints, and how it writes (the entry point supplies `write`)."""

    every_s: float = 0.0
    every_steps: int = 0
    stop_requested: Any = lambda: False      # () -> bool: a signal reached this rank
    write: Any = None                        # (server, reason, final) -> Path
    _last_s: float = 0.0
    _last_steps: int = 0

    def due(self, elapsed_s: float, steps: int) -> str | None:
        """'periodic' when a time or step interval has passed since the last checkpoint."""
        if self.every_s > 0 and elapsed_s - self._last_s >= self.every_s:
            return "periodic"
        if self.every_steps > 0 and steps - self._last_steps >= self.every_steps:
            return "periodic"
        return None

    def written(self, elapsed_s: float, steps: int) -> None:
        """Restart the intervals."""
        self._last_s, self._last_steps = elapsed_s, steps


def parse_every(text: str | float | int | None) -> tuple[float, int]:
    """'--checkpoint-every' as (seconds, steps): '30', '30s', '500steps'; 0/None = only end and signals."""
    if text is None:
        return 0.0, 0
    s = str(text).strip().lower()
    try:
        if s.endswith("steps"):
            n = int(s[:-5])
            if n < 0:
                raise ValueError
            return 0.0, n
        value = float(s[:-1] if s.endswith("s") else s)
        if value < 0:
            raise ValueError
        return value, 0
    except ValueError:
        raise InputError(f"--checkpoint-every must be SECONDS, SECONDSs or NUMBERsteps, got '{text}'") from None


# ---------------------------------------------------------------- python -m mpikanel.checkpoint

def describe_checkpoint(path: Path) -> dict:
    """What one checkpoint holds and whether it loads (every checksum verified)."""
    info: dict[str, Any] = {"path": str(path), "bytes": path.stat().st_size}
    try:
        ckpt = load(path)
    except InputError as exc:
        return {**info, "valid": False, "error": str(exc)}
    steps = [int(w["state"].get("stats", {}).get("steps", 0)) if isinstance(w.get("state"), dict) else 0
             for w in ckpt.workers]
    return {**info, "valid": True, "seq": ckpt.seq, "ranks": ckpt.ranks, "sync": ckpt.sync, "model": ckpt.model,
            "n_params": int(ckpt.params.size), "elapsed_s": ckpt.elapsed_s, "reason": ckpt.reason,
            "final": ckpt.final, "mpikanel_version": ckpt.version, "worker_steps": sum(steps),
            "epochs": ckpt.config.get("epochs"), "data": ckpt.config.get("data")}


def main(argv: list[str] | None = None) -> int:
    """``inspect DIR|FILE``: each checkpoint's shape, progress and validity; ``export CKPT OUT``: a model file."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m mpikanel.checkpoint", description="Inspect or export checkpoints.")
    sub = p.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="list a directory's checkpoints (newest first) or one file, verified")
    ins.add_argument("path", help="checkpoint directory or file")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    exp = sub.add_parser("export", help="write a checkpoint's parameters as a model file (mpikanel.load_model)")
    exp.add_argument("checkpoint")
    exp.add_argument("out")
    args = p.parse_args(argv)
    try:
        if args.command == "export":
            from .model_io import export_checkpoint
            print(f"wrote {export_checkpoint(args.checkpoint, args.out)}")
            return 0
        target = Path(args.path)
        if not target.exists():
            raise InputError(f"{target}: no such checkpoint directory or file")
        paths = checkpoint_paths(target) if target.is_dir() else [target]
        rows = [describe_checkpoint(q) for q in paths]
        latest = next((r["path"] for r in rows if r["valid"]), None)
        if args.json:
            print(json.dumps({"checkpoints": rows, "resume_latest": latest}, indent=2))
        else:
            for r in rows:
                if r["valid"]:
                    print(f"{r['path']}: valid; seq {r['seq']}, {r['ranks']} ranks, --sync {r['sync']}, {r['model']} "
                          f"({r['n_params']} params), {r['worker_steps']} worker steps, {r['elapsed_s']:.1f} s trained, "
                          f"{'final' if r['final'] else r['reason']}, {r['bytes']} bytes")
                else:
                    print(f"{r['path']}: INVALID: {r['error']}")
            print(f"--resume latest would load: {latest or 'nothing (starts fresh)'}")
        return 0 if rows else 1
    except InputError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
