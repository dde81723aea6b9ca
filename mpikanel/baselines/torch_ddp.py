"""PyTorch's own data-parallel SGD, ``torch.distributed`` over gloo with DistributedDataParallel:
the peer a user would pick instead of the parameter server. Bench-only, it needs the ``[peer]``
extra (``pip install 'mpikanel[peer]'``: torch, CPU build).

Usage: ``mpiexec -n R python -m mpikanel.baselines.torch_ddp [mpikanel.train's flags]``
(the same flags as :mod:`mpikanel.baselines.allreduce_sgd`; models ``softmax`` and ``mlp`` on
dense data).

mpiexec only starts the processes: each rank takes its rank and the world size from MPI
(mpi4py), rank 0 opens a ``torch.distributed.TCPStore`` on a free port (127.0.0.1 when all ranks
share a host) and broadcasts the port, and every rank joins a gloo process group through it. The
model is a ``torch.nn.Module`` (softmax regression, or the one-hidden-layer MLP with ReLU/tanh) in
float64 whose parameters are views into the project's flat parameter vector, in its layout, so it
starts from the same parameters as every other run (zeros, or the MLP's seeded Glorot weights)
and is evaluated by the same kernels. It is wrapped in ``DistributedDataParallel`` and trained
with ``torch.optim.SGD`` (L2 as weight decay on the weights, not the biases, like the kernels).
The ranks use the allreduce baseline's data shards, data order (the same BatchCursor and seeds),
shared sample budget, rate schedule, heterogeneity injection and ``--step-time`` pacing (the
parameter server workers' :class:`mpikanel.worker_loop.Pacer`), validation split, metrics file
and summary keys (:mod:`mpikanel.baselines.common`); ``sync`` in the summary is ``torch-ddp``.

**Rate.** DDP averages the ranks' gradients, so ``--lr`` is torch's rate on the *mean*: R ranks
at ``--lr R x a`` take the allreduce baseline's step at ``--lr a`` (which adds the ranks'
deltas); ``bench sync`` scales its grid by the trainers as for local SGD. A partial minibatch
(an epoch's last rows) scales its rank's loss by rows/--batch-size, the kernels' rule.

**Time.** DDP's allreduce runs inside ``backward()``; a communication hook wraps DDP's default
allreduce (the same allreduce and division by the world size) only to note when the local
gradient is ready: there any ``--link-delay``/``--link-bandwidth`` is slept, and the rest of the
step until ``backward()`` returns is the Allreduce's time (split into comm and wait over the ranks
as in the other baselines). A step's compute is its forward, backward and optimizer step without
that; the pacer sleeps after the optimizer step. ``torch.set_num_threads(--threads)`` (default 1)
per rank, and one inter-op thread.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from datetime import timedelta
from typing import Any

import numpy as np

import mpikanel.comm  # noqa: F401  - MPICH heavy-yield and thread defaults before MPI starts

from ..config import TrainConfig  # noqa: E402
from ..errors import InputError, TrainingError  # noqa: E402
from .common import PACING_HELP  # noqa: E402

KIND = "torch-ddp"
#: the kernels' models this peer has as torch modules
TORCH_MODELS = ("softmax", "mlp")
MISSING = ("PyTorch is not installed; torch-ddp is a bench-only peer: pip install 'mpikanel[peer]' "
           "(torch==2.13.0, CPU build)")
DESCRIPTION = ("PyTorch DistributedDataParallel SGD over gloo, the peer users would pick instead (needs the "
               "[peer] extra): every rank trains a torch copy of the model (softmax or mlp) and DDP averages "
               "the gradients each step, so R ranks at --lr R x a step like allreduce_sgd at --lr a. Takes "
               "mpikanel.train's flags (--sync and the server's are ignored). " + PACING_HELP)


def torch_available() -> bool:
    """Whether PyTorch can be imported here (the [peer] extra)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


# ---------------------------------------------------------------- the models as torch modules

