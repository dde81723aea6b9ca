"""Which ranks of a communicator share this rank's node (and so its memory), and which node each rank is on."""
from __future__ import annotations

from typing import Any


def ranks_on_node(comm: Any) -> int:
    """How many ranks of `comm` run on this rank's node; collective over `comm`."""
    from mpi4py import MPI

    here = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return here.Get_size()
    finally:
        here.Free()


def processor_names(comm: Any) -> list[str]:
    """Every rank's MPI processor name (its host), by rank; collective over `comm` (start-up only: pickled)."""
    from mpi4py import MPI

    return comm.allgather(MPI.Get_processor_name())


def node_ranks(names: list[str]) -> dict[str, list[int]]:
    """The ranks on each processor name, names in order of their first rank."""
    out: dict[str, list[int]] = {}
    for rank, name in enumerate(names):
        out.setdefault(name, []).append(rank)
    return out
