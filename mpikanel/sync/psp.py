"""Predicted synchronous parallel (PSP), server side: predict, choose the sync time, plan steps.

Pure code over the book (no MPI, no clock reads): the server passes arrival times in.

Predictor: per worker, the median of the last ``window`` reported step times. A median
ignores a single outlier step (a GC pause, a late JIT) that an EWMA or the last value would
follow; the window of 5 follows a real change of speed within three rounds.

Sync time (ZipLine/ElasticBSP's one-pass sweep applied to the thesis's PSP): all workers are
released together, so worker i's k-th next iteration ends at e_i(k) = k * t_i after the
release (``choose_sync_time`` also takes per-worker start offsets c_i). Candidates T are the
ends e_i(k), k <= k_max, not earlier than the slowest worker's first one; each worker runs
k_i(T) = the largest k <= k_max with e_i(k) <= T (at least 1);
the chosen T minimizes the total idle sum_i (T - e_i(k_i(T))), ties going to the earlier T.
Sorting the candidates makes the sweep O(m log m) in their number m = n * k_max.
A plan other than BSP's (k = 1 for all) is used only when it cuts the predicted idle time by
at least ``min_gain`` (measurement noise on a busy node must not make a homogeneous cluster
drift into uneven rounds).

Arrivals are predicted as c + k_i * t_i, c being the round's fixed cost (reply, push, merge:
the median residual of recent rounds over all workers); when the mean prediction error of the
last rounds, relative to the round length, exceeds ``fallback_error``, the server plans BSP
rounds until predictions recover.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .book import Book
from .bsp import BSP
from .schedule import Action, Schedule, WorkerState

AGGREGATES = ("sum", "normalized")
#: what a worker does while its round closes: keep training (PSP) or idle (the ZipLine-style ablation)
WAITS = ("train", "idle")


@dataclass(frozen=True)
class SyncPlan:
    """A chosen sync time and the local steps each worker runs before it."""

    T: float
    k: np.ndarray        # int64 per worker
    idle: float          # predicted total idle seconds of the round


def idle_of(T: float, t: np.ndarray, k: np.ndarray, c: np.ndarray | float = 0.0) -> float:
    """Total predicted idle seconds when worker i runs k[i] steps of t[i] seconds (after c[i]) before T."""
    return float(np.sum(T - (c + k * t)))


def steps_for(T: float, t: np.ndarray, k_max: int, c: np.ndarray | float = 0.0) -> np.ndarray:
    """k_i(T): the most steps (1..k_max) each worker finishes by T."""
    k = np.floor((T - c) / t * (1 + 1e-12)).astype(np.int64)   # e_i(k) == T counts as fitting
    return np.clip(k, 1, k_max)


def choose_sync_time(t: np.ndarray, k_max: int, c: np.ndarray | None = None) -> SyncPlan:
    """The sweep: minimal total idle over the candidate sync times (earliest on ties)."""
    t = np.asarray(t, dtype=np.float64)
    n = t.size
    c = np.zeros(n) if c is None else np.asarray(c, dtype=np.float64)
    t_min = float((c + t).max())                 # nobody can sync before the slowest's first step
    ks = np.arange(1, k_max + 1, dtype=np.float64)
    ends = (c[:, None] + ks[None, :] * t[:, None]).ravel()    # candidate ends e_i(k)
    order = np.argsort(ends, kind="stable")
    k = np.ones(n, dtype=np.int64)
    busy = float((c + t).sum())                  # sum_i e_i(k_i) with every k_i = 1
    best = SyncPlan(t_min, k.copy(), n * t_min - busy)
    i = 0
    m = ends.size
    while i < m:
        value = ends[order[i]]
        j = i
        while j < m and ends[order[j]] <= value * (1 + 1e-12):   # same end: apply all at once
            w, kk = divmod(int(order[j]), k_max)
            if kk + 1 > k[w]:
                busy += (kk + 1 - k[w]) * t[w]
                k[w] = kk + 1
            j += 1
        i = j
        if value >= t_min * (1 - 1e-12):
            idle = n * value - busy
            if idle < best.idle - 1e-12 * max(1.0, value):
                best = SyncPlan(float(value), k.copy(), idle)
    return best


@dataclass
class StepTimePredictor:
    """Per-worker step time: the median of the last `window` reports."""

    n_workers: int
    window: int = 5
    history: list = field(init=False)
    residuals: list = field(init=False)

    def __post_init__(self) -> None:
        self.history = [deque(maxlen=self.window) for _ in range(self.n_workers)]
        self.residuals = [deque(maxlen=self.window) for _ in range(self.n_workers)]

    def observe(self, w: int, step_s: float) -> None:
        """Add one report of worker w's mean seconds per step."""
        if step_s > 0:
            self.history[w].append(step_s)

    def observe_round(self, w: int, arrived_s: float, k: int) -> None:
        """Add one round's fixed cost of worker w: arrival delay minus its k predicted steps."""
        t = self.predict()[w]
        self.residuals[w].append(max(0.0, arrived_s - k * t))

    def round_cost(self) -> float:
        """Predicted fixed cost of a round (median residual over all workers; 0 before any)."""
        values = [x for r in self.residuals for x in r]
        return float(np.median(values)) if values else 0.0

    def predict(self) -> np.ndarray:
        """Predicted seconds per step for every worker (workers with no report: the others' mean)."""
        t = np.array([float(np.median(h)) if h else np.nan for h in self.history])
        if np.isnan(t).all():
            return np.ones_like(t)
        return np.where(np.isnan(t), np.nanmean(t), t)