def make_net(model_name: str, flat: np.ndarray, n_features: int, n_classes: int, activation: str = "relu"):
    """A torch module of the kernels' `model_name` whose parameters are float64 views into `flat`
    (the kernels' layout, updated in place by training); returns (module, weights, biases)."""
    import torch
    from torch import nn

    from ..layout import mlp_views

    if flat.dtype != np.float64 or not flat.flags.c_contiguous:
        raise ValueError("the flat parameter vector must be C-contiguous float64")
    d, C = n_features, n_classes

    def param(view: np.ndarray) -> nn.Parameter:
        return nn.Parameter(torch.from_numpy(view))

    if model_name == "softmax":
        class Softmax(nn.Module):
            """z = X W + b with W^T stored (d, C) row-major, then b (the kernels' layout)."""

            def __init__(self) -> None:
                super().__init__()
                self.W = param(flat[:d * C].reshape(d, C))
                self.b = param(flat[d * C:d * C + C])

            def forward(self, x):
                return torch.addmm(self.b, x, self.W)

        net = Softmax()
        return net, [net.W], [net.b]
    if model_name == "mlp":
        act = {"relu": torch.relu, "tanh": torch.tanh}[activation]

        class Mlp(nn.Module):
            """a = act(X W1 + b1), z = a W2^T + b2 with W1 (d, H), W2 (C, H), b1, b2 (the kernels' layout)."""

            def __init__(self) -> None:
                super().__init__()
                W1, W2, b1, b2 = mlp_views(flat, d, C)
                self.W1, self.W2, self.b1, self.b2 = param(W1), param(W2), param(b1), param(b2)

            def forward(self, x):
                return torch.addmm(self.b2, act(torch.addmm(self.b1, x, self.W1)), self.W2.t())

        net = Mlp()
        return net, [net.W1, net.W2], [net.b1, net.b2]
    raise InputError(f"torch-ddp has the models {', '.join(TORCH_MODELS)}, not {model_name!r}")


def flat_gradient(params: list, flat: np.ndarray) -> np.ndarray:
    """The parameters' ``.grad`` laid out like `flat`, the vector the parameters are views into."""
    out = np.zeros_like(flat)
    for p in params:
        start = (p.data_ptr() - flat.ctypes.data) // flat.itemsize
        out[start:start + p.numel()] = p.grad.detach().numpy().ravel()
    return out


def batch_loss(net, X, y, idx: np.ndarray, batch_size: int):
    """Mean cross-entropy of rows `idx` of the float32 tensor X (labels y, int64), in float64,
    scaled by rows/batch_size for a partial minibatch (the kernels' rate rule)."""
    import torch
    from torch.nn import functional as F

    rows = torch.from_numpy(idx)
    xb = X.index_select(0, rows).to(torch.float64)
    return F.cross_entropy(net(xb), y.index_select(0, rows)) * min(1.0, idx.size / batch_size)


# ---------------------------------------------------------------- the process group

def init_group(comm: Any, timeout_s: float = 600.0):
    """Join every rank to a gloo process group: rank 0's TCPStore on a free port, announced over MPI."""
    import torch.distributed as dist

    size, rank = comm.Get_size(), comm.Get_rank()
    names = comm.allgather(socket.gethostname())
    one_host = len(set(names)) == 1
    host = "127.0.0.1" if one_host else names[0]
    if one_host:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = timedelta(seconds=timeout_s)
    store = None
    if rank == 0:
        store = dist.TCPStore(host, 0, size, is_master=True, timeout=timeout, wait_for_workers=False)
    port = comm.bcast(store.port if store is not None else None, root=0)
    if store is None:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)
    return store


class AllreduceTiming:
    """The state of :func:`timed_allreduce`: when this step's first bucket was ready, the link delay slept."""

    def __init__(self, injector: Any, n_params: int) -> None:
        self.injector, self.n_params = injector, n_params
        self.ready: tuple[float, float] | None = None     # (perf_counter, thread_time) at the first bucket
        self.link_s = 0.0

    def start_step(self) -> None:
        self.ready, self.link_s = None, 0.0


