"""What the parameter-server path costs a JAX network per step, against JAX training alone.

    python examples/jax_overhead.py [--steps 200] [--batch 64]

Times, on one process and one thread (XLA_FLAGS as a rank sets it), per SGD step of the example
CNN (about 105k parameters, 1x28x28 inputs):
  alone     JAX by itself: params stay a JAX pytree, one jitted step computes the gradient and
            applies w -= lr*(g + l2*w); the minibatch is gathered from a numpy array as a rank does
  adapter   the same step through mpikanel: JaxModel (float64 vector -> float32 buffer, jitted
            value_and_grad, gradient as a numpy view) and the library's update of the float64 vector
  ps        the worker's and server's vector work per push under BSP: delta = local - base, the
            produced-work tally, the server's merge, and the write-back of the reply
The MPI transfer itself is measured end to end (``mpiexec -n 2 ... --max-steps N``: comm_s per step).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import jax  # noqa: E402

import jax_cnn  # noqa: E402
from mpikanel.kernels.base import bind  # noqa: E402


def per_step(fns: dict, steps: int, repeats: int = 5) -> dict[str, float]:
    """Best-of-repeats mean seconds per call of each fn over `steps` calls, the fns interleaved
    round by round so that a neighbour's load hits them alike (after one warm call each)."""
    for fn in fns.values():
        fn()
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(steps):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t) / steps)
    return best


def main() -> None:
    """Print the three per-step times and the overhead shares."""
    cli = argparse.ArgumentParser()
    cli.add_argument("--steps", type=int, default=200)
    cli.add_argument("--batch", type=int, default=64)
    a = cli.parse_args()
    rng = np.random.default_rng(0)
    X = rng.random((4096, 784), dtype=np.float32)
    y = rng.integers(0, 10, 4096).astype(np.int32)
    lr, l2, shape = 1e-3, 1e-4, (1, 28, 28)    # small: the timed loops must not diverge

    params = jax_cnn.init_params(shape, 10, rng)

    @jax.jit
    def jax_step(p, xb, yb):
        g = jax.grad(lambda q: jax_cnn.cross_entropy(jax_cnn.apply(q, xb), yb))(p)
        return jax.tree_util.tree_map(lambda w, gw: w - lr * (gw + l2 * w), p, g)

    state = {"p": jax.tree_util.tree_map(jax.numpy.asarray, params)}

    def alone() -> None:
        idx = rng.integers(0, 4096, a.batch)
        state["p"] = jax_step(state["p"], X[idx].reshape(-1, *shape), y[idx])
        jax.block_until_ready(state["p"])

    gm = jax_cnn.make_model(784, 10, shape)
    model = gm.as_model("py:jax_cnn", 784, 10, shape)
    bound = bind(model, X, y, 10)
    w = model.init(0, 784, 10, rng)
    scratch = bound.scratch()

    def adapter() -> None:
        bound.step(w, rng.integers(0, 4096, a.batch), lr, l2, scratch)

    n = w.size
    # the push's vectors, apart from the adapter's w (the values do not matter to the timing)
    local, base, server, produced, delta, at_send = (np.zeros(n) for _ in range(6))

    def ps() -> None:
        np.subtract(local, base, out=delta)   # worker: the push's delta
        produced.__iadd__(delta)              # worker: work produced (the no-lost-work check)
        server.__iadd__(delta)                # server: merge
        local.__isub__(at_send)               # worker: write back the reply (local += params - at_send)
        local.__iadd__(server)
        base[:] = server

    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(a.steps):
        alone()
    cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    t = per_step({"alone": alone, "adapter": adapter, "ps": ps}, a.steps)
    t_alone, t_adapter, t_ps = t["alone"], t["adapter"], t["ps"]
    print(f"CNN: {n:,} parameters, batch {a.batch}, best of 5 x {a.steps} steps, load {os.getloadavg()}")
    print(f"alone    {t_alone * 1e3:8.3f} ms/step  (CPU time / wall {cpu_share:.2f}: threads busy)")
    print(f"adapter  {t_adapter * 1e3:8.3f} ms/step  ({(t_adapter - t_alone) / t_alone:+.1%} vs alone)")
    print(f"ps       {t_ps * 1e3:8.3f} ms/push  ({t_ps / t_alone:.1%} of a step alone)")
    print(f"total    {(t_adapter + t_ps - t_alone) / t_alone:+.1%} of a step alone (before MPI transfer)")


if __name__ == "__main__":
    main()
