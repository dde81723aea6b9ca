"""Heterogeneity injection: seeded, reproducible slowdowns, pauses and link delays for workers.

Pure bookkeeping: an :class:`Injector` only *computes* how long a worker should additionally
wait; the caller sleeps (:func:`sleep_for`, never a busy wait), so on an oversubscribed machine
the injected time gives the CPU to the other ranks.

Spec syntax (worker ranks are 1..n_workers; rank 0 is the server):

* ``slowdown``: ``"1:4"`` (rank 1 takes 4x its measured compute per step), ``"1:4,3:2"``, a
  changing worker ``"2:1->4@30%"`` (rank 2 runs at 1x, then at 4x from 30% of its fair share of
  the budget's steps on; ``@STEP`` names an absolute step; ``"1:4->1@50%"`` is a straggler that
  recovers), or ``"lognormal:SIGMA"`` (factor per worker = exp(N(0, SIGMA^2)) clipped to >= 1; all
  n_workers factors are drawn from the seed, so every rank sees the same factors).
* ``pause_prob`` / ``pause_s``: each step pauses ``pause_s`` seconds with probability
  ``pause_prob``; the draw depends only on (seed, rank, step), never on timing.
* ``link_delay``: ``"2:0.005"`` adds 5 ms per message of rank 2 to the server; ``"*:0.001"``
  applies to all workers; comma-separated entries; a rank's own entry wins over ``*``.
* ``link_bandwidth``: ``"2:50e6"`` caps rank 2 at 50e6 bytes/s (added delay = nbytes / bw);
  same ``*`` and comma rules.
* ``server_delay`` (the server, rank 0): ``"0.002"`` adds 2 ms of service time to every push the
  server handles (it sleeps, so pushes queue behind it like on a congested server), or
  ``"lognormal:MEAN:SIGMA"``: MEAN x exp(N(0, SIGMA^2) - SIGMA^2/2) per push (mean MEAN), drawn
  from (seed, push index) only.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .errors import InputError

_MASK64 = (1 << 64) - 1
_PAUSE_STREAM = 0x70617573          # "paus": separates the pause draws from other streams
_LOGNORMAL_STREAM = 0x6C6F676E      # "logn"
_SERVICE_STREAM = 0x73727663        # "srvc"


@dataclass(frozen=True)
class HeteroSpec:
    """What heterogeneity to inject; see the module docstring for the syntax."""

    slowdown: str | None = None
    pause_prob: float = 0.0
    pause_s: float = 0.0
    link_delay: str | None = None
    link_bandwidth: str | None = None
    seed: int = 0


@dataclass(frozen=True)
class _Change:
    """A worker's slowdown changing mid-run: `after` from step `at` (or from `share` of its fair steps) on."""

    after: float
    at: int | None = None
    share: float | None = None

    def start_step(self, expected_steps: int | None) -> int:
        """The first step (1-based) that runs at the new factor."""
        if self.at is not None:
            return self.at
        if expected_steps is None:
            raise InputError("--slowdown with '@P%' needs the run's step count (not known here); "
                             "give an absolute step, e.g. '2:1->4@50'")
        return max(1, int(round(self.share * expected_steps)) + 1)


@dataclass(frozen=True)
class _Parsed:
    """A validated spec: per-rank maps, or a lognormal sigma for slowdowns."""

    factors: dict[int, float]
    changes: dict[int, "_Change"]        # rank -> its factor from a step on
    lognormal_sigma: float | None
    delays: dict[int, float]             # key 0 stands for "*" (every worker)
    bandwidths: dict[int, float]         # key 0 stands for "*" (every worker)


def parse_hetero(spec: HeteroSpec, n_workers: int) -> None:
    """Validate `spec` for `n_workers` workers; InputError with a one-line message if bad."""
    _parse(spec, n_workers)


def _parse(spec: HeteroSpec, n_workers: int) -> _Parsed:
    if n_workers < 1:
        raise InputError(f"heterogeneity needs at least one worker, got {n_workers}")
    sigma, factors, changes = _parse_slowdown(spec.slowdown, n_workers)
    _check_pause(spec.pause_prob, spec.pause_s)
    delays = _parse_rank_map("link-delay", spec.link_delay, n_workers, _check_delay)
    bandwidths = _parse_rank_map("link-bandwidth", spec.link_bandwidth, n_workers, _check_bandwidth)
    return _Parsed(factors, changes, sigma, delays, bandwidths)