def timed_allreduce(state, bucket):     # no annotations: DDP checks them against dist.GradBucket
    """A DDP communication hook: DDP's default allreduce (sum, then / world size) after noting when
    the step's first bucket of local gradients is ready and sleeping the injected link delay there."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from ..hetero import sleep_for

    if state.ready is None:
        state.ready = (time.perf_counter(), time.thread_time())
        state.link_s = state.injector.link_delay(8 * state.n_params)
        sleep_for(state.link_s)
    return allreduce_hook(None, bucket)


# ---------------------------------------------------------------- training

def train(config: TrainConfig, comm: Any) -> dict | None:
    """DDP SGD on every rank; returns the summary on rank 0 (None elsewhere)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from ..kernels import set_threads
    from ..session import start_params
    from .common import finish_ranks, rank_loop, setup

    if config.model not in TORCH_MODELS:
        raise InputError(f"torch-ddp has the models {', '.join(TORCH_MODELS)}, not {config.model!r}")
    rank = comm.Get_rank()
    torch.set_num_threads(config.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:        # already set, or parallel work already ran in this process
        pass
    numba_threads = set_threads(config.threads)
    s = setup(config, comm)
    if s.shard.sparse:
        raise InputError("torch-ddp trains on dense data (.npz/.h5 or --data synthetic), not CSR rows")
    loop = rank_loop(config, comm, s)
    plan, n_steps, injector, pacer, cursor, recorder, stats = (loop.plan, loop.n_steps, loop.injector, loop.pacer,
                                                               loop.cursor, loop.recorder, loop.stats)
    n_features = s.shard.X.shape[1]
    n_params = s.shard.model.n_params(n_features, s.n_classes)
    flat = start_params(s.shard.model, n_params, n_features, s.n_classes, config.seed)
    net, weights, biases = make_net(config.model, flat, n_features, s.n_classes, config.activation or "relu")
    init_group(comm)
    try:
        ddp = DistributedDataParallel(net)
        hook = AllreduceTiming(injector, n_params)
        ddp.register_comm_hook(hook, timed_allreduce)
        optimizer = torch.optim.SGD([{"params": weights, "weight_decay": config.l2},
                                     {"params": biases, "weight_decay": 0.0}], lr=config.lr)
        X, y = torch.from_numpy(s.shard.X), torch.from_numpy(s.shard.y.astype(np.int64))
        reduce_s: list[float] = []
        load_before = os.getloadavg()[0]
        comm.Barrier()
        dist.barrier()
        t_start = time.perf_counter()
        if recorder is not None:
            recorder.maybe_snapshot(0.0, flat, 0)
        for step in range(1, n_steps + 1):
            idx = cursor.next()
            # the schedule's rate of a full batch: the same on every rank (DDP keeps one model)
            rate = plan.rate_for(config.batch_size, (step - 0.5) / n_steps)
            for group in optimizer.param_groups:
                group["lr"] = rate
            t0, c0 = time.perf_counter(), time.thread_time()
            hook.start_step()
            loss = batch_loss(ddp, X, y, idx, config.batch_size)
            loss.backward()
            t1, c1 = time.perf_counter(), time.thread_time()
            optimizer.step()
            optimizer.zero_grad()
            t2, c2 = time.perf_counter(), time.thread_time()
            if hook.ready is None:
                raise TrainingError(f"rank {rank}: DDP ran no allreduce at step {step}")
            ready_t, ready_c = hook.ready
            span = t1 - ready_t - hook.link_s
            compute, slept, injected = pacer.finish_step((ready_t - t0) + (t2 - t1), (ready_c - c0) + (c2 - c1),
                                                         int(idx.size))
            if not np.isfinite(flat.sum()):
                raise TrainingError(f"rank {rank} produced non-finite parameters at step {step} "
                                    f"(learning rate {config.lr} too high?)")
            reduce_s.append(span)
            stats["steps"] += 1
            stats["pushes"] += 1
            stats["samples"] += int(idx.size)
            stats["compute_s"] += compute
            stats["injected_s"] += injected + hook.link_s
            stats["pacing_s"] += slept - injected
            if recorder is not None:
                recorder.maybe_snapshot(time.perf_counter() - t_start, flat, stats["pushes"])
        wall = time.perf_counter() - t_start
        dist.barrier()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    stats["paced_s"], stats["pacing_missed"] = pacer.paced_s, pacer.missed
    if recorder is not None:
        recorder.final(wall, flat, stats["pushes"])
    stats["load_avg"] = (load_before, os.getloadavg()[0])
    extra = {"framework": {"torch": torch.__version__, "backend": "gloo", "ddp": True,
                           "torch_threads": torch.get_num_threads(), "numba_threads": numba_threads["numba"]}}
    return finish_ranks(config, comm, s, KIND, flat, recorder, wall, stats, np.asarray(reduce_s), extra)


def main(argv: list[str] | None = None) -> int:
    """CLI: 2 without PyTorch or on bad input (every rank), MPI Abort naming the rank on any failure."""
    from ..comm import environment
    from ..comm.cli import run_cli

    args = sys.argv[1:] if argv is None else argv
    if not torch_available() and not {"-h", "--help"} & set(args):
        if environment.env_rank() == 0:
            print(f"torch_ddp: error: {MISSING}", file=sys.stderr, flush=True)
        return 2

    def body(config, world) -> int:
        train(config, world)
        return 0

    return run_cli("torch_ddp", body, argv, command="python -m mpikanel.baselines.torch_ddp",
                   description=DESCRIPTION)


if __name__ == "__main__":
    sys.exit(main())
