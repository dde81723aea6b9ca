"""When a run checkpoints: the interval flags and the intervals' schedule."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


@dataclass
class CheckpointControl:
    """When the server checkpoints (the intervals) and the number the next checkpoint gets."""

    every_s: float = 0.0
    every_steps: int = 0
    seq: int = 1                             # the number the next checkpoint gets (its directory)
    _last_s: float = 0.0
    _last_steps: int = 0

    def due(self, elapsed_s: float, steps: int) -> str | None:
        """'periodic' when a time or step interval has passed since the last checkpoint."""
        if self.every_s > 0 and elapsed_s - self._last_s >= self.every_s:
            return "periodic"
        if self.every_steps > 0 and steps - self._last_steps >= self.every_steps:
            return "periodic"
        return None

    def written(self, elapsed_s: float, steps: int) -> None:
        """Restart the intervals; the next checkpoint gets the next number."""
        self._last_s, self._last_steps = elapsed_s, steps
        self.seq += 1


def parse_every(text: str | float | int | None) -> tuple[float, int]:
    """'--checkpoint-every' as (seconds, steps): '30', '30s', '500steps'; 0/None = only end and signals."""
    if text is None:
        return 0.0, 0
    s = str(text).strip().lower()
    try:
        if s.endswith("steps"):
            n = int(s[:-5])
            if n < 0:
                raise ValueError
            return 0.0, n
        value = float(s[:-1] if s.endswith("s") else s)
        if value < 0:
            raise ValueError
        return value, 0
    except ValueError:
        raise InputError(f"--checkpoint-every must be SECONDS, SECONDSs or NUMBERsteps, got '{text}'") from None
