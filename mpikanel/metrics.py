"""Loss-vs-time bookkeeping: parameter snapshots on the server, the curve, and the HDF5 metrics file.

The server only *copies* parameters (:class:`SnapshotRecorder`); evaluation happens after the
run (:func:`evaluate_curve`), off the serving path.

Metrics file layout (HDF5)::

    /                root attrs: format, format_version, summary_json, plus the caller's attrs
                     (sync, model, workers, seed, scenario, command_line, versions, ...);
                     str/int/float/bool attrs are stored natively, anything else as JSON text
                     (their names are listed in the root attr ``json_attrs``)
    /curve/NAME      1-D datasets: time_s, version, pushes (deltas the server had applied), test_loss,
                     test_accuracy, and val_loss, val_accuracy when the run held out validation rows
                     (and any extra keys)
    /workers/KEY     1-D datasets, one entry per worker, for every key whose value is numeric in
                     every worker dict (rank, steps, pushes, compute_s, comm_s, wait_s, injected_s, ...);
                     the group attr ``keys`` (JSON) keeps their order
"""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from .errors import InputError

FORMAT = "mpikanel-metrics"
FORMAT_VERSION = 1
CURVE_KEYS = ("time_s", "version", "test_loss", "test_accuracy")
_RESERVED_ATTRS = ("format", "format_version", "summary_json", "json_attrs")


@dataclass(frozen=True)
class Snapshot:
    """A copy of the parameters at one moment of the run."""

    time_s: float
    version: int
    params: np.ndarray
    pushes: int = 0             # deltas the server had applied by then


#: memory the curve's snapshots may hold in all (a 10M-parameter model keeps 26, not 400)
SNAPSHOT_BYTES = 1 << 30


