"""The transport-free engine: every decision of the server and the workers, with time passed in.

``server_core`` and ``worker_core`` run unchanged under MPI (mpikanel.comm) and under the
virtual clock of the simulator (mpikanel.sim).
"""
