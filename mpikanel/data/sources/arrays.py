"""Array files: .npz archives and HDF5 files with X and y."""

from __future__ import annotations

import zipfile
import zlib

import numpy as np

from mpikanel.errors import InputError

from .base import Source, check_x_shape, check_y_shape


class Npz(Source):
    """An .npz archive with X (2-D) and y (1-D); row ranges are read without loading all of X."""

    def __init__(self, path: str, labels: bool = True) -> None:
        self.name = self.description = path
        members = self._members()
        missing = [a for a in ("X", "y") if a + ".npy" not in members and (labels or a == "X")]
        if missing:
            present = ", ".join(sorted(m[:-4] for m in members if m.endswith(".npy"))) or "none"
            raise InputError(
                f"{path}: missing array(s) {', '.join(missing)}; arrays present: {present}"
            )
        with self._zip() as zf, zf.open("X.npy") as f:
            shape, self.fortran, self.dtype, self.header_bytes = self._header(f, "X")
        check_x_shape(path, shape, self.dtype)
        self.n_rows, self.n_features = shape
        self.row_bytes = self.n_features * self.dtype.itemsize
        self.y = self._load_member("y") if "y.npy" in members else np.full(self.n_rows, np.nan)
        check_y_shape(path, self.y.shape, self.n_rows)

    def _zip(self) -> zipfile.ZipFile:
        try:
            return zipfile.ZipFile(self.name)
        except (zipfile.BadZipFile, OSError) as exc:
            raise InputError(f"{self.name}: not a valid .npz file ({exc})") from None

    def _members(self) -> list[str]:
        with self._zip() as zf:
            return zf.namelist()

    def _header(self, f, array: str) -> tuple[tuple, bool, np.dtype, int]:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            else:
                # 3.0 differs from 2.0 only in allowing utf-8 in the header text.
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        except (ValueError, OSError, zlib.error) as exc:
            raise InputError(f"{self.name}: {array}.npy has a bad npy header ({exc})") from None
        return shape, fortran, dtype, f.tell()

    def _load_member(self, array: str) -> np.ndarray:
        try:
            with self._zip() as zf, zf.open(array + ".npy") as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except (ValueError, OSError, zlib.error, EOFError) as exc:
            raise InputError(f"{self.name}: cannot read {array}.npy ({exc})") from None

    def all_labels(self) -> np.ndarray:
        return self.y

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        if self.fortran:
            return self._load_member("X")[start:stop], self.y[start:stop]
        n_bytes = (stop - start) * self.row_bytes
        try:
            with self._zip() as zf, zf.open("X.npy") as f:
                # Seeking a deflated member decompresses up to the offset; no full load.
                f.seek(self.header_bytes + start * self.row_bytes)
                raw = f.read(n_bytes)
        except (OSError, zlib.error, EOFError) as exc:
            raise InputError(f"{self.name}: cannot read X.npy ({exc})") from None
        if len(raw) != n_bytes:
            raise InputError(f"{self.name}: X.npy is truncated")
        X = np.frombuffer(raw, dtype=self.dtype).reshape(stop - start, self.n_features)
        return X, self.y[start:stop]


class Hdf5(Source):
    """An HDF5 file with datasets X (2-D) and y (1-D); row ranges are h5py slices."""

    def __init__(self, path: str, labels: bool = True) -> None:
        self.name = self.description = path
        with self._file() as f:
            missing = [a for a in ("X", "y") if not isinstance(f.get(a), _h5py().Dataset) and (labels or a == "X")]
            if missing:
                present = ", ".join(sorted(f.keys())) or "none"
                raise InputError(
                    f"{path}: missing dataset(s) {', '.join(missing)}; present: {present}"
                )
            check_x_shape(path, f["X"].shape, f["X"].dtype)
            self.n_rows, self.n_features = f["X"].shape
            self.y = f["y"][()] if "y" in f else np.full(self.n_rows, np.nan)
        check_y_shape(path, self.y.shape, self.n_rows)

    def _file(self):
        h5py = _h5py()
        try:
            return h5py.File(self.name, "r")
        except OSError as exc:
            raise InputError(f"{self.name}: not a valid HDF5 file ({exc})") from None

    def all_labels(self) -> np.ndarray:
        return self.y

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        with self._file() as f:
            return f["X"][start:stop], self.y[start:stop]


def _h5py():
    import h5py  # imported lazily: only HDF5 users pay for it

    return h5py
