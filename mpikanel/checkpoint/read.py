"""Reading a checkpoint: the manifest first, every part checked against it (size, sha256), then
the parts assembled into one :class:`Checkpoint` whatever the number of servers that wrote it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .layout import FORMAT, MANIFEST, NAME_PATTERN, SCHEMA, Checkpoint, checkpoint_paths, get_array, sha256_of


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
        inside = checkpoint_paths(d)
        if inside:
            raise InputError(f"{d} holds checkpoints, it is not one: name one ({inside[0]}), or use "
                             f"--resume latest --checkpoint-dir {d}")
        if NAME_PATTERN.match(d.name) or any(d.glob("*.h5")) or any(d.glob(".*.tmp-*")):
            raise InputError(f"{d}: incomplete checkpoint (no {MANIFEST}: its write was interrupted)")
        raise InputError(f"{d}: not a checkpoint (no {MANIFEST}; a checkpoint is a ckpt-NNNNNN directory that a "
                         "run writes into its --checkpoint-dir)")
    try:
        man = json.loads(m.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{m}: corrupted manifest ({exc})") from None
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise InputError(f"{d}: not an mpikanel checkpoint")
    if man.get("schema") != SCHEMA:
        raise InputError(f"{d}: checkpoint schema {man.get('schema')}, this mpikanel reads schema {SCHEMA}")
    return man


WORKER_ARRAYS = ("unsent", "produced", "order")
#: worker arrays only some parts hold: a lazy-L2 worker's stamps (kernels.lazy)
OPTIONAL_WORKER_ARRAYS = ("lazy_stamps",)


def _worker_arrays(f: Any) -> dict[str, np.ndarray]:
    """A worker part's arrays."""
    return {k: get_array(f[k]) for k in (*WORKER_ARRAYS, *OPTIONAL_WORKER_ARRAYS) if k in f or k in WORKER_ARRAYS}


def load(path: str | Path, worker_arrays: bool = True) -> Checkpoint:
    """Read a checkpoint directory, every part verified against its manifest; InputError naming
    the file and the reason if anything is missing, truncated or changed. Without
    ``worker_arrays`` each worker's entry holds its state and its part's path (``part``), so
    the arrays of many workers need not be in one process at once (:func:`worker_state`)."""
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
                    params[a:b], initial[a:b] = get_array(f["params"]), get_array(f["initial"])
                    if "unapplied" in f:
                        unapplied = np.zeros(n) if unapplied is None else unapplied
                        unapplied[a:b] = get_array(f["unapplied"])
                    if "server" in f.attrs:
                        server = json.loads(f.attrs["server"])
                        book = {k: v[()] for k, v in f["book"].items()}
                else:
                    arrays = _worker_arrays(f) if worker_arrays else \
                        {"part": str(d / entry["file"])}
                    workers[int(entry["index"])] = {"state": json.loads(f.attrs["state"]), **arrays}
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


def worker_state(saved: dict) -> dict:
    """A worker's resumable state with its arrays (read from its part where ``load`` left them)."""
    import h5py

    if "part" not in saved:
        return saved
    try:
        with h5py.File(saved["part"], "r", locking=False) as f:
            return {"state": saved["state"], **_worker_arrays(f)}
    except (OSError, KeyError) as exc:
        raise InputError(f"{saved['part']}: corrupted or truncated checkpoint part ({exc})") from None


def load_latest(directory: str | Path, worker_arrays: bool = True) -> tuple[Checkpoint | None, list[str]]:
    """The newest valid checkpoint in a directory (None if there is none), and notes on the
    invalid or incomplete newer ones that were skipped."""
    notes = []
    for p in checkpoint_paths(directory):
        try:
            return load(p, worker_arrays), notes
        except InputError as exc:
            notes.append(f"skipping invalid checkpoint: {exc}")
    return None, notes
