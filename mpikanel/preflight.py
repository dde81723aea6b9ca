"""Before anything model-sized is allocated: does the run fit in this machine's memory?

Pure arithmetic over sizes and a memory figure passed in (:func:`machine_memory` reads it), so a
feature index of 10^11 in a libsvm file is one line naming that line, not a MemoryError from deep
inside numpy after the data was read.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError

#: model-sized float64 vectors one rank holds at once: a worker's parameters, local and base copies,
#: the state at its last push, its push and reply frames and its produced-delta sum; a server's
#: parameters, start parameters, reply snapshots and loss-curve snapshots are about as many
COPIES_PER_RANK = 8
BYTES_PER_PARAM = 8


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit where lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def check_fits(model: str, n_params: int, shape: str, cause: str, ranks_here: int, data_bytes_per_rank: int,
               memory: int) -> None:
    """InputError (one line, naming the size and its cause) unless `ranks_here` ranks, each holding
    COPIES_PER_RANK copies of an `n_params` model and its share of the data, fit in `memory` bytes."""
    per_copy = n_params * BYTES_PER_PARAM
    per_rank = COPIES_PER_RANK * per_copy + data_bytes_per_rank
    need = ranks_here * per_rank
    if need <= memory:
        return
    data = f" + {human_bytes(data_bytes_per_rank)} of data" if data_bytes_per_rank else ""
    raise InputError(f"the run does not fit in memory: {model} on {shape} has {n_params:,} parameters "
                     f"({human_bytes(per_copy)} a copy); {ranks_here} rank{'s' if ranks_here > 1 else ''} here x "
                     f"({COPIES_PER_RANK} copies{data}) need {human_bytes(need)}, this machine has "
                     f"{human_bytes(memory)} (cause: {cause})")
