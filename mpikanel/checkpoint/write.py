"""Writing a checkpoint: each rank's part (temporary name, fsync, rename) and rank 0's manifest,
committed last (temporary, fsync, rename, directory fsync), then keep-last-N."""
from __future__ import annotations

import json
import os
import platform
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..engine.sparse import KeyedVector
from ..errors import CheckpointError
from .layout import (FORMAT, MANIFEST, SCHEMA, Checkpoint, checkpoint_dir, checkpoint_paths, fsync_path,
                     next_seq, put_array, sha256_of)
from .coordinator import ServerPart
from .read import worker_state

#: fault tests: "RANK:SEQ" makes that rank's part of checkpoint SEQ pause mid-file for a minute
HOLD_ENV = "MPIKANEL_TEST_HOLD_WRITE"
HOLD_S = 60.0


def hold_s(rank: int, seq: int) -> float:
    """Seconds this rank's part of checkpoint `seq` pauses mid-file (only under the fault tests' HOLD_ENV)."""
    return HOLD_S if os.environ.get(HOLD_ENV, "") == f"{rank}:{seq}" else 0.0


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OS error while writing `path` (full disk, permissions) as one line naming it; no temporary left."""
    try:
        yield
    except OSError as exc:
        for tmp in path.parent.glob(f".{path.name}.tmp-{os.getpid()}") if path.parent.is_dir() else []:
            tmp.unlink(missing_ok=True)
        raise CheckpointError(f"{path}: cannot write this checkpoint file ({exc})") from None


def write_part(directory: str | Path, seq: int, role: str, index: int, attrs: dict,
               arrays: dict[str, np.ndarray | KeyedVector], book: dict[str, np.ndarray] | None = None,
               pause_s: float = 0.0) -> dict:
    """Write one rank's part of checkpoint `seq` (temporary name, fsync, rename); its manifest entry."""
    import h5py

    t0 = time.perf_counter()
    d = checkpoint_dir(directory, seq)
    name = f"server-{index}.h5" if role == "server" else f"worker-{index:05d}.h5"
    final = d / name
    with _writing(final):
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{name}.tmp-{os.getpid()}"
        with h5py.File(tmp, "w", locking=False, libver=("v108", "latest")) as f:
            f.attrs.update({"format": FORMAT, "schema": SCHEMA, "role": role, "index": index, "host": platform.node(),
                            **attrs})
            for i, (key, value) in enumerate(arrays.items()):
                put_array(f, key, value)
                if i == 0 and pause_s > 0:
                    f.flush()
                    time.sleep(pause_s)
            if book is not None:
                g = f.create_group("book")
                for key, value in book.items():
                    g.create_dataset(key, data=np.asarray(value))
        fsync_path(tmp)
        os.replace(tmp, final)
    return {"file": name, "role": role, "index": index, "host": platform.node(), "bytes": final.stat().st_size,
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
    """Worker w's part: its resumable state (``WorkerCore.capture``; KeyedVectors stay keyed)."""
    arrays = {key: saved[key] if isinstance(saved[key], KeyedVector) else np.asarray(saved[key])
              for key in ("unsent", "produced", "order", "lazy_stamps") if key in saved}
    return write_part(directory, seq, "worker", w, {"state": json.dumps(saved["state"])}, arrays, pause_s=pause_s)


def _link(src: Path, dst: Path) -> None:
    """Hard-link a part into another checkpoint (a copy where the filesystem has no links)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
        fsync_path(dst)


def commit(directory: str | Path, seq: int, manifest: dict, parts: list[dict], keep: int = 3) -> Path:
    """Rank 0: link in the parts written for earlier checkpoints (workers that have left), write
    the manifest last (temporary, fsync, rename, directory fsync) and keep the newest `keep`.
    Each part's ``path`` is updated to its place in this checkpoint."""
    d = checkpoint_dir(directory, seq)
    files = []
    with _writing(d / MANIFEST):
        d.mkdir(parents=True, exist_ok=True)
        for part in parts:
            here = d / part["file"]
            if Path(part["path"]) != here.resolve():
                _link(Path(part["path"]), here)
                part["path"] = str(here.resolve())
            # host: the node that wrote the part (every rank writes its own, into one directory)
            files.append({k: part[k] for k in ("file", "role", "index", "host", "bytes", "sha256") if k in part})
        body = {"format": FORMAT, "schema": SCHEMA, "seq": seq, "created": time.time(), **manifest, "files": files}
        tmp = d / f".{MANIFEST}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(body, indent=1))
        fsync_path(tmp)
        os.replace(tmp, d / MANIFEST)
        fsync_path(d)
        fsync_path(Path(directory))
    complete = [p for p in checkpoint_paths(directory) if (p / MANIFEST).exists()]
    for old in complete[max(1, keep):]:
        shutil.rmtree(old, ignore_errors=True)
    return d


def run_fields(config: dict, ranks: int, key_ranges: list[tuple[int, int]], sync: str, model: str,
               elapsed_s: float, final: bool, reason: str) -> dict:
    """The manifest's description of the run a checkpoint belongs to."""
    from .._version import __version__

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
    parts += [write_worker_part(directory, seq, w, worker_state(saved)) for w, saved in enumerate(ckpt.workers)]
    run = run_fields(ckpt.config, ckpt.ranks, [(0, n)], ckpt.sync, ckpt.model, ckpt.elapsed_s, ckpt.final, ckpt.reason)
    return commit(directory, seq, run, parts, keep)


class FileParts:
    """Server 0's :class:`~mpikanel.checkpoint.coordinator.CheckpointIO` over a checkpoint directory."""

    def __init__(self, directory: str | Path, keys: slice, initial: np.ndarray, key_ranges: list[tuple[int, int]],
                 config: dict, ranks: int, sync: str, model: str, keep: int = 3, quiet: bool = True) -> None:
        self.directory, self.keys, self.initial, self.key_ranges = directory, keys, initial, key_ranges
        self.config, self.ranks, self.sync, self.model, self.keep, self.quiet = config, ranks, sync, model, keep, quiet

    def write_own(self, seq: int, part: ServerPart) -> dict:
        """Server 0's part: its key range, what it scaled away and the book."""
        return write_server_part(self.directory, seq, 0, self.keys, part.params, self.initial[self.keys],
                                 part.unapplied, (part.meta, part.arrays), hold_s(0, seq))

    def commit(self, seq: int, reason: str, final: bool, entries: list[dict], elapsed_s: float) -> str:
        """The manifest over every part, last; keep-last-N."""
        run = run_fields(self.config, self.ranks, self.key_ranges, self.sync, self.model, elapsed_s, final, reason)
        path = commit(self.directory, seq, run, entries, keep=self.keep)
        if not self.quiet:
            print(f"mpikanel: checkpoint ({reason}) written to {path}", flush=True)
        return str(path)