@dataclass
class Round:
    """One PSP round: what was predicted at release and what happened."""

    released_at: float
    T: float
    k: np.ndarray
    predicted_idle: float
    fallback: bool
    predicted: np.ndarray    # predicted seconds after release of each worker's push
    arrived: np.ndarray      # actual seconds after release (nan: not pushed, e.g. left)

    def relative_error(self) -> float:
        """Mean |actual - predicted| arrival over the workers that pushed, relative to the
        predicted round length (a per-worker ratio would let a 1 ms miss on a 2 ms worker dominate)."""
        ok = ~np.isnan(self.arrived)
        if not ok.any():
            return 0.0
        return float(np.mean(np.abs(self.arrived[ok] - self.predicted[ok])) / max(self.predicted.max(), 1e-9))


class PSP(BSP):
    """Predicted synchronous parallel: BSP rounds whose length the server plans.

    Releases like BSP (every active worker has pushed) and adds the round's deltas in rank
    order; ``aggregate="normalized"`` divides each delta by the steps it carries. At each
    release it predicts step times, chooses the sync time and gives each worker its k_i.
    When the prediction error of the last rounds exceeds ``fallback_error`` it plans k=1
    for everyone (BSP) until predictions recover.
    """

    name = "psp"
    lockstep = False

    def __init__(self, n_workers: int, k_max: int = 8, aggregate: str = "sum",
                 fallback_error: float = 0.5, window: int = 5, error_rounds: int = 3,
                 min_gain: float = 0.3) -> None:
        if k_max < 1:
            raise InputError(f"--psp-k-max must be >= 1, got {k_max}")
        if aggregate not in AGGREGATES:
            raise InputError(f"--psp-aggregate must be one of {', '.join(AGGREGATES)}, got '{aggregate}'")
        self.k_max = k_max
        self.aggregate = aggregate
        self.fallback_error = fallback_error
        self.error_rounds = error_rounds
        self.min_gain = min_gain
        self.predictor = StepTimePredictor(n_workers, window)
        self.rounds: list[Round] = []
        self._plan = np.ones(n_workers, dtype=np.int64)

    def on_push(self, book: Book, w: int) -> None:
        """Feed worker w's reported step time to the predictor; time its arrival in the round."""
        self.predictor.observe(w, float(book.step_s[w]))
        if self.rounds and np.isnan(self.rounds[-1].arrived[w]):
            r = self.rounds[-1]
            r.arrived[w] = book.arrived_at[w] - r.released_at
            self.predictor.observe_round(w, float(r.arrived[w]), int(r.k[w]))

    def in_fallback(self) -> bool:
        """True while recent predictions were too far off to trust."""
        recent = [r.relative_error() for r in self.rounds[-self.error_rounds:] if not np.isnan(r.arrived).all()]
        return bool(recent) and float(np.mean(recent)) > self.fallback_error

    def release(self, book: Book) -> list[int]:
        released = super().release(book)
        if released:
            self._replan(book)
        return released

    def choose(self, t: np.ndarray) -> tuple[SyncPlan, bool]:
        """This round's plan from predicted step times, and whether it fell back to BSP."""
        T = float(t.max())
        bsp = SyncPlan(T, np.ones(t.size, dtype=np.int64), idle_of(T, t, 1))
        if self.in_fallback():
            return bsp, True
        plan = choose_sync_time(t, self.k_max)
        return (plan if plan.idle <= (1 - self.min_gain) * bsp.idle else bsp), False

    def _replan(self, book: Book) -> None:
        t = self.predictor.predict()
        plan, fallback = self.choose(t)
        self._plan = plan.k
        now = float(book.arrived_at[book.waiting].max()) if book.waiting.any() else 0.0
        self.rounds.append(Round(now, plan.T, plan.k.copy(), plan.idle, fallback,
                                 self.predictor.round_cost() + plan.k * t, np.full(t.size, np.nan)))

    def plan(self, book: Book, w: int) -> int:
        return int(self._plan[w])

    def delta_scale(self, book: Book, w: int) -> float:
        if self.aggregate == "normalized":
            return 1.0 / max(1, int(book.steps[w]))
        return 1.0

    def describe(self) -> str:
        return f"PSP(k_max={self.k_max}, {self.aggregate})"

    def state(self) -> dict:
        """Predictor histories and the current plan (round records restart after a resume)."""
        p = self.predictor
        return {"history": [list(h) for h in p.history], "residuals": [list(r) for r in p.residuals],
                "plan": self._plan.tolist()}

    def restore(self, state: dict) -> None:
        p = self.predictor
        for dq, values in zip(p.history, state["history"]):
            dq.extend(values)
        for dq, values in zip(p.residuals, state["residuals"]):
            dq.extend(values)
        self._plan = np.array(state["plan"], dtype=np.int64)

    def report(self) -> dict:
        """Per-round record for the summary and metrics file."""
        rs = self.rounds
        return {
            "rounds": len(rs),
            "fallback_rounds": int(sum(r.fallback for r in rs)),
            "mean_relative_error": float(np.mean([r.relative_error() for r in rs])) if rs else 0.0,
            "predicted_idle_s": float(sum(r.predicted_idle for r in rs)),
            "T": [r.T for r in rs],
            "k": [r.k.tolist() for r in rs],
            "predicted_s": [r.predicted.tolist() for r in rs],
            "actual_s": [np.where(np.isnan(r.arrived), -1.0, r.arrived).tolist() for r in rs],
        }


