"""The training part of a data source: its shape and class mapping, and where it ends."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpikanel.errors import InputError

from .sources import Libsvm, Source, SyntheticSparse, open_train
from .spec import DataSpec, check_spec
from .validate import integer_labels


@dataclass(frozen=True)
class DataInfo:
    """Shape and class mapping of the training part of a data source."""

    n_rows: int
    n_features: int
    n_classes: int
    description: str
    label_values: tuple
    features_cause: str = ""   # where the feature count comes from (for size errors), e.g. a libsvm line
    row_bytes: int = 0         # bytes a training row takes in memory when rows are dense (0: CSR rows)


def describe(spec: DataSpec) -> DataInfo:
    """Return the training part's shape and classes, validating labels; raises InputError."""
    check_spec(spec)
    src = open_train(spec)
    n_train = train_rows(spec, src)
    if src.fixed_classes is not None:
        classes = src.fixed_classes
    else:
        y = integer_labels(src.all_labels(), src, 0)
        classes = tuple(int(v) for v in np.unique(y[:n_train]))
    return DataInfo(
        n_rows=n_train,
        n_features=src.n_features,
        n_classes=len(classes),
        description=src.description,
        label_values=classes,
        features_cause=src.features_cause or f"{src.n_features} features in {src.description}",
        row_bytes=0 if isinstance(src, (Libsvm, SyntheticSparse)) else 4 * src.n_features,
    )


def _uses_tail_split(spec: DataSpec) -> bool:
    return spec.test_source is None and spec.source != "fashion-mnist"


def train_rows(spec: DataSpec, src: Source) -> int:
    """Rows of `src` that belong to training (all of it unless the test set is a tail fraction)."""
    if not _uses_tail_split(spec):
        return src.n_rows
    n_train = src.n_rows - int(round(spec.test_fraction * src.n_rows))
    if n_train <= 0:
        raise InputError(
            f"{src.name}: no training rows left after holding out "
            f"test fraction {spec.test_fraction}"
        )
    return n_train
