"""Checkpoints as one directory per cut: every rank writes its own part, a manifest commits them.

Layout of ``ckpt-NNNNNN/`` (NNNNNN: the checkpoint's sequence number):
  server-K.h5        server rank K's key range: datasets params, initial (and unapplied, what a
                     scaling policy held back), attrs keys [start, stop]; server 0's also holds the
                     book: attrs server (JSON: version, counters, policy and budget state) and
                     group /book (per-worker clocks and counters)
  worker-WWWWW.h5    worker W's resumable state: attrs state (JSON: cursor, RNG, schedule,
                     counters), datasets unsent (local work not yet pushed), produced, order
  manifest.json      written last by rank 0: format, schema, run shape (ranks, servers, key
                     ranges, sync, model, n_params), config, progress, and every part's name,
                     size and sha256
Each rank writes its part in parallel (serial h5py, plain contiguous datasets; a mostly-zero
vector such as the unsent work of a sparse model as its nonzero keys and values) to a temporary
name, fsyncs it and renames it; rank 0 gathers the parts' (name, size, sha256), writes the
manifest to a temporary name, fsyncs it, renames it and fsyncs the directory. A directory
without a manifest is an interrupted write and is never loaded; a part whose size or sha256
differs from the manifest's is refused, naming the file. A worker that has left keeps its last
part: later checkpoints hard-link it (copy where links fail) instead of writing it again.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

FORMAT = "mpikanel-checkpoint"
SCHEMA = 2
MANIFEST = "manifest.json"
_NAME = re.compile(r"^ckpt-(\d{6,})$")
#: fault tests: "RANK:SEQ" makes that rank's part of checkpoint SEQ pause mid-file for a minute
HOLD_ENV = "MPIKANEL_TEST_HOLD_WRITE"
HOLD_S = 60.0
#: a float64 vector with at most this fraction of nonzero entries is stored as its keys and values
SPARSE_AT = 0.25


@dataclass
class Checkpoint:
    """Everything a run needs to continue exactly where it stopped."""

    params: np.ndarray
    initial: np.ndarray
    config: dict
    ranks: int                                    # workers + 1, whatever the number of servers
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
    servers: int = 1                              # server ranks that wrote it
    parts: list[dict] = field(default_factory=list, compare=False)   # the manifest's file entries


def checkpoint_dir(directory: str | Path, seq: int) -> Path:
    """The directory of checkpoint number `seq` under a checkpoint directory."""
    return Path(directory) / f"ckpt-{seq:06d}"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def hold_s(rank: int, seq: int) -> float:
    """Seconds this rank's part of checkpoint `seq` pauses mid-file (only under the fault tests' HOLD_ENV)."""
    return HOLD_S if os.environ.get(HOLD_ENV, "") == f"{rank}:{seq}" else 0.0


def _put(group: Any, name: str, value: np.ndarray) -> None:
    """A dataset, or for a mostly-zero float64 vector (unsent work, a sparse model) a group of its
    nonzero keys and values: bitwise the same vector back (-0.0 counts as nonzero)."""
    value = np.ascontiguousarray(value)
    if value.dtype == np.float64 and value.ndim == 1 and value.size >= 1024:
        keys = np.flatnonzero(value.view(np.int64))
        if keys.size <= SPARSE_AT * value.size:
            g = group.create_group(name)
            g.attrs["size"] = value.size
            g.create_dataset("keys", data=keys.astype(np.int32 if value.size < 2**31 else np.int64))
            g.create_dataset("values", data=value[keys])
            return
    group.create_dataset(name, data=value)


def _get(node: Any) -> np.ndarray:
    """The array :func:`_put` stored."""
    import h5py

    if isinstance(node, h5py.Group):
        out = np.zeros(int(node.attrs["size"]))
        out[node["keys"][()]] = node["values"][()]
        return out
    return node[()]


def write_part(directory: str | Path, seq: int, role: str, index: int, attrs: dict,
               arrays: dict[str, np.ndarray], book: dict[str, np.ndarray] | None = None,
               pause_s: float = 0.0) -> dict:
    """Write one rank's part of checkpoint `seq` (temporary name, fsync, rename); its manifest entry."""
    import h5py

    t0 = time.perf_counter()
    d = checkpoint_dir(directory, seq)
    d.mkdir(parents=True, exist_ok=True)
    name = f"server-{index}.h5" if role == "server" else f"worker-{index:05d}.h5"
    tmp = d / f".{name}.tmp-{os.getpid()}"
    with h5py.File(tmp, "w", locking=False, libver=("v108", "latest")) as f:
        f.attrs.update({"format": FORMAT, "schema": SCHEMA, "role": role, "index": index, **attrs})
        for i, (key, value) in enumerate(arrays.items()):
            _put(f, key, value)
            if i == 0 and pause_s > 0:
                f.flush()
                time.sleep(pause_s)
        if book is not None:
            g = f.create_group("book")
            for key, value in book.items():
                g.create_dataset(key, data=np.asarray(value))
    _fsync(tmp)
    final = d / name
    os.replace(tmp, final)
    return {"file": name, "role": role, "index": index, "bytes": final.stat().st_size,
            "sha256": sha256_of(final), "path": str(final.resolve()), "seq": seq,
            "write_s": time.perf_counter() - t0}


