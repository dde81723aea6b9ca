"""Benchmarks: ``python -m mpikanel.bench <subcommand>`` (see ``__main__`` for the list).

Drivers here never import mpi4py; they launch rank-side entry modules (``_*_ranks``)
under mpiexec as subprocesses with timeouts and read one JSON line back from rank 0.
"""
