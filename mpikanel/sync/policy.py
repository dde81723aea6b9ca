"""What every sync model implements on the server: which waiting workers are answered now."""
from __future__ import annotations

from abc import ABC, abstractmethod

from .book import Book


class SyncPolicy(ABC):
    """Server-side rule deciding which waiting workers are answered."""

    name: str = ""
    #: apply a delta as soon as it arrives (else at release, in rank order)
    apply_on_arrival: bool = True
    #: every worker steps in lockstep: budget leases are split equally, not by measured speed,
    #: so nothing timing-dependent enters the result (BSP stays bitwise reproducible)
    lockstep: bool = False

    @abstractmethod
    def release(self, book: Book) -> list[int]:
        """Workers (ascending index) to answer now."""

    def on_push(self, book: Book, w: int) -> None:
        """Called after worker w's push is recorded in the book (PSP learns from it)."""

    def plan(self, book: Book, w: int) -> int:
        """Local steps worker w runs before its next push."""
        return 1

    def critical(self, book: Book, w: int) -> bool:
        """Whether worker w's next push closes a planned round (PSP); it then pushes on plan and blocks."""
        return False

    def granted(self, book: Book, w: int, steps: int) -> None:
        """Worker w, just answered, may run at most `steps` steps beyond its push (its budget
        lease); PSP predicts a push the lease cuts short."""

    def delta_scale(self, book: Book, w: int) -> float:
        """Factor applied to worker w's waiting delta when it is added to the parameters."""
        return 1.0

    def state(self) -> dict:
        """JSON-able state a checkpoint keeps (stateless policies: empty)."""
        return {}

    def restore(self, state: dict) -> None:
        """Continue from a checkpointed state()."""

    def describe(self) -> str:
        """Human-readable name with parameters."""
        return self.name.upper()