def write_server_part(directory: str | Path, seq: int, k: int, keys: slice, params: np.ndarray,
                      initial: np.ndarray, unapplied: np.ndarray | None = None,
                      book: tuple[dict, dict[str, np.ndarray]] | None = None, pause_s: float = 0.0) -> dict:
    """Server rank k's part: its key range of the parameters (server 0: and the book)."""
    arrays = {"params": params, "initial": initial}
    if unapplied is not None:
        arrays["unapplied"] = unapplied
    attrs: dict[str, Any] = {"keys": [int(keys.start), int(keys.stop)]}
    if book is not None:
        attrs["server"] = json.dumps(book[0])
    return write_part(directory, seq, "server", k, attrs, arrays, book[1] if book else None, pause_s)


def write_worker_part(directory: str | Path, seq: int, w: int, saved: dict, pause_s: float = 0.0) -> dict:
    """Worker w's part: its resumable state (``WorkerCore.capture``)."""
    arrays = {key: np.asarray(saved[key]) for key in ("unsent", "produced", "order")}
    return write_part(directory, seq, "worker", w, {"state": json.dumps(saved["state"])}, arrays, pause_s=pause_s)


def _link(src: Path, dst: Path) -> None:
    """Hard-link a part into another checkpoint (a copy where the filesystem has no links)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
        _fsync(dst)


def commit(directory: str | Path, seq: int, manifest: dict, parts: list[dict], keep: int = 3) -> Path:
    """Rank 0: link in the parts written for earlier checkpoints (workers that have left), write
    the manifest last (temporary, fsync, rename, directory fsync) and keep the newest `keep`.
    Each part's ``path`` is updated to its place in this checkpoint."""
    d = checkpoint_dir(directory, seq)
    d.mkdir(parents=True, exist_ok=True)
    files = []
    for part in parts:
        here = d / part["file"]
        if Path(part["path"]) != here.resolve():
            _link(Path(part["path"]), here)
            part["path"] = str(here.resolve())
        files.append({k: part[k] for k in ("file", "role", "index", "bytes", "sha256")})
    body = {"format": FORMAT, "schema": SCHEMA, "seq": seq, "created": time.time(), **manifest, "files": files}
    tmp = d / f".{MANIFEST}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(body, indent=1))
    _fsync(tmp)
    os.replace(tmp, d / MANIFEST)
    _fsync(d)
    _fsync(Path(directory))
    complete = [p for p in checkpoint_paths(directory) if (p / MANIFEST).exists()]
    for old in complete[max(1, keep):]:
        shutil.rmtree(old, ignore_errors=True)
    return d


def run_fields(config: dict, ranks: int, key_ranges: list[tuple[int, int]], sync: str, model: str,
               elapsed_s: float, final: bool, reason: str) -> dict:
    """The manifest's description of the run a checkpoint belongs to."""
    from . import __version__

    return {"mpikanel_version": __version__, "config": config, "ranks": ranks, "servers": len(key_ranges),
            "key_ranges": [[int(a), int(b)] for a, b in key_ranges], "n_params": int(key_ranges[-1][1]),
            "sync": sync, "model": model, "elapsed_s": elapsed_s, "final": final, "reason": reason}