@dataclass
class PspSchedule(Schedule):
    """Predicted synchronous parallel, worker side: run the planned steps, push, keep training
    while the round closes, fold those steps into the next delta.

    While waiting a worker trains at most as many steps as it was planned for the round (and at
    most ``max_wait_steps``): the wait is then no longer than a round, and the extra work in a
    delta stays proportional to the planned work, which keeps summed deltas stable.
    """

    max_wait_steps: int = 8
    train_while_waiting: bool = True    # False: the ZipLine-style ablation (idle until the reply)
    name = "psp"

    def decide(self, st: WorkerState) -> Action:
        if st.pending:
            if not self.train_while_waiting:
                return Action.WAIT
            limit = min(self.max_wait_steps, st.plan)
            return Action.WAIT if st.steps_while_pending >= limit else Action.CONTINUE
        if st.steps_since_reply < st.plan:
            return Action.CONTINUE
        return Action.PUSH if self.train_while_waiting else Action.PUSH_AND_WAIT


def make(config, n_workers: int) -> tuple[PSP, PspSchedule]:
    """PSP's server policy and worker schedule for a config."""
    return (PSP(n_workers, config.psp_k_max, config.psp_aggregate),
            PspSchedule(max_wait_steps=config.psp_k_max, train_while_waiting=config.psp_wait == "train"))