class SnapshotRecorder:
    """Keeps bounded, thinned copies of the parameters at roughly `interval_s` spacing: at most
    `max_snapshots`, and no more than fit in `max_bytes` (at least 2); when full, every other one
    is dropped and the interval doubles, so a long run keeps an even, coarser curve."""

    def __init__(self, interval_s: float = 1.0, max_snapshots: int = 400, dtype: Any = np.float32,
                 max_bytes: int = SNAPSHOT_BYTES):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if max_snapshots < 2:
            raise ValueError(f"max_snapshots must be >= 2, got {max_snapshots}")
        self.interval_s = float(interval_s)
        self.max_snapshots = int(max_snapshots)
        self.max_bytes = int(max_bytes)
        self.dtype = np.dtype(dtype)
        self.snapshots: list[Snapshot] = []
        self._last_s = -math.inf        # the first call always records

    def due(self, now_s: float) -> bool:
        """Whether maybe_snapshot at now_s would copy the parameters."""
        return now_s - self._last_s >= self.interval_s

    def maybe_snapshot(self, now_s: float, params: np.ndarray, version: int, pushes: int = 0,
                       size: int | None = None) -> bool:
        """Copy `params` if `interval_s` has passed since the last snapshot; True if it did.
        ``size``: the whole vector's length when `params` is one server's range (see :meth:`record`)."""
        if not self.due(now_s):
            return False
        self.record(now_s, params, version, pushes, size)
        return True

    def final(self, now_s: float, params: np.ndarray, version: int, pushes: int = 0, size: int | None = None) -> int:
        """Always record the end state (replacing a last snapshot of the same version); the
        decisions it made, as :meth:`record` returns them."""
        replaced = 0
        if self.snapshots and self.snapshots[-1].version == version:
            self.snapshots.pop()
            replaced = REPLACE
        return replaced | self.record(now_s, params, version, pushes, size)

    def record(self, now_s: float, params: np.ndarray, version: int, pushes: int = 0, size: int | None = None) -> int:
        """Copy `params` now, thinning first when full; returns THIN if it thinned (else 0).

        With several servers, server 0 records only its own range: ``size`` is then the whole
        vector's length, so the memory bound (and every thinning decision) is the one a whole
        vector would get, and the other servers repeat the decisions on their ranges
        (:class:`SnapshotPieces`)."""
        n = params.size if size is None else int(size)
        fit = max(2, self.max_bytes // max(1, n * self.dtype.itemsize))
        thinned = 0
        if len(self.snapshots) >= min(self.max_snapshots, fit):
            self._thin()
            thinned = THIN
        self.snapshots.append(Snapshot(float(now_s), int(version), np.array(params, dtype=self.dtype), int(pushes)))
        self._last_s = float(now_s)
        return thinned

    def _thin(self) -> None:
        """Drop every other snapshot (keeping the first) and double the interval."""
        self.snapshots = self.snapshots[::2]
        self.interval_s *= 2.0
        self._last_s = self.snapshots[-1].time_s

    def assemble(self, n_params: int, own: slice, fill: Callable[[int, np.ndarray], None]) -> None:
        """The snapshots hold one server's range ``own``: widen each to the whole vector of
        n_params, and have ``fill(i, whole)`` put the other servers' pieces of snapshot i into it
        (the end of a run; one snapshot's range is freed as its whole vector is made)."""
        for i, s in enumerate(self.snapshots):
            whole = np.empty(n_params, dtype=self.dtype)
            whole[own] = s.params
            fill(i, whole)
            self.snapshots[i] = replace(s, params=whole)

    def __len__(self) -> int:
        return len(self.snapshots)

    def __iter__(self):
        return iter(self.snapshots)


#: snapshot decisions a server k > 0 repeats on its range (an ``Op.SNAPSHOT``'s argument, bits)
THIN = 1        # drop every other snapshot first (keeping the first)
REPLACE = 2     # drop the last snapshot first (the end state replaces a snapshot of its version)


class SnapshotPieces:
    """A server k > 0's side of the curve: its range of every snapshot server 0 keeps, made by
    repeating server 0's decisions in its order (``Op.SNAPSHOT``), so the pieces line up with
    server 0's snapshots one to one; they go to server 0 once, at the end of the run."""

    def __init__(self, dtype: Any = np.float32):
        self.dtype = np.dtype(dtype)
        self.pieces: list[np.ndarray] = []

    def take(self, decisions: int, params: np.ndarray) -> None:
        """Copy this range now, after the REPLACE and THIN `decisions` server 0 made."""
        if decisions & REPLACE:
            self.pieces.pop()
        if decisions & THIN:
            self.pieces = self.pieces[::2]
        self.pieces.append(np.array(params, dtype=self.dtype))

    def __len__(self) -> int:
        return len(self.pieces)


def evaluate_curve(snapshots: Iterable[Snapshot], loss_fn: Callable[[np.ndarray], float],
                   acc_fn: Callable[[np.ndarray], float] | None, prefix: str = "test") -> dict[str, np.ndarray]:
    """Evaluate each snapshot (params as float64) into arrays time_s, version, pushes, PREFIX_loss, PREFIX_accuracy."""
    snaps = list(snapshots)
    curve = {
        "time_s": np.array([s.time_s for s in snaps], dtype=np.float64),
        "version": np.array([s.version for s in snaps], dtype=np.int64),
        "pushes": np.array([s.pushes for s in snaps], dtype=np.int64),
        f"{prefix}_loss": np.empty(len(snaps), dtype=np.float64),
        f"{prefix}_accuracy": np.full(len(snaps), np.nan, dtype=np.float64),
    }
    for i, s in enumerate(snaps):
        params = np.ascontiguousarray(s.params, dtype=np.float64)
        curve[f"{prefix}_loss"][i] = float(loss_fn(params))
        if acc_fn is not None:
            curve[f"{prefix}_accuracy"][i] = float(acc_fn(params))
    return curve


def first_touch(time_s: Any, loss: Any, target: float) -> float | None:
    """First time the loss reaches <= target, linearly interpolated between snapshots; None if never.

    If the first snapshot already meets the target its time is returned; a NaN loss never
    meets it, and next to a NaN no interpolation is done (the later snapshot's time is used).
    """
    t = np.asarray(time_s, dtype=np.float64)
    y = np.asarray(loss, dtype=np.float64)
    hits = np.flatnonzero(y <= target)
    return None if hits.size == 0 else _crossing(t, y, int(hits[0]), target)


def time_to_target(time_s: Any, loss: Any, target: float) -> float | None:
    """Time after which the loss *stays* <= target for the rest of the run; None if the run ends above.

    The crossing into the final run of snapshots at or below the target, linearly interpolated
    like :func:`first_touch` (a run that dips below and comes back up has not reached it then).
    """
    t = np.asarray(time_s, dtype=np.float64)
    y = np.asarray(loss, dtype=np.float64)
    if y.size == 0 or not y[-1] <= target:
        return None
    above = np.flatnonzero(~(y <= target))      # NaN counts as above
    return _crossing(t, y, int(above[-1]) + 1 if above.size else 0, target)


def _crossing(t: np.ndarray, y: np.ndarray, i: int, target: float) -> float:
    """Interpolated time the loss crossed down to `target` between snapshot i-1 and i."""
    if i == 0 or not math.isfinite(y[i - 1]) or y[i - 1] == y[i]:
        return float(t[i])
    frac = (y[i - 1] - target) / (y[i - 1] - y[i])
    return float(t[i - 1] + frac * (t[i] - t[i - 1]))


def write_metrics(path: str | Path, summary: dict, curve: dict, workers: list[dict], attrs: dict) -> None:
    """Write the run's metrics file (layout in the module docstring); overwrites `path`."""
    import h5py

    bad = sorted(set(attrs) & set(_RESERVED_ATTRS))
    if bad:
        raise ValueError(f"attrs use reserved name(s): {', '.join(bad)}")
    with h5py.File(path, "w", libver=("v108", "latest")) as f:   # v108+: attrs may exceed 64 KiB
        f.attrs["format"] = FORMAT
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["summary_json"] = _dumps(summary)
        _write_attrs(f, attrs)
        g = f.create_group("curve")
        for key, values in curve.items():
            g.create_dataset(key, data=np.asarray(values))
        _write_workers(f.create_group("workers"), workers)


def _write_attrs(f: Any, attrs: dict) -> None:
    as_json = []
    for key, value in attrs.items():
        if isinstance(value, (str, bool, np.bool_)) or _is_number(value):
            f.attrs[key] = value
        else:
            f.attrs[key] = _dumps(value)
            as_json.append(key)
    f.attrs["json_attrs"] = json.dumps(as_json)


def _write_workers(g: Any, workers: list[dict]) -> None:
    keys = numeric_worker_keys(workers)
    g.attrs["keys"] = json.dumps(keys)
    g.attrs["n_workers"] = len(workers)
    for key in keys:
        g.create_dataset(key, data=np.asarray([w[key] for w in workers]))


def numeric_worker_keys(workers: list[dict]) -> list[str]:
    """Keys (first worker's order) whose value is a number or bool in every worker dict."""
    if not workers:
        return []
    return [k for k in workers[0]
            if all(k in w and (_is_number(w[k]) or isinstance(w[k], (bool, np.bool_))) for w in workers)]


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, complex)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def read_metrics(path: str | Path) -> dict:
    """Read a metrics file: {"path", "summary", "curve", "workers", "attrs"}; InputError if invalid."""
    import h5py

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such metrics file")
    try:
        with h5py.File(p, "r") as f:
            return _read_open(f, str(path))
    except InputError:
        raise
    except (OSError, KeyError, ValueError) as exc:
        raise InputError(f"{path}: not a valid mpikanel metrics file ({_first_line(exc)})") from None


