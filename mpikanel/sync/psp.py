"""Predicted synchronous parallel (PSP), server side: predict, choose the sync time, plan steps.

Pure code over the book (no MPI, no clock reads): the server passes arrival times in.

Predictor (:class:`StepTimePredictor`): per worker, an estimate of its seconds per step from its
last ``window`` reports (``estimator``: the median, which ignores a single outlier step such as
a GC pause or a late JIT; ``p90``; or an ``ewma``) and its own arrival offset c_i: the median of
its residuals (actual arrival minus the arrival its steps predict: reply, merge, push and link
time). Both are cached per worker and updated in O(window) per push, so a round costs
O(n log n) (the sort of the sweep), not O(n^2).

Predicted arrival (:func:`arrival_ends`): a worker counts its k steps from its push and trains on
while that push waits (up to its last plan and its budget lease), so a fast worker is already
some steps into its next round when the round closes: its push arrives k steps after its last
one, not k steps after the reply. A worker that pushed blocking (the critical one, the
ZipLine-style ablation, a used-up lease) starts at the reply. Until 2026-12-03 it predicted c_i + k t_i
for everyone and clipped negative residuals, so it predicted every fast worker late (median
error 0.17-0.28 in the recorded harness); with fixed modeled step times the prediction is now
exact but for a pass's short last minibatch and the budget's last rounds
(``tests/test_sim.py``). The server tells PSP each lease it grants (:meth:`PSP.granted`).

Sync time (ZipLine/ElasticBSP's one-pass sweep applied to the thesis's PSP): all workers are
released together, so worker i's k-th next iteration ends at e_i(k) = c_i + k * t_i. Candidates
T are the ends e_i(k), k <= k_max, not earlier than the slowest worker's first one; each worker
runs k_i(T) = the largest k <= k_max with e_i(k) <= T (at least 1). The chosen T minimizes

    idle(T) / (n T)  +  length_penalty * (T - T_min) / T_min          (objective "rate")

the share of the round the cluster idles, plus a price on every slowest-first-step's worth of
extra round length (longer rounds mean more local steps between syncs: more drift, staler
pushes). So the optimizer, not ``k_max``, decides how many steps fast workers run: a longer
round must buy a proportionally smaller idle share. ``objective="idle"`` is the 0.1 rule (total
idle seconds, no price on length), which fills k_max. Ties go to the earlier T. The sweep is
vectorized: sort the n * k_max candidates once, then cumulative sums give every candidate's
busy time. A plan other than BSP's (k = 1 for all) is used only when it cuts the BSP plan's
objective by at least ``min_gain`` (measurement noise on a busy node must not make a
homogeneous cluster drift into uneven rounds).

The worker whose predicted arrival closes the round (the critical worker) is told so in its
reply: it pushes at exactly its planned step and blocks for the reply, so it does not overrun
the round; the others train on while it closes (``PspSchedule``). Steps a worker trains while
its push is pending count toward its next plan, not on top of it.

Prediction error is scored per worker as |actual - predicted arrival| / the predicted round
length, only for non-final pushes and only in rounds with two or more scored workers (a
worker's DONE push and a lone worker's rounds say nothing about the plan). When the mean error
of the last ``error_rounds`` scored rounds exceeds ``fallback_error``, the server plans BSP
rounds, retrying the real plan every ``retry_every`` rounds so that it can recover.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .book import Book
from .bsp import BSP
from .options import Bound, Option
from .schedule import Action, Schedule, WorkerState

AGGREGATES = ("sum", "normalized")
#: what a worker does while its round closes: keep training (PSP) or idle (the ZipLine-style ablation)
WAITS = ("train", "idle")
ESTIMATORS = ("median", "p90", "ewma")
OBJECTIVES = ("rate", "idle")
#: price of round length in the "rate" objective: one extra T_min of round must cut the idle share by 5 points
LENGTH_PENALTY = 0.05
EWMA_ALPHA = 0.3

K_MAX = Option("psp_k_max", int, 8, "PSP: most local steps a worker is planned per round, and most it trains while "
               "waiting", bound=Bound(1))
AGGREGATE = Option("psp_aggregate", str, "sum", "PSP: add the round's deltas as they are (sum) or each divided by "
                   "its steps (normalized)", choices=AGGREGATES)
ESTIMATOR = Option("psp_estimator", str, "median", "PSP: each worker's seconds per step from its last 5 reports: "
                   "median, p90 or ewma", choices=ESTIMATORS)
OBJECTIVE = Option("psp_objective", str, "rate", "PSP: choose the sync time minimizing the idle share plus a price "
                   "on round length (rate), or total idle seconds (idle: the 0.1 rule, which fills --psp-k-max)",
                   choices=OBJECTIVES)
WAIT = Option("psp_wait", str, "train", "PSP: while a round closes fast workers keep training (train) or idle "
              "(idle: the ZipLine-style ablation)", choices=WAITS)
OPTIONS = (K_MAX, AGGREGATE, ESTIMATOR, OBJECTIVE, WAIT)


@dataclass(frozen=True)
class SyncPlan:
    """A chosen sync time and the local steps each worker runs before it."""

    T: float
    k: np.ndarray        # int64 per worker
    idle: float          # predicted total idle seconds of the round
    score: float = 0.0   # the objective's value at T


def arrival_ends(t: np.ndarray, k_max: int, c: np.ndarray | float = 0.0, ahead: np.ndarray | float = 0.0,
                 lim: np.ndarray | int = 0) -> np.ndarray:
    """e_i(k), k = 1..k_max: when worker i's push after k steps arrives, in seconds after release.

    A worker counts its k steps from its last push, which arrived ``ahead[i]`` seconds before the
    release, and trains on while that push waits, up to ``lim[i]`` steps (0: it pushed blocking).
    If it is still training when the reply comes, its steps go on: it pushes at the end of its
    k-th step since the push, or of the step it is in, whichever is later: max(k, ceil(ahead/t)) t
    - ahead. If it trained its ``lim`` steps and stopped, it resumes at the reply: (k - lim)^+ t.
    Plus its offset c_i (reply, merge and push latency). With ahead = lim = 0 this is c_i + k t_i.
    """
    t = np.asarray(t, dtype=np.float64)
    ks = np.arange(1, k_max + 1, dtype=np.float64)[None, :]
    c, ahead, lim = (np.broadcast_to(np.asarray(x, dtype=np.float64), t.shape)[:, None] for x in (c, ahead, lim))
    tt = t[:, None]
    in_step = np.ceil(ahead / tt * (1 - 1e-9))
    going = np.maximum(ks, in_step) * tt - ahead
    stopped = np.maximum(ks - lim, 0.0) * tt
    return c + np.where(ahead < lim * tt, going, stopped)


def idle_of(T: float, t: np.ndarray, k: np.ndarray, c: np.ndarray | float = 0.0) -> float:
    """Total predicted idle seconds when worker i runs k[i] steps of t[i] seconds (after c[i]) before T."""
    return float(np.sum(T - (c + k * t)))


def steps_for(T: float, t: np.ndarray, k_max: int, c: np.ndarray | float = 0.0) -> np.ndarray:
    """k_i(T): the most steps (1..k_max) each worker finishes by T."""
    k = np.floor((T - c) / t * (1 + 1e-12)).astype(np.int64)   # e_i(k) == T counts as fitting
    return np.clip(k, 1, k_max)


def objective_of(T: np.ndarray | float, idle: np.ndarray | float, n: int, T_min: float, objective: str,
                 penalty: float = LENGTH_PENALTY) -> np.ndarray | float:
    """The sweep's objective at sync time(s) T with total idle seconds `idle` (lower is better)."""
    if objective == "idle":
        return idle
    T_min = max(T_min, 1e-12)
    return idle / (n * T) + penalty * (T - T_min) / T_min


