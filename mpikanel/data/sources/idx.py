"""Fashion-MNIST: IDX files, gzip'd or plain."""

from __future__ import annotations

import gzip
import os
import zlib

import numpy as np

from mpikanel.errors import InputError

from .base import Source

DEFAULT_FASHION_DIR = "/usr/share/datasets/fashion-mnist"
_IDX_UBYTE = 0x08


class FashionMnist(Source):
    """Fashion-MNIST IDX files (gzip'd or plain); pixels scaled to [0, 1]."""

    def __init__(self, directory: str, part: str) -> None:
        self.images = _find_idx(directory, f"{part}-images-idx3-ubyte")
        labels_path = _find_idx(directory, f"{part}-labels-idx1-ubyte")
        self.name = self.images
        self.description = f"fashion-mnist {part} ({directory})"
        self.fixed_classes = tuple(range(10))
        dims, self.header_bytes = _idx_header(self.images, 3)
        self.n_rows = dims[0]
        self.n_features = dims[1] * dims[2]
        self.labels = _idx_read_all(labels_path, 1)
        if len(self.labels) != self.n_rows:
            raise InputError(
                f"{labels_path}: has {len(self.labels)} labels "
                f"but {self.images} has {self.n_rows} images"
            )
        if self.labels.size and self.labels.max() > 9:
            i = int(np.flatnonzero(self.labels > 9)[0])
            raise InputError(f"{labels_path}: label {self.labels[i]} at row {i} is not in 0..9")
        if self.n_rows == 0:
            raise InputError(f"{self.images}: data is empty")

    def all_labels(self) -> np.ndarray:
        return self.labels

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        n_bytes = (stop - start) * self.n_features
        with _open_maybe_gzip(self.images) as f:
            try:
                f.seek(self.header_bytes + start * self.n_features)
                raw = f.read(n_bytes)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(f"{self.images}: cannot read: {exc}") from None
        if len(raw) != n_bytes:
            raise InputError(f"{self.images}: file is truncated")
        pixels = np.frombuffer(raw, dtype=np.uint8).reshape(stop - start, self.n_features)
        return pixels.astype(np.float32) / np.float32(255.0), self.labels[start:stop]


def _find_idx(directory: str, stem: str) -> str:
    for candidate in (stem + ".gz", stem):
        path = os.path.join(directory, candidate)
        if os.path.isfile(path):
            return path
    where = "directory does not exist" if not os.path.isdir(directory) else f"{stem}[.gz] not found"
    raise InputError(
        f"fashion-mnist data not found in {directory} ({where}); "
        "run `apt-get install dataset-fashion-mnist` or pass --data-dir"
    )


def _open_maybe_gzip(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def _idx_header(path: str, ndim: int) -> tuple[tuple[int, ...], int]:
    """Parse an IDX header, returning the dims and the header size in bytes."""
    try:
        with _open_maybe_gzip(path) as f:
            head = f.read(4 + 4 * ndim)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] != _IDX_UBYTE or head[3] != ndim:
        magic = head[:4].hex() if head else "empty file"
        raise InputError(
            f"{path}: not a {ndim}-D unsigned-byte IDX file (bad magic number 0x{magic})"
        )
    if len(head) != 4 + 4 * ndim:
        raise InputError(f"{path}: file is truncated")
    dims = tuple(int(d) for d in np.frombuffer(head[4:], dtype=">u4"))
    return dims, len(head)


def _idx_read_all(path: str, ndim: int) -> np.ndarray:
    dims, header = _idx_header(path, ndim)
    n_bytes = int(np.prod(dims))
    try:
        with _open_maybe_gzip(path) as f:
            f.seek(header)
            raw = f.read(n_bytes)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    if len(raw) != n_bytes:
        raise InputError(f"{path}: file is truncated")
    return np.frombuffer(raw, dtype=np.uint8).reshape(dims)
