"""Plots of metrics files: test (and validation) loss vs wall time, and per-worker time breakdowns.

Usage: ``python -m mpikanel.plot RUN.h5 [RUN.h5 ...] -o loss.png [--timeline timeline.png]``
(PNG, SVG or PDF by the file suffix). Needs matplotlib (``pip install matplotlib``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .errors import InputError
from .metrics import read_metrics

SUFFIXES = (".png", ".svg", ".pdf")
TIMELINE_PARTS = (("compute_s", "compute", "tab:blue"), ("comm_s", "comm", "tab:orange"),
                  ("wait_s", "wait", "tab:gray"), ("injected_s", "injected", "tab:red"))


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; InputError telling how to install it if missing."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("plotting needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def run_label(run: dict) -> str:
    """A run's legend label: its sync model and scenario attrs, else the file stem."""
    attrs = run.get("attrs", {})
    sync = attrs.get("sync") or run.get("summary", {}).get("sync")
    parts = [str(sync).upper()] if sync else []
    if attrs.get("scenario"):
        parts.append(str(attrs["scenario"]))
    return " ".join(parts) if parts else Path(run.get("path", "run")).stem


def _labels(runs: Sequence[dict]) -> list[str]:
    """Labels for runs, made unique by appending the file stem where they collide."""
    labels = [run_label(r) for r in runs]
    dupes = {x for x in labels if labels.count(x) > 1}
    return [f"{x} ({Path(r.get('path', str(i))).stem})" if x in dupes else x
            for i, (x, r) in enumerate(zip(labels, runs))]


def _check_suffix(path: str | Path) -> None:
    if Path(path).suffix.lower() not in SUFFIXES:
        raise InputError(f"{path}: output must end in one of {', '.join(SUFFIXES)}")


def plot_loss_curves(runs: Sequence[dict], path: str | Path, target_loss: float | None = None,
                     logy: bool = False, title: str | None = None,
                     keys: Sequence[str] = ("test_loss", "val_loss")) -> None:
    """Figure 1: loss vs wall time of all runs on one chart (test solid, validation dashed where recorded)."""
    _check_suffix(path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    for run, label in zip(runs, _labels(runs)):
        _curve_lines(ax, run["curve"], label, keys)
    if target_loss is not None:
        ax.axhline(target_loss, color="black", linestyle="--", linewidth=1,
                   label=f"target {target_loss:g}")
    if logy:
        ax.set_yscale("log")
    names = [CURVE_NAMES.get(k, k) for k in keys]
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel(" / ".join(names))
    ax.set_title(title or f"{' and '.join(names).capitalize()} vs wall time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    _save(plt, fig, path)


#: curve key -> axis and legend name
CURVE_NAMES = {"test_loss": "test loss", "val_loss": "validation loss"}


def _curve_lines(ax: Any, curve: dict, label: str, keys: Sequence[str]) -> None:
    """One run's curves: the first present key solid, the others dashed in the same colour."""
    present = [k for k in keys if k in curve]
    color = None
    for i, key in enumerate(present):
        suffix = "" if len(present) == 1 else f" ({CURVE_NAMES.get(key, key)})"
        (line,) = ax.plot(curve["time_s"], curve[key], marker="." if i == 0 else None, markersize=3,
                          linestyle="-" if i == 0 else "--", color=color, label=label + suffix)
        color = line.get_color()


def plot_timeline(runs: Sequence[dict], path: str | Path) -> None:
    """Figure 2: per-worker stacked bars of compute/comm/wait/injected seconds, one subplot per run;
    a worker that skipped exchanges (ESP) is marked with its skip count by reason."""
    _check_suffix(path)
    plt = _pyplot()
    n = len(runs)
    height = sum(1.0 + 0.35 * max(1, len(r["workers"])) for r in runs) + 0.5
    fig, axes = plt.subplots(n, 1, figsize=(9, max(3.0, height)), sharex=True, squeeze=False,
                             layout="constrained")
    for ax, run, label in zip(axes[:, 0], runs, _labels(runs)):
        _timeline_axes(ax, run, label)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=len(TIMELINE_PARTS), frameon=False)
    axes[-1, 0].set_xlabel("seconds")
    _save(plt, fig, path)


def _timeline_axes(ax: Any, run: dict, label: str) -> None:
    """One run's stacked horizontal bars, one bar per worker."""
    workers = run["workers"]
    y = np.arange(len(workers))
    left = np.zeros(len(workers))
    for key, name, color in TIMELINE_PARTS:
        widths = np.array([float(w.get(key, 0.0) or 0.0) for w in workers])
        ax.barh(y, widths, left=left, color=color, label=name, height=0.7)
        left += widths
    ax.set_yticks(y, [f"rank {w.get('rank', i + 1)}" for i, w in enumerate(workers)])
    per_worker = run.get("summary", {}).get("per_worker") or [{}] * len(workers)
    for i, (w, pw) in enumerate(zip(workers, per_worker)):
        text = _skip_text(w, pw)
        if text:        # ESP: how many exchanges this worker skipped, and why
            ax.annotate(text, (left[i], y[i]), xytext=(4, 0), textcoords="offset points", va="center", fontsize=7)
    ax.invert_yaxis()
    wall = run.get("summary", {}).get("wall_s")
    ax.set_title(label + (f"  (wall {wall:.2f} s)" if isinstance(wall, (int, float)) else ""))
    ax.grid(True, axis="x", alpha=0.3)


def _skip_text(worker: dict, per_worker: dict) -> str:
    """'skips N (cost a, value b, busy c)' for a worker that skipped exchanges, else ''."""
    skips = int(per_worker.get("skips", worker.get("skips", 0)) or 0)
    if skips <= 0:
        return ""
    reasons = per_worker.get("skips_by_reason") or {}
    detail = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()) if v)
    return f"skips {skips}" + (f" ({detail})" if detail else "")


