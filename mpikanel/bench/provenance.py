"""Where a result set came from: ``DIR/provenance.json``, written by ``python -m mpikanel.bench`` itself.

Every subcommand that writes a result set (a module with ``results_dir``) runs through
:func:`recorded`: before it runs, the git commit and whether the tree is clean (``git status
--porcelain``; untracked files under the output directory do not count: they are the results), the
exact command, the UTC date, the MPI library (read by a child interpreter: the bench process
itself never starts MPI), Python/numpy/numba/mpi4py versions, the machine and the load average;
after it, the load average at the end, the exit code and the wall time. A dirty tree is refused
(one line, exit 2) unless ``--allow-dirty`` is given, which records ``dirty: true``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Callable

PROVENANCE = "provenance.json"
REPO_ROOT = Path(__file__).resolve().parents[2]
#: run by a child interpreter (``python -c``): the MPI library without initializing MPI anywhere
MPI_INFO = """
import json, mpi4py, sys
mpi4py.rc.initialize = False
from mpi4py import MPI
print(json.dumps({"mpi": MPI.Get_library_version().replace("\\0", "").strip().splitlines()[0], "mpi4py": mpi4py.__version__,
                  "python": sys.version.split()[0]}))
"""
_SHOWN_PATHS = 50


class DirtyTree(RuntimeError):
    """The working tree has changes (or is no git checkout) and --allow-dirty was not given."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flag every result-writing subcommand shares."""
    parser.add_argument("--allow-dirty", action="store_true",
                        help="run on a working tree with uncommitted changes (recorded as dirty: true in "
                             f"DIR/{PROVENANCE}) instead of refusing")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30,
                          check=True).stdout


def git_state(out: Path | None = None, root: Path | None = None) -> tuple[str | None, list[str] | None]:
    """HEAD's commit and the changed paths (``XY path`` of ``git status --porcelain``), untracked
    files under `out` left out; (None, None) outside a git checkout. `root`: this checkout by default."""
    root = root or REPO_ROOT
    try:
        head = _git(root, "rev-parse", "HEAD").strip()
        entries = _git(root, "status", "--porcelain", "-z").split("\0")
        top = Path(_git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    except (OSError, subprocess.SubprocessError):
        return None, None
    outdir = Path(out).resolve() if out is not None else None
    changed, skip_next = [], False
    for entry in entries:
        if skip_next or not entry:
            skip_next = False
            continue
        code, path = entry[:2], entry[3:]
        skip_next = code[0] in "RC"                 # -z: a rename's original path follows as its own entry
        if code == "??" and outdir is not None and (top / path).resolve().is_relative_to(outdir):
            continue
        changed.append(f"{code} {path}")
    return head, changed


def git_commit(root: Path | None = None) -> str:
    """HEAD, '-dirty' if the tree has changes (untracked files included); 'unknown' outside git."""
    head, changed = git_state(None, root)
    return "unknown" if head is None else head + ("-dirty" if changed else "")


def mpi_info(python: str = sys.executable, timeout: float = 60) -> dict[str, str]:
    """The MPI library, mpi4py and Python of `python`, read by that interpreter without starting MPI."""
    try:
        proc = subprocess.run([python, "-c", MPI_INFO], capture_output=True, text=True, timeout=timeout)
        return json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"mpi": "unknown (mpi4py could not report it)"}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, object]:
    """Cores (all, and usable by this process), memory, CPU model, OS."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else None
    model = None
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), None)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": os.cpu_count(), "cores_usable": usable,
            "memory_gib": None if mem is None else round(mem / 2**30, 1),
            "cpu": model or platform.processor() or platform.machine(), "platform": platform.platform()}


def default_out(stem: str) -> str:
    """``runs/<stem>-<local time>``: where a result set goes without --out."""
    return f"runs/{stem}-{time.strftime('%Y%m%d-%H%M%S')}"


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def start(argv: list[str], out: Path, allow_dirty: bool, root: Path | None = None) -> dict[str, object]:
    """The provenance known before the run; DirtyTree for a tree with changes unless allow_dirty."""
    root = root or REPO_ROOT
    commit, changed = git_state(out, root)
    if not allow_dirty:
        if commit is None:
            raise DirtyTree(f"{root} is not a git checkout (no commit to record); pass --allow-dirty to run anyway")
        if changed:
            raise DirtyTree(f"the working tree has {len(changed)} uncommitted change(s) ({changed[0].strip()}"
                            f"{', ...' if len(changed) > 1 else ''}); commit them or pass --allow-dirty")
    info = mpi_info()
    return {"git_commit": commit, "dirty": None if changed is None else bool(changed),
            "dirty_paths": (changed or [])[:_SHOWN_PATHS], "command": [sys.executable, "-m", "mpikanel.bench", *argv],
            "cwd": os.getcwd(), "date_utc": _now(), "mpi_library": info.get("mpi"),
            "versions": {"python": platform.python_version(), "numpy": _version("numpy"), "numba": _version("numba"),
                         "mpi4py": _version("mpi4py"), "h5py": _version("h5py"), "mpikanel": _version("mpikanel")},
            "machine": machine(), "load_average_start": _load()}


def finish(prov: dict[str, object], out: Path, exit_code: int | None, wall_s: float) -> Path:
    """Add the end's load average, date, exit code and wall time; write ``out/provenance.json``."""
    prov.update(load_average_end=_load(), date_end_utc=_now(), exit_code=exit_code,
                wall_s=round(wall_s, 3))
    out.mkdir(parents=True, exist_ok=True)
    path = out / PROVENANCE
    path.write_text(json.dumps(prov, indent=2) + "\n")
    return path


def recorded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, out: Path,
             argv: list[str]) -> int:
    """Run a result-writing subcommand with its provenance recorded; 2 (one line) on a refused tree."""
    try:
        prov = start(argv, out, args.allow_dirty)
    except DirtyTree as exc:
        print(f"mpikanel bench: error: {exc}", file=sys.stderr)
        return 2
    t0, since = time.perf_counter(), time.time()
    code: int | None = None                 # stays None if the run is interrupted
    try:
        code = run(args)
    finally:
        # an interrupted bench keeps what it wrote (bench mpi writes after every run): say where it came
        # from; a run that wrote nothing (bad flags) leaves the directory, and an older provenance, alone
        if wrote_since(out, since):
            finish(prov, out, code, time.perf_counter() - t0)
    return code


def wrote_since(out: Path, since: float) -> bool:
    """Whether any file under `out` was written at or after `since` (a time.time())."""
    return out.is_dir() and any(p.is_file() and p.stat().st_mtime >= since - 1 for p in out.rglob("*"))
