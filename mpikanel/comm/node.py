"""Which ranks of a communicator share this rank's node (and so its memory)."""
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
