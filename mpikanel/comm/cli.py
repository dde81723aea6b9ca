"""The shared shape of mpikanel's MPI command-line entry points: one place for exit codes."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Callable, NoReturn

from ..config import TrainConfig, config_from_args
from ..errors import InputError, Interrupted, NothingLeft, TrainingError
from . import environment


def run_cli(prog: str, body: Callable[[TrainConfig, object], int], argv: list[str] | None = None,
            command: str = "python -m mpikanel.train", description: str | None = None) -> int:
    """Parse flags, run body(config, COMM_WORLD) and map failures to exit codes.

    `command` and `description` head --help (mpikanel.train's unless given).

    2 for bad input (raised identically on every rank during set-up, printed once by rank 0); 0
    with one line when a resumed checkpoint has nothing left to do;
    Ctrl-C (SIGINT) without checkpoints, or any stop signal that body reports as Interrupted: one
    line from rank 0 and an abort with code 128 + signum (ranks blocked in MPI would not see the
    signal); any other exception prints a message naming the rank (with a traceback unless it is an
    expected TrainingError) and aborts every rank, so a failure never leaves a job hanging.
    """
    environment.prepare_environment()
    guessed_rank = environment.env_rank()
    try:
        config = config_from_args(argv, print_errors=guessed_rank == 0, prog=command, description=description)
    except InputError as exc:
        if guessed_rank == 0:
            print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    from mpi4py import MPI

    world = MPI.COMM_WORLD

    def interrupted(signum: int = signal.SIGINT) -> None:
        # Ctrl-C reaches every rank: rank 0 says it once and aborts (peers blocked inside MPI never
        # return to Python to see the signal); a rank that was not ended by then says it itself,
        # one rank after another, in case rank 0's interrupt was lost
        rank = world.Get_rank()
        if rank:
            time.sleep(2.0 + 0.5 * rank)
        name = signal.Signals(signum).name
        said = "interrupted" if signum == signal.SIGINT else f"stopped by {name} during start-up"
        print(f"{prog}: {said}", file=sys.stderr, flush=True)
        world.Abort(128 + signum)

    def lost_interrupt(unraisable, previous=sys.unraisablehook) -> None:
        # a Ctrl-C landing in a ctypes callback (numba compiling, for one) is printed and dropped
        # by Python instead of raised: act on it from a thread, without the traceback
        if issubclass(unraisable.exc_type, KeyboardInterrupt):
            threading.Thread(target=interrupted, daemon=True).start()
        else:
            previous(unraisable)

    sys.unraisablehook = lost_interrupt
    try:
        return body(config, world)
    except InputError as exc:
        if world.Get_rank() == 0:
            print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except NothingLeft as exc:
        if world.Get_rank() == 0:
            print(f"{prog}: {exc}", flush=True)
        return 0
    except KeyboardInterrupt:
        interrupted()
        return 130
    except Interrupted as exc:
        interrupted(exc.signum)
        return 128 + exc.signum
    except BaseException as exc:  # noqa: BLE001 - any failure must end the whole job
        detail = "" if isinstance(exc, TrainingError) else "".join(traceback.format_exception(exc))
        print(f"{detail}{prog}: rank {world.Get_rank()} failed: {type(exc).__name__}: {exc}; "
              "aborting all ranks", file=sys.stderr, flush=True)
        world.Abort(1)
        return 1


def end_rank(code: int | None) -> NoReturn:
    """Exit this rank's process with `code` at once: standard streams flushed, MPI finalized, no
    interpreter teardown. Once numba's kernels are loaded, Python's teardown of its modules costs a
    rank about half a second of CPU after the work is done (the entry points' `__main__` only: a
    library caller's process goes on)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken pipe: nothing more can reach it
            pass
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(0 if code is None else int(code))