def choose_sync_time(t: np.ndarray, k_max: int, c: np.ndarray | None = None, objective: str = "rate",
                     penalty: float = LENGTH_PENALTY) -> SyncPlan:
    """The sweep: the candidate sync time with the lowest objective (earliest on ties), O(m log m)
    in the m = n * k_max candidates, vectorized."""
    t = np.asarray(t, dtype=np.float64)
    n = t.size
    c = np.zeros(n) if c is None else np.asarray(c, dtype=np.float64)
    ends = arrival_ends(t, k_max, c)
    first = ends[:, 0]
    T_min = float(first.max())                   # nobody can sync before the slowest's first step
    flat = ends.ravel()
    order = np.argsort(flat, kind="stable")
    e = flat[order]
    # passing candidate (w, k >= 2) adds one more step of t_w to the busy time sum_i e_i(k_i)
    grow = np.where(order % k_max >= 1, t[order // k_max], 0.0)
    busy = float(first.sum()) + np.cumsum(grow)
    # a group of equal ends is one candidate: take each group's last entry, at or after T_min
    last = np.ones(e.size, dtype=bool)
    last[:-1] = e[1:] > e[:-1] * (1 + 1e-12)
    ok = last & (e >= T_min * (1 - 1e-12))
    T, idle = e[ok], n * e[ok] - busy[ok]
    score = objective_of(T, idle, n, T_min, objective, penalty)
    j = int(np.flatnonzero(score <= score.min() + 1e-12 * max(1.0, abs(float(score.min()))))[0])
    best_T = float(T[j])
    return SyncPlan(best_T, steps_for(best_T, t, k_max, c), float(idle[j]), float(score[j]))


@dataclass
class StepTimePredictor:
    """Per-worker step time (from its last `window` reports) and arrival offset, cached."""

    n_workers: int
    window: int = 5
    estimator: str = "median"
    history: list = field(init=False)
    residuals: list = field(init=False)

    def __post_init__(self) -> None:
        ESTIMATOR.check(self.estimator)
        self.history = [deque(maxlen=self.window) for _ in range(self.n_workers)]
        self.residuals = [deque(maxlen=self.window) for _ in range(self.n_workers)]
        self._t = np.full(self.n_workers, np.nan)
        self._c = np.full(self.n_workers, np.nan)

    def _estimate(self, w: int, step_s: float) -> float:
        h = self.history[w]
        if self.estimator == "ewma":
            old = self._t[w]
            return step_s if np.isnan(old) else EWMA_ALPHA * step_s + (1 - EWMA_ALPHA) * old
        return float(np.median(h)) if self.estimator == "median" else float(np.percentile(h, 90))

    def observe(self, w: int, step_s: float) -> None:
        """Add one report of worker w's mean seconds per step."""
        if step_s > 0:
            self.history[w].append(step_s)
            self._t[w] = self._estimate(w, step_s)

    def observe_round(self, w: int, arrived_s: float, k: int, ahead: float = 0.0, lim: int = 0) -> None:
        """Add one round's offset of worker w: its arrival after release minus the arrival its k
        steps predict (:func:`arrival_ends` with offset 0). It may be negative."""
        t = self._t[w] if not np.isnan(self._t[w]) else 0.0
        base = arrival_ends(np.array([t]), k, 0.0, ahead, lim)[0, k - 1] if t > 0 else 0.0
        self.residuals[w].append(arrived_s - base)
        self._c[w] = float(np.median(self.residuals[w]))

    def predict(self) -> np.ndarray:
        """Predicted seconds per step for every worker (workers with no report: the others' mean)."""
        t = self._t
        if np.isnan(t).all():
            return np.ones_like(t)
        return np.where(np.isnan(t), np.nanmean(t), t)

    def offsets(self) -> np.ndarray:
        """Predicted arrival offset of every worker (no round yet: the others' median; 0 before any)."""
        c = self._c
        if np.isnan(c).all():
            return np.zeros_like(c)
        return np.where(np.isnan(c), np.nanmedian(c), c)

    def restore(self, history: list, residuals: list) -> None:
        """Refill from saved histories (a resumed run)."""
        for w, (h, r) in enumerate(zip(history, residuals)):
            for x in h:
                self.observe(w, float(x))
            self.residuals[w].extend(r)
            if self.residuals[w]:
                self._c[w] = float(np.median(self.residuals[w]))


@dataclass
class Round:
    """One PSP round: what was predicted at release and what happened."""

    released_at: float
    T: float
    k: np.ndarray
    predicted_idle: float
    fallback: bool
    predicted: np.ndarray    # predicted seconds after release of each worker's push
    arrived: np.ndarray      # actual seconds after release (nan: not scored: a DONE push, or left)
    critical: int = -1       # the worker whose arrival the plan makes last
    ahead: np.ndarray | None = None   # seconds each worker's push arrived before the release
    lim: np.ndarray | None = None     # steps each worker could train while its push waited
    t: np.ndarray | None = None       # the predicted step times and offsets the plan used
    c: np.ndarray | None = None
    steps: np.ndarray | None = None   # the steps each worker's push will carry (k, or its lease's fewer)

    def __post_init__(self) -> None:
        if self.steps is None:
            self.steps = self.k.copy()

    def predict(self, w: int) -> float:
        """Worker w's predicted arrival after release, for its `steps[w]` steps."""
        t = self.t[w:w + 1]
        return float(arrival_ends(t, int(self.steps[w]), self.c[w], self.ahead[w], self.lim[w])[0, -1])

    def errors(self) -> np.ndarray:
        """Per scored worker |actual - predicted arrival| / the predicted round length; empty when
        fewer than two workers were scored (a lone worker's round says nothing about the plan)."""
        ok = ~np.isnan(self.arrived)
        if ok.sum() < 2:
            return np.zeros(0)
        return np.abs(self.arrived[ok] - self.predicted[ok]) / max(float(self.predicted.max()), 1e-9)

    def relative_error(self) -> float:
        """Mean relative error of the round (nan when it is not scored)."""
        e = self.errors()
        return float(e.mean()) if e.size else float("nan")


class PSP(BSP):
    """Predicted synchronous parallel: BSP rounds whose length the server plans.

    Releases like BSP (every active worker has pushed) and adds the round's deltas in rank
    order; ``aggregate="normalized"`` divides each delta by the steps it carries. At each
    release it predicts step times and offsets, chooses the sync time, gives each worker its
    k_i and marks the critical worker. When the prediction error of the last scored rounds
    exceeds ``fallback_error`` it plans k=1 for everyone (BSP), retrying the plan every
    ``retry_every`` rounds until predictions recover.
    """

    name = "psp"
    lockstep = False

    def __init__(self, n_workers: int, k_max: int = 8, aggregate: str = "sum",
                 fallback_error: float = 0.5, window: int = 5, error_rounds: int = 3,
                 min_gain: float = 0.3, estimator: str = "median", objective: str = "rate",
                 retry_every: int = 4, train_while_waiting: bool = True) -> None:
        K_MAX.check(k_max)
        AGGREGATE.check(aggregate)
        OBJECTIVE.check(objective)
        self.k_max = k_max
        self.aggregate = aggregate
        self.fallback_error = fallback_error
        self.error_rounds = error_rounds
        self.min_gain = min_gain
        self.objective = objective
        self.retry_every = retry_every
        self.train_while_waiting = train_while_waiting
        # steps each worker's lease leaves it beyond its coming push (what it may train while it waits)
        self._room = np.full(n_workers, k_max, dtype=np.int64)
        self.predictor = StepTimePredictor(n_workers, window, estimator)
        self.rounds: list[Round] = []
        self._plan = np.ones(n_workers, dtype=np.int64)
        self._critical = -1
        self._since_fallback = 0

    def on_push(self, book: Book, w: int) -> None:
        """Feed worker w's reported step time to the predictor; score its arrival in the round."""
        self.predictor.observe(w, float(book.step_s[w]))
        if not self.rounds or book.last_push[w]:
            return                          # a DONE push ends the worker's rounds: not a prediction
        r = self.rounds[-1]
        if np.isnan(r.arrived[w]):
            r.arrived[w] = book.arrived_at[w] - r.released_at
            self.predictor.observe_round(w, float(r.arrived[w]), int(r.steps[w]), float(r.ahead[w]), int(r.lim[w]))

    def in_fallback(self) -> bool:
        """True while recent predictions were too far off to trust."""
        recent: list[float] = []
        # the last error_rounds scored rounds among the last few: O(1) per round, not O(rounds)
        for r in self.rounds[-8 * self.error_rounds:][::-1]:
            e = r.relative_error()
            if not np.isnan(e):
                recent.append(e)
                if len(recent) == self.error_rounds:
                    break
        return bool(recent) and float(np.mean(recent)) > self.fallback_error

    def release(self, book: Book) -> list[int]:
        released = super().release(book)
        if released:
            self._replan(book)
        return released

    def choose(self, t: np.ndarray, c: np.ndarray | None = None) -> tuple[SyncPlan, bool]:
        """This round's plan from predicted step times and offsets, and whether it fell back to BSP."""
        c = np.zeros(t.size) if c is None else c
        T = float((c + t).max())
        ones = np.ones(t.size, dtype=np.int64)
        idle = idle_of(T, t, ones, c)
        bsp = SyncPlan(T, ones, idle, float(objective_of(T, idle, t.size, T, self.objective)))
        if self.in_fallback():
            self._since_fallback += 1
            if self._since_fallback % self.retry_every:
                return bsp, True            # ... retrying the real plan every retry_every rounds
        else:
            self._since_fallback = 0
        plan = choose_sync_time(t, self.k_max, c, self.objective)
        return (plan if plan.score <= (1 - self.min_gain) * bsp.score else bsp), False

    def _replan(self, book: Book) -> None:
        p = self.predictor
        t, c = p.predict(), p.offsets()
        now = float(book.arrived_at[book.waiting].max()) if book.waiting.any() else 0.0
        # how far each worker is into its next steps: its push waited `ahead` seconds, in which it
        # trained (up to its last plan, the schedule's cap) unless it pushed blocking
        ahead = np.maximum(now - book.arrived_at, 0.0)
        lim = np.minimum(self._plan, self._room) if self.train_while_waiting else np.zeros_like(self._plan)
        if self._critical >= 0:
            lim[self._critical] = 0
        self._room[:] = self.k_max
        plan, fallback = self.choose(t, c)
        self._plan = plan.k
        predicted = arrival_ends(t, self.k_max, c, ahead, lim)[np.arange(t.size), plan.k - 1]
        active = book.active
        # the latest predicted arrival closes the round; on a tie, the worker with the longest step
        self._critical = int(np.lexsort((t, np.where(active, predicted, -np.inf)))[-1]) if active.any() else -1
        self.rounds.append(Round(now, plan.T, plan.k.copy(), plan.idle, fallback, predicted,
                                 np.full(t.size, np.nan), self._critical, ahead, lim, t, c))

    def granted(self, book: Book, w: int, steps: int) -> None:
        """A lease shorter than the plan: worker w pushes after its lease's steps, and blocks."""
        if not self.rounds or steps < 1:
            return
        r = self.rounds[-1]
        r.steps[w] = min(int(r.k[w]), steps)
        self._room[w] = max(0, min(self.k_max, steps - int(r.steps[w])))
        if r.steps[w] < r.k[w]:
            r.predicted[w] = r.predict(w)

    def plan(self, book: Book, w: int) -> int:
        return int(self._plan[w])

    def critical(self, book: Book, w: int) -> bool:
        """Whether worker w's arrival closes the coming round (it pushes on plan and blocks)."""
        return w == self._critical

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
                "plan": self._plan.tolist(), "critical": self._critical}

    def restore(self, state: dict) -> None:
        self.predictor.restore(state["history"], state["residuals"])
        self._plan = np.array(state["plan"], dtype=np.int64)
        self._critical = int(state.get("critical", -1))

    def report(self) -> dict:
        """Per-round record for the summary and metrics file."""
        rs = self.rounds
        errors = np.concatenate([r.errors() for r in rs]) if rs else np.zeros(0)
        scored = [r for r in rs if r.errors().size]
        return {
            "rounds": len(rs),
            "fallback_rounds": int(sum(r.fallback for r in rs)),
            # the share of fallback rounds among those where two or more workers were scored
            "fallback_share": (float(np.mean([r.fallback for r in scored])) if scored else 0.0),
            "mean_relative_error": float(errors.mean()) if errors.size else 0.0,
            "median_relative_error": float(np.median(errors)) if errors.size else 0.0,
            "p90_relative_error": float(np.percentile(errors, 90)) if errors.size else 0.0,
            "predicted_idle_s": float(sum(r.predicted_idle for r in rs)),
            "T": [r.T for r in rs],
            "k": [r.k.tolist() for r in rs],
            "critical": [r.critical for r in rs],
            "predicted_s": [r.predicted.tolist() for r in rs],
            "actual_s": [np.where(np.isnan(r.arrived), -1.0, r.arrived).tolist() for r in rs],
        }


@dataclass
class PspSchedule(Schedule):
    """Predicted synchronous parallel, worker side: run the planned steps, push, keep training
    while the round closes, fold those steps into the next delta.

    Steps are counted from the push: steps trained while it was pending count toward the next
    plan, so a worker pushes after its planned k steps, not k plus the steps of the wait. The
    critical worker (the one the plan makes last, flagged in its reply) pushes at its planned
    step and blocks for the reply: the round closes with its push and it does not overrun it.
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
        # steps since the push: those trained while it was pending, then those since its reply
        if st.steps_while_pending + st.steps_since_reply < st.plan:
            return Action.CONTINUE
        if st.critical or not self.train_while_waiting:
            return Action.PUSH_AND_WAIT
        return Action.PUSH


def make(config, n_workers: int) -> tuple[PSP, PspSchedule]:
    """PSP's server policy and worker schedule for a config."""
    return (PSP(n_workers, config.psp_k_max, config.psp_aggregate, estimator=config.psp_estimator,
                objective=config.psp_objective, train_while_waiting=config.psp_wait == "train"),
            PspSchedule(max_wait_steps=config.psp_k_max, train_while_waiting=config.psp_wait == "train"))