def save(directory: str | Path, ckpt: Checkpoint, keep: int = 3) -> Path:
    """Write a whole checkpoint from one process as the next ``ckpt-NNNNNN/`` (one server part):
    the format a run writes rank by rank, for tools and tests."""
    seq = next_seq(directory)
    n = ckpt.params.size
    arrays = dict(ckpt.server_arrays)
    unapplied = arrays.pop("unapplied", None)
    parts = [write_server_part(directory, seq, 0, slice(0, n), ckpt.params, ckpt.initial, unapplied,
                               (ckpt.server, arrays))]
    parts += [write_worker_part(directory, seq, w, saved) for w, saved in enumerate(ckpt.workers)]
    run = run_fields(ckpt.config, ckpt.ranks, [(0, n)], ckpt.sync, ckpt.model, ckpt.elapsed_s, ckpt.final, ckpt.reason)
    return commit(directory, seq, run, parts, keep)


def checkpoint_paths(directory: str | Path) -> list[Path]:
    """Checkpoint directories (complete or not) under a directory, newest first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found, reverse=True)]


def next_seq(directory: str | Path) -> int:
    """The sequence number the next checkpoint written in `directory` gets."""
    found = checkpoint_paths(directory)
    return int(_NAME.match(found[0].name).group(1)) + 1 if found else 1


def clean_temporaries(directory: str | Path) -> list[Path]:
    """Remove checkpoints left without a manifest by an interrupted write; they are never loaded."""
    removed = [p for p in checkpoint_paths(directory) if not (p / MANIFEST).exists()]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def _verify(path: Path, entry: dict) -> None:
    if not path.is_file():
        raise InputError(f"{path}: missing (the manifest lists it)")
    size = path.stat().st_size
    if size != int(entry["bytes"]):
        raise InputError(f"{path}: {size} bytes, the manifest says {entry['bytes']} (truncated or changed "
                         "since the checkpoint was written)")
    if sha256_of(path) != entry["sha256"]:
        raise InputError(f"{path}: checksum mismatch (corrupted or changed since the checkpoint was written)")


def _manifest(d: Path) -> dict:
    m = d / MANIFEST
    if not m.exists():
        raise InputError(f"{d}: incomplete checkpoint (no {MANIFEST}: its write was interrupted)")
    try:
        man = json.loads(m.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{m}: corrupted manifest ({exc})") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise InputError(f"{d}: not an mpikanel checkpoint")
    if man.get("schema") != SCHEMA:
        raise InputError(f"{d}: checkpoint schema {man.get('schema')}, this mpikanel reads schema {SCHEMA}")
    return man


def load(path: str | Path) -> Checkpoint:
    """Read a checkpoint directory, every part verified against its manifest; InputError naming
    the file and the reason if anything is missing, truncated or changed."""
    import h5py

    d = Path(path)
    if d.name == MANIFEST:
        d = d.parent
    if not d.exists():
        raise InputError(f"{d}: no such checkpoint")
    if d.is_file():
        raise InputError(f"{d}: not a checkpoint directory (a one-file checkpoint of mpikanel 0.1? this "
                         f"version reads ckpt-NNNNNN/ directories, checkpoint schema {SCHEMA})")
    man = _manifest(d)
    try:
        entries = man["files"]
        for entry in entries:
            _verify(d / entry["file"], entry)
        n = int(man["n_params"])
        params, initial, unapplied = np.empty(n), np.empty(n), None
        server, book, workers = None, {}, {}
        for entry in entries:
            with h5py.File(d / entry["file"], "r", locking=False) as f:
                if entry["role"] == "server":
                    a, b = (int(x) for x in f.attrs["keys"])
                    params[a:b], initial[a:b] = _get(f["params"]), _get(f["initial"])
                    if "unapplied" in f:
                        unapplied = np.zeros(n) if unapplied is None else unapplied
                        unapplied[a:b] = _get(f["unapplied"])
                    if "server" in f.attrs:
                        server = json.loads(f.attrs["server"])
                        book = {k: v[()] for k, v in f["book"].items()}
                else:
                    workers[int(entry["index"])] = {"state": json.loads(f.attrs["state"]),
                                                    **{k: _get(f[k]) for k in ("unsent", "produced", "order")}}
        covered = sorted(tuple(r) for r in man["key_ranges"])
        if server is None or len(workers) != int(man["ranks"]) - 1 or covered[0][0] != 0 or covered[-1][1] != n:
            raise InputError(f"{d}: inconsistent checkpoint (parts missing from the manifest)")
        if unapplied is not None:
            book["unapplied"] = unapplied
        return Checkpoint(params=params, initial=initial, config=man["config"], ranks=int(man["ranks"]),
                          sync=str(man["sync"]), model=str(man["model"]), server=server, server_arrays=book,
                          workers=[workers[w] for w in range(len(workers))], elapsed_s=float(man["elapsed_s"]),
                          final=bool(man["final"]), reason=str(man["reason"]), seq=int(man["seq"]), path=d,
                          version=str(man["mpikanel_version"]), servers=int(man["servers"]), parts=entries)
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError, IndexError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{d}: corrupted or truncated checkpoint ({first})") from None


def load_latest(directory: str | Path) -> tuple[Checkpoint | None, list[str]]:
    """The newest valid checkpoint in a directory (None if there is none), and notes on the
    invalid or incomplete newer ones that were skipped."""
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
    seq: int = 1                             # the number the next checkpoint gets (its directory)
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
        """Restart the intervals; the next checkpoint gets the next number."""
        self._last_s, self._last_steps = elapsed_s, steps
        self.seq += 1


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
    """What one checkpoint holds and whether it loads (every part verified against the manifest)."""
    info: dict[str, Any] = {"path": str(path)}
    try:
        ckpt = load(path)
    except InputError as exc:
        return {**info, "valid": False, "error": str(exc)}
    steps = [int(w["state"].get("stats", {}).get("steps", 0)) if isinstance(w.get("state"), dict) else 0
             for w in ckpt.workers]
    return {**info, "valid": True, "seq": ckpt.seq, "ranks": ckpt.ranks, "servers": ckpt.servers,
            "sync": ckpt.sync, "model": ckpt.model, "n_params": int(ckpt.params.size), "elapsed_s": ckpt.elapsed_s,
            "reason": ckpt.reason, "final": ckpt.final, "mpikanel_version": ckpt.version, "worker_steps": sum(steps),
            "epochs": ckpt.config.get("epochs"), "data": ckpt.config.get("data"),
            "bytes": sum(int(e["bytes"]) for e in ckpt.parts), "files": ckpt.parts}


def main(argv: list[str] | None = None) -> int:
    """``inspect DIR``: each checkpoint's shape, progress, parts and validity; ``export CKPT OUT``: a model file."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m mpikanel.checkpoint", description="Inspect or export checkpoints.")
    sub = p.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="list a --checkpoint-dir's checkpoints (newest first) or one ckpt-NNNNNN, "
                                          "every part verified against its manifest")
    ins.add_argument("path", help="a --checkpoint-dir or one checkpoint (ckpt-NNNNNN)")
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
            raise InputError(f"{target}: no such checkpoint directory")
        one = target.is_file() or _NAME.match(target.name) or (target / MANIFEST).exists()
        paths = [target] if one else checkpoint_paths(target)
        rows = [describe_checkpoint(q) for q in paths]
        latest = next((r["path"] for r in rows if r["valid"]), None)
        if args.json:
            print(json.dumps({"checkpoints": rows, "resume_latest": latest}, indent=2))
        else:
            for r in rows:
                if r["valid"]:
                    print(f"{r['path']}: valid; seq {r['seq']}, {r['ranks'] - 1} workers, {r['servers']} server"
                          f"{'s' if r['servers'] > 1 else ''}, --sync {r['sync']}, {r['model']} ({r['n_params']} params), "
                          f"{r['worker_steps']} worker steps, {r['elapsed_s']:.1f} s trained, "
                          f"{'final' if r['final'] else r['reason']}, {len(r['files'])} files, {r['bytes']} bytes")
                    if one:
                        for e in r["files"]:
                            print(f"  {e['file']}: {e['role']} {e['index']}, {e['bytes']} bytes, sha256 {e['sha256'][:16]}...")
                else:
                    print(f"{r['path']}: INVALID: {r['error']}")
            print(f"--resume latest would load: {latest or 'nothing (starts fresh)'}")
        return 0 if rows else 1
    except InputError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