def _read_open(f: Any, path: str) -> dict:
    if _scalar(f.attrs.get("format")) != FORMAT or "curve" not in f or "workers" not in f:
        raise InputError(f"{path}: not an mpikanel metrics file (no '{FORMAT}' format attr or "
                         f"missing /curve or /workers)")
    curve = {key: f["curve"][key][()] for key in f["curve"]}
    return {"path": path, "summary": json.loads(_scalar(f.attrs["summary_json"])),
            "curve": curve, "workers": _read_workers(f["workers"]), "attrs": _read_attrs(f)}


def _read_attrs(f: Any) -> dict:
    as_json = set(json.loads(_scalar(f.attrs.get("json_attrs", "[]"))))
    out: dict[str, Any] = {}
    for key in f.attrs:
        if key in _RESERVED_ATTRS:
            continue
        value = _scalar(f.attrs[key])
        out[key] = json.loads(value) if key in as_json else value
    return out


def _read_workers(g: Any) -> list[dict]:
    keys = json.loads(_scalar(g.attrs["keys"]))
    n = int(_scalar(g.attrs["n_workers"]))
    columns = {k: g[k][()] for k in keys}
    return [{k: columns[k][i].item() for k in keys} for i in range(n)]


def _scalar(value: Any) -> Any:
    """h5py attr value as a plain Python value (bytes decoded, numpy scalars unwrapped)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
