"""``bench yield``: CPU a rank burns while blocked in MPI_Recv, with the project default and with heavy-yield off."""
from __future__ import annotations

import argparse
import sys

from .launch import HEAVY_YIELD, MpiexecNotFound, RankRunError, rank_env, run_ranks

RANK_MODULE = "mpikanel.bench._yield_ranks"


def blocked_result(heavy_yield: bool | None, timeout: float = 60.0, block_s: float = 1.5, how: str = "recv") -> dict:
    """Rank 1's JSON report after blocking ~block_s in Recv (`how` "loop": mpikanel's wait loop);
    heavy_yield None = project default."""
    return run_ranks(2, RANK_MODULE, [str(block_s), how], rank_env(heavy_yield), timeout).results[0]


def blocked_cpu_fraction(heavy_yield: bool | None, timeout: float = 60.0, block_s: float = 1.5) -> float:
    """CPU seconds / wall seconds of a rank blocked ~block_s in MPI_Recv (None: project default env)."""
    return float(blocked_result(heavy_yield, timeout, block_s)["cpu_fraction"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the yield check."""
    parser.add_argument("--seconds", type=float, default=1.5, help="how long rank 1 stays blocked")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per launch")


def run(args: argparse.Namespace) -> int:
    """Print the blocked rank's CPU fraction under the project default and with heavy-yield off."""
    cases = [("project default (unset; mpikanel.comm sets it)", None), (f"{HEAVY_YIELD}=0", False)]
    try:
        for label, heavy_yield in cases:
            r = blocked_result(heavy_yield, args.timeout, args.seconds)
            print(f"{label:<48} {HEAVY_YIELD}={r['heavy_yield'] or 'unset'} in rank: blocked {r['wall_s']:.2f} s wall, "
                  f"{r['cpu_s']:.2f} s CPU -> CPU fraction {r['cpu_fraction']:.3f} "
                  f"(context switches: {r['voluntary_switches']} voluntary, {r['involuntary_switches']} involuntary; "
                  f"load {r['load_1min']:.1f})")
    except (MpiexecNotFound, RankRunError) as exc:
        print(f"mpikanel bench: error: {exc}", file=sys.stderr)
        return 2
    return 0
