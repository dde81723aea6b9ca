"""The one way a delta is added to a server's parameters, on server 0 and on every other server
rank: bitwise equality across any number of servers depends on all of them doing exactly this."""
from __future__ import annotations

import numpy as np


def apply_delta(params: np.ndarray, delta: np.ndarray, scale: float, keys: np.ndarray | None,
                unapplied: np.ndarray | None) -> np.ndarray:
    """Add ``scale x delta`` to ``params`` (the whole range, or the values at ``keys``) and keep
    ``(1 - scale) x delta`` in ``unapplied`` (needed when scale != 1); returns the delta applied."""
    if scale != 1.0:
        if keys is None:
            unapplied += (1.0 - scale) * delta
        else:
            unapplied[keys] += (1.0 - scale) * delta
        delta = delta * scale
    if keys is None:
        params += delta
    else:
        params[keys] += delta
    return delta
