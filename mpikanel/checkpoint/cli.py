"""``python -m mpikanel.checkpoint``: inspect checkpoints (verified) or export one as a model file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from .layout import MANIFEST, NAME_PATTERN, checkpoint_paths
from .read import load


def describe_checkpoint(path: Path) -> dict:
    """What one checkpoint holds and whether it loads (every part verified against the manifest)."""
    info: dict[str, Any] = {"path": str(path)}
    try:
        ckpt = load(path, worker_arrays=False)
    except InputError as exc:
        return {**info, "valid": False, "error": str(exc)}
    steps = [int(w["state"].get("stats", {}).get("steps", 0)) if isinstance(w.get("state"), dict) else 0
             for w in ckpt.workers]
    return {**info, "valid": True, "seq": ckpt.seq, "ranks": ckpt.ranks, "servers": ckpt.servers,
            "sync": ckpt.sync, "model": ckpt.model, "n_params": int(ckpt.params.size), "elapsed_s": ckpt.elapsed_s,
            "reason": ckpt.reason, "final": ckpt.final, "mpikanel_version": ckpt.version, "worker_steps": sum(steps),
            "epochs": ckpt.config.get("epochs"), "data": ckpt.config.get("data"),
            "bytes": sum(int(e["bytes"]) for e in ckpt.parts), "files": ckpt.parts}


def latest_valid(directory: Path, described: list[dict]) -> str | None:
    """The checkpoint ``--resume latest --checkpoint-dir directory`` loads (rows already described are reused)."""
    known = {r["path"]: r for r in described}
    for path in checkpoint_paths(directory):
        row = known.get(str(path)) or describe_checkpoint(path)
        if row["valid"]:
            return row["path"]
    return None


def main(argv: list[str] | None = None) -> int:
    """``inspect DIR``: each checkpoint's shape, progress, parts and validity; ``export CKPT OUT``: a model file."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m mpikanel.checkpoint", description="Inspect or export checkpoints.")
    sub = p.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="list a --checkpoint-dir's checkpoints (newest first) or one ckpt-NNNNNN, "
                                          "every part verified against its manifest")
    ins.add_argument("path", help="a --checkpoint-dir or one checkpoint (ckpt-NNNNNN)")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    exp = sub.add_parser("export", help="write a checkpoint's parameters as a model file (mpikanel.load_model)")
    exp.add_argument("checkpoint")
    exp.add_argument("out")
    args = p.parse_args(argv)
    try:
        if args.command == "export":
            from ..model_io import export_checkpoint
            print(f"wrote {export_checkpoint(args.checkpoint, args.out)}")
            return 0
        target = Path(args.path)
        if not target.exists():
            raise InputError(f"{target}: no such checkpoint directory")
        one = target.is_file() or NAME_PATTERN.match(target.name) or (target / MANIFEST).exists()
        paths = [target] if one else checkpoint_paths(target)
        rows = [describe_checkpoint(q) for q in paths]
        # what --resume latest --checkpoint-dir DIR loads: of one checkpoint, its directory's newest valid one
        latest = latest_valid(target.parent if one else target, rows)
        if args.json:
            print(json.dumps({"checkpoints": rows, "resume_latest": latest}, indent=2))
        else:
            for r in rows:
                if r["valid"]:
                    print(f"{r['path']}: valid; seq {r['seq']}, {r['ranks'] - 1} workers, {r['servers']} server"
                          f"{'s' if r['servers'] > 1 else ''}, --sync {r['sync']}, {r['model']} ({r['n_params']} params), "
                          f"{r['worker_steps']} worker steps, {r['elapsed_s']:.1f} s trained, "
                          f"{'final' if r['final'] else r['reason']}, {len(r['files'])} files, {r['bytes']} bytes")
                    if one:
                        for e in r["files"]:
                            print(f"  {e['file']}: {e['role']} {e['index']}, {e['bytes']} bytes, sha256 {e['sha256'][:16]}...")
                else:
                    print(f"{r['path']}: INVALID: {r['error']}")
            where = target.parent if one else target
            print(f"--resume latest --checkpoint-dir {where} would load: {latest or 'nothing (starts fresh)'}")
        return 0 if rows else 1
    except InputError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
