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
    p.add_argument("--data", metavar="FILE", help="rows to predict: .npz, .h5/.hdf5 or libsvm text")
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
    X, y = read_file(args.data, model.n_features_in_)
    out = model.predict_proba(X) if args.proba else model.predict(X)
    if args.out and args.out.endswith(".npy"):
        np.save(args.out, out)
    else:
        fmt = "%.6g" if args.proba else "%s"
        np.savetxt(args.out or sys.stdout, out, fmt=fmt)
    known = np.isin(y, model.classes_)
    if y.size and known.all():
        print(f"{args.data}: {y.size} rows, accuracy {model.score(X, y):.4f} ({model!r})", file=sys.stderr)
    return 0


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
