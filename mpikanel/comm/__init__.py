"""MPI transport: the only package (with the entry points) that imports mpi4py.

Importing it sets MPICH defaults that matter on oversubscribed nodes before MPI
initializes; see :func:`mpikanel.comm.environment.prepare_environment`.
"""
from .environment import prepare_environment

prepare_environment()