def _parse_slowdown(text: str | None, n_workers: int) -> tuple[float | None, dict[int, float], dict[int, _Change]]:
    if text is None or not text.strip():
        return None, {}, {}
    head, _, rest = text.strip().partition(":")
    if head.strip().lower() == "lognormal":
        sigma = _number("slowdown", rest, text)
        if not (math.isfinite(sigma) and sigma >= 0):
            raise InputError(f"--slowdown lognormal sigma must be a finite number >= 0, got {rest.strip()!r}")
        return sigma, {}, {}
    changes: dict[int, tuple[float, _Change]] = {}
    plain = []
    for entry in text.split(","):
        rank_text, _, value = entry.strip().partition(":")
        if "->" not in value:
            plain.append(entry)
            continue
        rank = _rank("slowdown", rank_text.strip(), n_workers, False, text)
        if rank in changes:
            raise InputError(f"--slowdown: rank {rank} given twice in {text!r}")
        changes[rank] = _parse_change(value, text)
    factors = _parse_rank_map("slowdown", ",".join(plain), n_workers, _check_factor, allow_star=False)
    for rank, (before, _) in changes.items():
        if rank in factors:
            raise InputError(f"--slowdown: rank {rank} given twice in {text!r}")
        factors[rank] = before
    return None, factors, {r: change for r, (_, change) in changes.items()}


def _parse_change(value: str, whole: str) -> tuple[float, _Change]:
    """Parse "A->B@STEP" or "A->B@P%" (one rank's changing slowdown)."""
    before_text, _, rest = value.partition("->")
    after_text, sep, at_text = rest.partition("@")
    if not sep or not at_text.strip():
        raise InputError(f"--slowdown: bad change {value.strip()!r} in {whole!r}; expected RANK:A->B@STEP "
                         f"or RANK:A->B@P% (for example '2:1->4@30%')")
    before = _check_factor("slowdown", _number("slowdown", before_text, whole))
    after = _check_factor("slowdown", _number("slowdown", after_text, whole))
    at_text = at_text.strip()
    if at_text.endswith("%"):
        share = _number("slowdown", at_text[:-1], whole) / 100.0
        if not 0.0 <= share <= 1.0:
            raise InputError(f"--slowdown: change point {at_text!r} in {whole!r} must be in 0%..100%")
        return before, _Change(after, share=share)
    try:
        at = int(at_text)
    except ValueError:
        raise InputError(f"--slowdown: change point {at_text!r} in {whole!r} is neither a step nor P%") from None
    if at < 1:
        raise InputError(f"--slowdown: change step must be >= 1, got {at} in {whole!r}")
    return before, _Change(after, at=at)


def _parse_rank_map(name: str, text: str | None, n_workers: int, check,
                    allow_star: bool = True) -> dict[int, float]:
    """Parse "RANK:VALUE,..." (RANK may be '*' -> key 0) into a dict, validating each value."""
    if text is None or not text.strip():
        return {}
    out: dict[int, float] = {}
    for entry in text.split(","):
        rank_text, sep, value_text = entry.strip().partition(":")
        if not sep or not rank_text.strip() or not value_text.strip():
            raise InputError(f"--{name}: bad entry {entry.strip()!r} in {text!r}; expected RANK:VALUE "
                             f"(for example {_EXAMPLES[name]})")
        rank = _rank(name, rank_text.strip(), n_workers, allow_star, text)
        if rank in out:
            raise InputError(f"--{name}: rank {rank_text.strip()} given twice in {text!r}")
        out[rank] = check(name, _number(name, value_text, text))
    return out


_EXAMPLES = {"slowdown": "'1:4,3:2' or 'lognormal:0.5'", "link-delay": "'2:0.005' or '*:0.001'",
             "link-bandwidth": "'2:50e6' or '*:1e9'"}


def _rank(name: str, text: str, n_workers: int, allow_star: bool, whole: str) -> int:
    if text == "*" and allow_star:
        return 0
    try:
        rank = int(text)
    except ValueError:
        raise InputError(f"--{name}: rank {text!r} in {whole!r} is not an integer"
                         + (" or '*'" if allow_star else "")) from None
    if not 1 <= rank <= n_workers:
        raise InputError(f"--{name}: rank {rank} in {whole!r} is not a worker; "
                         f"worker ranks are 1..{n_workers}")
    return rank


