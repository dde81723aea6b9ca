"""Which server rank owns which parameters: K contiguous, near-equal key ranges (pure, no MPI)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


@dataclass(frozen=True)
class ServerMap:
    """Ranks 0..K-1 serve; server k owns the flat parameter indices ``bounds[k]:bounds[k+1]``.

    The ranges differ in length by at most one key, and rank 0 gets the longest, so a
    dense push divides evenly over the servers; every server owns at least one key.
    """

    n_params: int
    servers: int = 1

    def __post_init__(self) -> None:
        if self.servers < 1:
            raise InputError(f"--servers must be >= 1, got {self.servers}")
        if self.servers > self.n_params:
            raise InputError(f"--servers {self.servers}: the model has only {self.n_params} parameters "
                             "(every server must own at least one)")

    @property
    def bounds(self) -> list[int]:
        """K + 1 offsets: server k owns bounds[k]..bounds[k+1]."""
        q, r = divmod(self.n_params, self.servers)
        out = [0]
        for k in range(self.servers):
            out.append(out[-1] + q + (1 if k < r else 0))
        return out

    def range(self, k: int) -> slice:
        """The keys server k owns, as a slice of the flat parameter vector."""
        b = self.bounds
        return slice(b[k], b[k + 1])

    def owner(self, key: int) -> int:
        """The server that owns flat parameter index `key`."""
        if not 0 <= key < self.n_params:
            raise IndexError(f"key {key} outside 0..{self.n_params - 1}")
        q, r = divmod(self.n_params, self.servers)
        big = r * (q + 1)           # the first r servers own q + 1 keys each
        return key // (q + 1) if key < big else r + (key - big) // q

    def first_worker(self) -> int:
        """The first worker rank (ranks below it serve)."""
        return self.servers
