"""A user-defined model trained through the library API: binary squared-hinge linear classifier.

    mpiexec -n 3 python examples/custom_model.py                      # BSP, synthetic 2-class data
    mpiexec -n 3 python examples/custom_model.py --sync asp --data train.svm   # any sync model, CSR data

The user writes numba kernels with the documented signatures (mpikanel/kernels/custom.py):
  grad(w, X, y, idx, n_classes, out)                         adds the mean minibatch gradient into out
  loss_sum(w, X, y, n_classes) -> float                      sum of per-row losses
and, optionally, the CSR variants (X -> indptr, indices, data, d) so libsvm data works too.
The library wraps them into SGD steps (with L2 on the first n_weights parameters) and any sync model.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
from numba import njit

from mpikanel.comm import environment

environment.prepare_environment()   # before mpi4py starts MPI (heavy yield, one thread per rank)

import mpikanel  # noqa: E402
from mpikanel.kernels import register_model  # noqa: E402

# Parameters: w[:d] weights, w[d] bias (a linear layout, so the library's default predict applies).
# No cache=True needed: register_model compiles its own uncached copy of each kernel, so this file
# can run as __main__, via runpy or be imported, all sharing one NUMBA_CACHE_DIR.
# Per-row loss: max(0, 1 - t*z)^2 with t = 2y - 1 in {-1, +1} and z = w.x + b.


@njit(fastmath=True)
def sqhinge_grad(w, X, y, idx, n_classes, out):
    """Mean squared-hinge gradient over rows idx of dense X, added into out."""
    d = X.shape[1]
    inv = 1.0 / idx.shape[0]
    for i in idx:
        t = 2.0 * y[i] - 1.0
        z = w[d]
        for j in range(d):
            z += w[j] * X[i, j]
        m = 1.0 - t * z
        if m > 0.0:
            c = -2.0 * m * t * inv
            for j in range(d):
                out[j] += c * X[i, j]
            out[d] += c


@njit(fastmath=True)
def sqhinge_loss(w, X, y, n_classes):
    """Sum over all rows of dense X of the squared hinge loss."""
    d = X.shape[1]
    total = 0.0
    for i in range(X.shape[0]):
        z = w[d]
        for j in range(d):
            z += w[j] * X[i, j]
        m = 1.0 - (2.0 * y[i] - 1.0) * z
        if m > 0.0:
            total += m * m
    return total


@njit(fastmath=True)
def sqhinge_grad_csr(w, indptr, indices, data, d, y, idx, n_classes, out):
    """CSR variant of sqhinge_grad."""
    inv = 1.0 / idx.shape[0]
    for i in idx:
        t = 2.0 * y[i] - 1.0
        z = w[d]
        for p in range(indptr[i], indptr[i + 1]):
            z += w[indices[p]] * data[p]
        m = 1.0 - t * z
        if m > 0.0:
            c = -2.0 * m * t * inv
            for p in range(indptr[i], indptr[i + 1]):
                out[indices[p]] += c * data[p]
            out[d] += c


@njit(fastmath=True)
def sqhinge_loss_csr(w, indptr, indices, data, d, y, n_classes):
    """CSR variant of sqhinge_loss."""
    total = 0.0
    for i in range(indptr.shape[0] - 1):
        z = w[d]
        for p in range(indptr[i], indptr[i + 1]):
            z += w[indices[p]] * data[p]
        m = 1.0 - (2.0 * y[i] - 1.0) * z
        if m > 0.0:
            total += m * m
    return total


def n_params(n_features: int, n_classes: int) -> int:
    """d weights + 1 bias."""
    return n_features + 1


def n_weights(n_features: int, n_classes: int) -> int:
    """L2 applies to the d weights, not the bias."""
    return n_features


# csr_keys: a linear layout whose CSR gradient touches only the rows' features and the bias, so on
# libsvm data workers push only the keys their steps change and apply L2 lazily (docs/kernels.md)
register_model("sqhinge", sqhinge_grad, sqhinge_loss, n_params, n_weights=n_weights,
               grad_csr=sqhinge_grad_csr, loss_sum_csr=sqhinge_loss_csr, min_classes=2, max_classes=2,
               csr_keys=True, replace=True)


def main() -> int:
    """Train the registered model on every rank of COMM_WORLD and print the summary on rank 0."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sync", default="bsp")
    p.add_argument("--data", default="synthetic")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--synthetic-rows", type=int, default=20_000)
    p.add_argument("--summary-json", default=None)
    args = p.parse_args()
    from mpi4py import MPI

    from mpikanel.train import train

    comm = MPI.COMM_WORLD
    config = {"model": "sqhinge", "sync": args.sync, "data": args.data, "epochs": args.epochs, "lr": args.lr,
              "synthetic_rows": args.synthetic_rows, "synthetic_classes": 2, "summary_json": args.summary_json}
    try:
        train(config, comm=comm)
    except mpikanel.InputError as exc:
        if comm.Get_rank() == 0:
            print(f"custom_model: error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # noqa: BLE001 - one failing rank must end the job
        print(f"custom_model: rank {comm.Get_rank()} failed: {exc!r}", file=sys.stderr, flush=True)
        comm.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