def _number(name: str, text: str, whole: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise InputError(f"--{name}: {text.strip()!r} in {whole!r} is not a number") from None


def _check_factor(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 1):
        raise InputError(f"--{name}: factor must be a finite number >= 1 (1 = no slowdown), got {value}")
    return value


def _check_delay(name: str, value: float) -> float:
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"--{name}: delay must be a finite number of seconds >= 0, got {value}")
    return value


def _check_bandwidth(name: str, value: float) -> float:
    if not value > 0:
        raise InputError(f"--{name}: bandwidth must be > 0 bytes/s, got {value}")
    return value


def _check_pause(prob: float, seconds: float) -> None:
    if not 0.0 <= prob <= 1.0:
        raise InputError(f"--pause-prob must be a probability in [0, 1], got {prob}")
    if not (math.isfinite(seconds) and seconds >= 0):
        raise InputError(f"--pause-s must be a finite number of seconds >= 0, got {seconds}")


def lognormal_factors(sigma: float, n_workers: int, seed: int) -> np.ndarray:
    """Slowdown factors exp(N(0, sigma^2)) clipped to >= 1 for workers 1..n (index 0 = rank 1)."""
    rng = np.random.default_rng([_LOGNORMAL_STREAM, seed & _MASK64])
    return np.maximum(1.0, np.exp(rng.normal(0.0, sigma, n_workers)))


def _mix64(x: int) -> int:
    """SplitMix64 finalizer: a well-mixed 64-bit hash of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def uniform_draw(seed: int, rank: int, step: int, stream: int = _PAUSE_STREAM) -> float:
    """A uniform number in [0, 1) that depends only on (seed, rank, step, stream)."""
    h = _mix64(stream)
    for part in (seed, rank, step):
        h = _mix64(h ^ (part & _MASK64))
    return (h >> 11) * (1.0 / (1 << 53))


class Injector:
    """Per-worker schedule of injected delays; pure: the caller sleeps."""

    def __init__(self, spec: HeteroSpec, rank: int, n_workers: int, expected_steps: int | None = None):
        parsed = _parse(spec, n_workers)
        if not 0 <= rank <= n_workers:
            raise ValueError(f"rank {rank} is neither the server (0) nor a worker (1..{n_workers})")
        self.spec = spec
        self.rank = rank
        self.step = 0                    # steps seen by compute_delay so far
        self.injected_s = 0.0            # total delay handed out (compute + link)
        worker = rank >= 1               # the server (rank 0) gets no injection
        self.factor = _factor(parsed, rank, n_workers, spec.seed) if worker else 1.0
        change = parsed.changes.get(rank) if worker else None
        # (first step at the new factor, new factor); None: the factor never changes
        self.change = (change.start_step(expected_steps), change.after) if change is not None else None
        self.pause_prob = spec.pause_prob if worker and spec.pause_s > 0 else 0.0
        self.pause_s = spec.pause_s if self.pause_prob > 0 else 0.0
        self.link_s = parsed.delays.get(rank, parsed.delays.get(0, 0.0)) if worker else 0.0
        self.bandwidth = parsed.bandwidths.get(rank, parsed.bandwidths.get(0)) if worker else None

    def pauses_at(self, step: int) -> bool:
        """Whether this worker pauses at `step` (1-based); depends only on (seed, rank, step)."""
        if self.pause_prob <= 0:
            return False
        return uniform_draw(self.spec.seed, self.rank, step) < self.pause_prob

    def factor_at(self, step: int) -> float:
        """The slowdown factor of this worker's `step` (1-based)."""
        if self.change is not None and step >= self.change[0]:
            return self.change[1]
        return self.factor

    def compute_delay(self, measured_compute_s: float) -> float:
        """Extra seconds for this step: (factor-1)*measured plus a seeded pause; call once per step."""
        self.step += 1
        delay = (self.factor_at(self.step) - 1.0) * max(0.0, measured_compute_s)
        if self.pauses_at(self.step):
            delay += self.pause_s
        self.injected_s += delay
        return delay

    def pace(self, compute_s: float, rows: int, batch_size: int, step_s: float) -> "Pace":
        """A paced step (--step-time): its modeled length, as the simulator models it
        (step_s x rows/batch_size x the slowdown factor, plus any pause), against the measured
        compute; call once per step instead of compute_delay."""
        base = step_s * rows / batch_size
        injected = self.compute_delay(base)
        modeled = base + injected
        compute = max(0.0, compute_s)
        length = max(compute, modeled)
        return Pace(modeled_s=modeled, compute_s=compute, sleep_s=length - compute,
                    injected_s=length - max(compute, base))

    def link_delay(self, nbytes: int) -> float:
        """Extra seconds for one message of `nbytes` bytes to the server."""
        delay = self.link_s
        if self.bandwidth is not None:
            delay += max(0, nbytes) / self.bandwidth
        self.injected_s += delay
        return delay

    @property
    def active(self) -> bool:
        """Whether anything is injected for this worker."""
        return (self.factor > 1.0 or self.change is not None or self.pause_prob > 0 or self.link_s > 0
                or self.bandwidth is not None)


