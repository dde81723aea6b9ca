"""What a checkpoint is on disk: the directory names, the run's state as one object, and how a
part stores an array (a mostly-zero float64 vector as its nonzero keys and values)."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.sparse import SPARSE_AT, KeyedVector

FORMAT = "mpikanel-checkpoint"
SCHEMA = 2
MANIFEST = "manifest.json"
NAME_PATTERN = re.compile(r"^ckpt-(\d{6,})$")
#: ... if it has at least this many entries
SPARSE_MIN = 1024


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


def fsync_path(path: Path) -> None:
    """fsync a file or a directory."""
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


def put_array(group: Any, name: str, value: np.ndarray | KeyedVector) -> None:
    """A dataset, or for a mostly-zero float64 vector (unsent work, a sparse model) a group of its
    nonzero keys and values: bitwise the same vector back (-0.0 counts as nonzero). A
    KeyedVector (a tracked worker's part) is stored alike without a pass over the whole vector,
    unless it goes dense."""
    if isinstance(value, KeyedVector):
        if _sparse(value.size, value.keys.size):
            _put_keyed(group, name, value.size, value.keys, value.values)
            return
        value = value.dense()
    value = np.ascontiguousarray(value)
    if value.dtype == np.float64 and value.ndim == 1 and value.size >= SPARSE_MIN:
        keys = np.flatnonzero(value.view(np.int64))
        if _sparse(value.size, keys.size):
            _put_keyed(group, name, value.size, keys, value[keys])
            return
    group.create_dataset(name, data=value)


def _sparse(size: int, nnz: int) -> bool:
    """Whether a float64 vector of `size` with `nnz` nonzero entries is stored as keys and values."""
    return size >= SPARSE_MIN and nnz <= SPARSE_AT * size


def _put_keyed(group: Any, name: str, size: int, keys: np.ndarray, values: np.ndarray) -> None:
    g = group.create_group(name)
    g.attrs["size"] = size
    g.create_dataset("keys", data=keys.astype(np.int32 if size < 2**31 else np.int64))
    g.create_dataset("values", data=values)


def get_array(node: Any) -> np.ndarray:
    """The array :func:`put_array` stored."""
    import h5py

    if isinstance(node, h5py.Group):
        out = np.zeros(int(node.attrs["size"]))
        out[node["keys"][()]] = node["values"][()]
        return out
    return node[()]


def checkpoint_paths(directory: str | Path) -> list[Path]:
    """Checkpoint directories (complete or not) under a directory, newest first."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := NAME_PATTERN.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found, reverse=True)]


def next_seq(directory: str | Path) -> int:
    """The sequence number the next checkpoint written in `directory` gets."""
    found = checkpoint_paths(directory)
    return int(NAME_PATTERN.match(found[0].name).group(1)) + 1 if found else 1


def clean_temporaries(directory: str | Path) -> list[Path]:
    """Remove checkpoints left without a manifest by an interrupted write; they are never loaded."""
    removed = [p for p in checkpoint_paths(directory) if not (p / MANIFEST).exists()]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed
