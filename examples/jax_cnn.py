"""A small LeNet-like CNN in JAX, trained on the parameter server under any sync model.

    pip install -e '.[jax]'
    # a synthetic image problem: 10 classes of 3x3 patterns at random places in noisy 12x12 images
    python examples/jax_cnn.py --write-images shapes.npz
    mpiexec -n 4 python -m mpikanel.train --data shapes.npz --model py:examples/jax_cnn.py:make_model \
        --input-shape 1,12,12 --lr 0.1
    # Fashion-MNIST (Debian's dataset-fashion-mnist), BSP on 4 workers
    mpiexec -n 5 python -m mpikanel.train --data fashion-mnist --model py:examples/jax_cnn.py:make_model \\
        --input-shape 1,28,28 --lr 0.05 --epochs 5 --save-model cnn.h5

Architecture: conv 5x5 (8) - relu - maxpool 2 - conv 5x5 (16) - relu - maxpool 2 - dense 128 - relu -
dense C; about 105k parameters at 28x28. The factory is called FACTORY(n_features, n_classes,
input_shape) by every rank (and again by ``mpikanel.load_model``); JaxModel flattens the
parameter pytree into the server's vector once and takes gradients with jax.value_and_grad.
"""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp

from mpikanel.models import JaxModel

import argparse

CONV = ((8, 5), (16, 5))    # (channels, kernel size) per conv layer
HIDDEN = 128


def _pooled(size: int) -> int:
    """Side after a SAME conv and a 2x2 max pool (floor)."""
    return size // 2


def init_params(shape: tuple[int, int, int], n_classes: int, rng: np.random.Generator) -> dict:
    """He-initialised parameters (float32) for images of shape (C, H, W)."""
    c, h, w = shape
    params: dict = {}
    for i, (out, k) in enumerate(CONV):
        fan_in = c * k * k
        params[f"conv{i}"] = {"w": rng.normal(0, np.sqrt(2 / fan_in), (out, c, k, k)).astype(np.float32),
                              "b": np.zeros(out, np.float32)}
        c, h, w = out, _pooled(h), _pooled(w)
    flat = c * h * w
    params["dense0"] = {"w": rng.normal(0, np.sqrt(2 / flat), (flat, HIDDEN)).astype(np.float32),
                        "b": np.zeros(HIDDEN, np.float32)}
    params["dense1"] = {"w": rng.normal(0, np.sqrt(1 / HIDDEN), (HIDDEN, n_classes)).astype(np.float32),
                        "b": np.zeros(n_classes, np.float32)}
    return params


def apply(params: dict, x: jnp.ndarray) -> jnp.ndarray:
    """Logits (rows, classes) of images x (rows, C, H, W)."""
    for i in range(len(CONV)):
        p = params[f"conv{i}"]
        x = jax.lax.conv_general_dilated(x, p["w"], (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        x = jax.nn.relu(x + p["b"][None, :, None, None])
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    x = x.reshape(x.shape[0], -1)
    x = jax.nn.relu(x @ params["dense0"]["w"] + params["dense0"]["b"])
    return x @ params["dense1"]["w"] + params["dense1"]["b"]


def cross_entropy(logits: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
    """Mean softmax cross-entropy of integer labels y."""
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None].astype(jnp.int32), axis=1))


def make_model(n_features: int, n_classes: int, input_shape: tuple[int, ...] | None) -> JaxModel:
    """The CNN for rows of n_features seen as input_shape (C, H, W); a square 1-channel image if None."""
    if input_shape is None:
        side = int(round(n_features ** 0.5))
        if side * side != n_features:
            raise ValueError(f"{n_features} features are no square image; give --input-shape C,H,W")
        input_shape = (1, side, side)
    if len(input_shape) != 3:
        raise ValueError(f"input shape must be C,H,W, got {input_shape}")
    shape = tuple(int(s) for s in input_shape)
    params = init_params(shape, n_classes, np.random.default_rng(0))
    return JaxModel(apply, params, cross_entropy,
                    init=lambda d, C, rng: init_params(shape, n_classes, rng),
                    description=f"LeNet-like CNN on {'x'.join(map(str, shape))} images")


def synthetic_images(rows: int, side: int = 12, n_classes: int = 10, noise: float = 0.3,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of flattened side x side images: class k is its own random 3x3 pattern, placed anywhere, in noise."""
    rng = np.random.default_rng(seed)
    patterns = rng.choice([-1.0, 1.0], size=(n_classes, 3, 3))
    y = rng.integers(0, n_classes, rows)
    X = rng.normal(0.0, noise, (rows, side, side))
    at = rng.integers(0, side - 2, (rows, 2))
    for i in range(rows):
        r, c = at[i]
        X[i, r:r + 3, c:c + 3] += patterns[y[i]]
    return X.reshape(rows, side * side).astype(np.float32), y.astype(np.int64)


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description="Write the synthetic image problem as an .npz (X, y).")
    cli.add_argument("--write-images", metavar="NPZ", required=True)
    cli.add_argument("--rows", type=int, default=20000)
    cli.add_argument("--side", type=int, default=12)
    cli.add_argument("--seed", type=int, default=0)
    a = cli.parse_args()
    X, y = synthetic_images(a.rows, a.side, seed=a.seed)
    np.savez(a.write_images, X=X, y=y)
    print(f"{a.write_images}: {a.rows} images {a.side}x{a.side}, 10 classes")