@dataclass(frozen=True)
class Pace:
    """One paced step: the step lasts max(compute_s, modeled_s); the driver sleeps sleep_s."""

    modeled_s: float     # the modeled step: base x factor + pause
    compute_s: float     # the step's measured compute (wall seconds)
    sleep_s: float       # what is left of the modeled step after the compute (0 if it overran)
    injected_s: float    # of the step's length, what the slowdown and pause added

    @property
    def held(self) -> bool:
        """Whether the compute fit in the modeled step."""
        return self.compute_s <= self.modeled_s


def _factor(parsed: _Parsed, rank: int, n_workers: int, seed: int) -> float:
    if parsed.lognormal_sigma is not None:
        return float(lognormal_factors(parsed.lognormal_sigma, n_workers, seed)[rank - 1])
    return parsed.factors.get(rank, 1.0)


def describe_hetero(spec: HeteroSpec) -> str:
    """Short text of the injected heterogeneity (for labels), or "homogeneous"."""
    parts = []
    if spec.slowdown:
        parts.append(f"slowdown {spec.slowdown}")
    if spec.pause_prob > 0 and spec.pause_s > 0:
        parts.append(f"pause {spec.pause_s:g}s p={spec.pause_prob:g}")
    if spec.link_delay:
        parts.append(f"link delay {spec.link_delay}")
    if spec.link_bandwidth:
        parts.append(f"bandwidth {spec.link_bandwidth}")
    return ", ".join(parts) if parts else "homogeneous"


def sleep_for(seconds: float) -> None:
    """Sleep `seconds` with time.sleep (yields the CPU; never busy-waits); <= 0 returns at once."""
    if seconds > 0:
        time.sleep(seconds)


class ServerDelay:
    """Seeded service time per push handled by the server (a congested server on few ranks)."""

    def __init__(self, text: str, seed: int = 0) -> None:
        self.mean, self.sigma = parse_server_delay(text)
        self.seed = seed

    def draw(self, index: int) -> float:
        """Service seconds of the server's `index`-th push (depends only on seed and index)."""
        if self.sigma == 0.0:
            return self.mean
        u1 = max(uniform_draw(self.seed, 0, index, _SERVICE_STREAM), 1e-300)
        u2 = uniform_draw(self.seed, 1, index, _SERVICE_STREAM)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)     # Box-Muller
        return self.mean * math.exp(self.sigma * z - 0.5 * self.sigma ** 2)


def parse_server_delay(text: str) -> tuple[float, float]:
    """(mean seconds, lognormal sigma) of a --server-delay spec; InputError if malformed."""
    parts = [p.strip() for p in text.strip().split(":")]
    if parts[0].lower() == "lognormal":
        if len(parts) != 3:
            raise InputError(f"--server-delay: expected lognormal:MEAN:SIGMA, got {text!r}")
        mean, sigma = _number("server-delay", parts[1], text), _number("server-delay", parts[2], text)
    elif len(parts) == 1:
        mean, sigma = _number("server-delay", parts[0], text), 0.0
    else:
        raise InputError(f"--server-delay: expected SECONDS or lognormal:MEAN:SIGMA, got {text!r}")
    if not (math.isfinite(mean) and mean >= 0 and math.isfinite(sigma) and sigma >= 0):
        raise InputError(f"--server-delay: seconds and sigma must be finite numbers >= 0, got {text!r}")
    return mean, sigma
