"""``python -m mpikanel.sim --workers N [mpikanel.train flags]``: the same run on a virtual clock."""
from __future__ import annotations

import sys

from ..config import build_parser, config_from_namespace
from ..errors import InputError
from .models import NetworkModel, ServerModel

SIM_FLAGS = ("workers", "replay", "sim_latency", "sim_bandwidth", "sim_server_push_s",
             "sim_server_bandwidth")


def parser():
    """mpikanel.train's parser plus the simulator's own flags."""
    p = build_parser(prog="python -m mpikanel.sim")
    p.description = ("Simulate a training run with N workers on a virtual clock: the same server core, "
                     "sync policies, worker schedules and numba kernels on real data shards as "
                     "mpikanel.train, in one process. Time comes from the models below, not the machine.")
    g = p.add_argument_group("simulator")
    g.add_argument("--workers", type=int, default=4, help="simulated workers (default: 4)")
    g.add_argument("--replay", metavar="METRICS", default=None,
                   help="per-worker step times (compute + injected) from a real run's --metrics file")
    g.add_argument("--sim-latency", type=float, default=NetworkModel.latency_s, metavar="SECONDS",
                   help=f"one-way message latency (default: {NetworkModel.latency_s:g})")
    g.add_argument("--sim-bandwidth", type=float, default=NetworkModel.bandwidth, metavar="BYTES_PER_S",
                   help=f"link bandwidth (default: {NetworkModel.bandwidth:g})")
    g.add_argument("--sim-server-push-s", type=float, default=ServerModel.push_s, metavar="SECONDS",
                   help=f"server seconds per push besides the bytes (default: {ServerModel.push_s:g})")
    g.add_argument("--sim-server-bandwidth", type=float, default=ServerModel.bandwidth, metavar="BYTES_PER_S",
                   help=f"bytes per second the server applies and copies (default: {ServerModel.bandwidth:g})")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI: parse, simulate, print the summary; 2 on bad input."""
    from .run import SimOptions, simulate

    ns = vars(parser().parse_args(argv))
    sim = {k: ns.pop(k) for k in SIM_FLAGS if k in ns}
    try:
        if not (sim["sim_latency"] >= 0 and sim["sim_bandwidth"] > 0 and sim["sim_server_push_s"] >= 0
                and sim["sim_server_bandwidth"] > 0):
            raise InputError("--sim-latency and --sim-server-push-s must be >= 0, bandwidths > 0")
        config = config_from_namespace(ns)
        simulate(config, SimOptions(sim["workers"], None, sim["replay"],
                                    NetworkModel(sim["sim_latency"], sim["sim_bandwidth"]),
                                    ServerModel(sim["sim_server_push_s"], sim["sim_server_bandwidth"])))
    except InputError as exc:
        print(f"mpikanel.sim: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
