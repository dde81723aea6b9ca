"""``python -m mpikanel.predict``: predictions of a saved model on a data file, or a checkpoint exported as a model."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from .errors import InputError


def build_parser() -> argparse.ArgumentParser:
    """The command-line flags."""
    p = argparse.ArgumentParser(prog="python -m mpikanel.predict", description=__doc__.split(": ", 1)[1])
    p.add_argument("--model", required=True, metavar="PATH",
                   help="model file (from --save-model); with --export, the file to write")
    p.add_argument("--data", metavar="FILE", help="rows to predict: .npz or .h5/.hdf5 with X (and y, optional), or "
                                                   "libsvm text (label '?' for rows without one); labels, where "
                                                   "every row has one, only give the accuracy")
    p.add_argument("--out", metavar="PATH", help="write the predictions here (.npy, else one per line); "
                                                  "default: standard output")
    p.add_argument("--proba", action="store_true", help="write class probabilities instead of labels")
    p.add_argument("--export", metavar="CHECKPOINT", help="write this checkpoint's parameters as a model file")
    return p


def run(args: argparse.Namespace) -> int:
    """Export or predict; returns the exit code."""
    from .model_io import export_checkpoint, load_model

    if args.export:
        path = export_checkpoint(args.export, args.model)
        print(f"wrote {path}", file=sys.stderr)
        return 0
    if not args.data:
        raise InputError("--data FILE is needed to predict (or --export CHECKPOINT to export)")
    from .data import read_file

    model = load_model(args.model)
    X, y = read_file(args.data, model.n_features_in_, labels=False)
    out = model.predict_proba(X) if args.proba else model.predict(X)
    if args.out and args.out.endswith(".npy"):
        np.save(args.out, out)
    else:
        fmt = "%.6g" if args.proba else "%s"
        np.savetxt(args.out or sys.stdout, out, fmt=fmt)
    print(f"{args.data}: {y.size} rows, {score_text(model, X, y)} ({model!r})", file=sys.stderr)
    return 0


def score_text(model, X, y: np.ndarray) -> str:
    """The accuracy on the rows' labels when every row has one the model knows; else why there is none."""
    labelled = ~np.isnan(y) if y.dtype.kind == "f" else np.ones(y.shape, dtype=bool)
    if not labelled.any():
        return "no labels (predictions only)"
    if not labelled.all():
        return f"{int((~labelled).sum())} rows without a label: no accuracy"
    unknown = ~np.isin(y, model.classes_)
    if unknown.any():
        return f"label {y[np.flatnonzero(unknown)[0]]:g} is not one the model was trained on: no accuracy"
    return f"accuracy {model.score(X, y):.4f}"


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 on success, 2 on bad input (one line, no traceback)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args)
    except InputError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except AttributeError as exc:                  # predict_proba of a model without probabilities
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