def _save(plt: Any, fig: Any, path: str | Path) -> None:
    try:
        fig.savefig(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write the figure: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def plot_psp_predictions(runs: Sequence[dict], path: str | Path) -> None:
    """PSP runs: predicted vs actual arrival of every push (top) and both over the rounds (bottom)."""
    plt = _pyplot()
    psp = [(label, run["summary"]["psp"]) for label, run in zip(_labels(runs), runs) if run["summary"].get("psp")]
    if not psp:
        raise InputError("no PSP run among the metrics files (nothing for --psp)")
    fig, axes = plt.subplots(2, len(psp), figsize=(5 * len(psp), 8), squeeze=False, layout="constrained")
    for col, (label, rec) in enumerate(psp):
        ax, track = axes[0][col], axes[1][col]
        predicted = np.array(rec["predicted_s"], dtype=float)
        actual = np.array(rec["actual_s"], dtype=float)
        ok = actual >= 0                              # -1: the worker did not push in that round
        rounds = np.arange(len(predicted))
        for w in range(predicted.shape[1] if predicted.ndim == 2 else 0):
            m = ok[:, w]
            dots = ax.scatter(predicted[m, w] * 1e3, actual[m, w] * 1e3, s=10, label=f"worker {w + 1}")
            track.plot(rounds, predicted[:, w] * 1e3, lw=1, color=dots.get_facecolor()[0])
            track.scatter(rounds[m], actual[m, w] * 1e3, s=6, color=dots.get_facecolor()[0])
        hi = float(np.nanmax(np.concatenate([predicted[ok], actual[ok]]))) * 1e3 if ok.any() else 1.0
        ax.plot([0, hi], [0, hi], "k--", lw=1, label="exact")
        ax.set_xlabel("predicted arrival after release (ms)")
        ax.set_ylabel("actual arrival (ms)")
        ax.set_title(f"{label}: {rec['rounds']} rounds, {rec['fallback_rounds']} BSP fallback")
        ax.legend(fontsize=7)
        track.set_xlabel("round")
        track.set_ylabel("arrival after release (ms): predicted (line), actual (dots)")
    _save(plt, fig, path)


def build_parser() -> argparse.ArgumentParser:
    """The `python -m mpikanel.plot` argument parser."""
    p = argparse.ArgumentParser(prog="python -m mpikanel.plot",
                                description="Plot mpikanel metrics files (HDF5 written by a run).")
    p.add_argument("metrics", nargs="+", metavar="METRICS.h5", help="metrics files to compare")
    p.add_argument("-o", "--output", metavar="PATH", help="test loss (validation loss dashed, when recorded) vs wall time figure (.png/.svg/.pdf)")
    p.add_argument("--timeline", metavar="PATH", help="per-worker compute/comm/wait/injected figure")
    p.add_argument("--psp", metavar="PATH", help="PSP runs: predicted vs actual arrival per round")
    p.add_argument("--target-loss", type=float, metavar="LOSS", help="draw a horizontal target line")
    p.add_argument("--logy", action="store_true", help="log-scale loss axis")
    p.add_argument("--title", help="title of the loss figure")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code (2 on bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.output and not args.timeline and not args.psp:
        parser.error("nothing to draw: give -o PATH, --timeline PATH and/or --psp PATH")
    try:
        for out in (args.output, args.timeline, args.psp):
            if out:
                _check_suffix(out)
        _pyplot()
        runs = [read_metrics(m) for m in args.metrics]
        if args.output:
            plot_loss_curves(runs, args.output, args.target_loss, args.logy, args.title)
        if args.timeline:
            plot_timeline(runs, args.timeline)
        if args.psp:
            plot_psp_predictions(runs, args.psp)
    except InputError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
