"""Did the layering refactors move a figure? Each refactor's commit against the commit before it.

    python docs/results/refactor-noise/measure.py OUT [REPEATS [BEFORE..AFTER ...]]

For each pair (before, after) below, both trees are exported from this repository's git history
(git archive) and run by this venv's Python and mpiexec (PYTHONPATH points at the tree), each with
its own numba cache, warmed once untimed. Then, REPEATS times (default 3), interleaved and in
alternating order: the README's default job (4 ranks, BSP: wall, pushes/s, the final model's
SHA-256), the same job under ESP and PSP with a 4x straggler on 5 ranks (wall), and ``bench
server`` at 4 ranks (ASP and BSP updates/s). A figure "moves beyond noise" when the before and
after runs' min-max ranges do not overlap (with 3 repeats a figure that did not move still does so
in 1 of 10 cases; with 5, 1 in 126). Pairs given as BEFORE..AFTER run only those.
Writes OUT/results.json and OUT/results.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import h5py
import numpy as np

REPO = Path(__file__).resolve().parents[3]
PAIRS = [
    ("a88fbd8", "77e8a16", "no import circle, dead code out, the engine owns its messages, engine/ moves, one apply function"),
    ("b832337", "c7b7953", "data/ package, one layout module, one mpiexec launcher"),
    ("e1f8917", "a7f915d", "the session module, per-model sync options"),
    ("59a94e6", "f8d113c", "the server core/transport contract, the typed checkpoint coordinator"),
]
BIN = Path(sys.executable).parent
JOBS = {
    "bsp4": (4, []),
    "esp5": (5, ["--sync", "esp", "--slowdown", "1:4"]),
    "psp5": (5, ["--sync", "psp", "--slowdown", "1:4"]),
}
#: (metric, label, higher is better)
METRICS = [("bsp4/wall_s", "default job (4 ranks, BSP), wall s", False),
           ("bsp4/pushes_per_s", "default job, pushes/s", True),
           ("esp5/wall_s", "ESP, 5 ranks, 4x straggler, wall s", False),
           ("psp5/wall_s", "PSP, 5 ranks, 4x straggler, wall s", False),
           ("server4/asp", "server loop, 4 ranks, ASP, upd/s", True),
           ("server4/bsp", "server loop, 4 ranks, BSP, upd/s", True)]


def export(commit: str, root: Path) -> Path:
    """The tree of `commit` under root/commit."""
    tree = root / commit
    tree.mkdir()
    data = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    tar = root / f"{commit}.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(tree, filter="data")
    return tree


def env_for(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "I_MPI_", "HYDRA_", "OMPI_"))}
    env.update(PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / ".numba-cache"))
    return env


def model_sha(path: Path) -> str:
    """SHA-256 over every dataset of a saved model, in name order."""
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                h.update(name.encode())
                h.update(np.ascontiguousarray(obj[()]).tobytes())
        f.visititems(visit)
    return h.hexdigest()


def job(tree: Path, name: str, tmp: Path) -> dict[str, float | str]:
    n, extra = JOBS[name]
    summary, model = tmp / f"{tree.name}-{name}.json", tmp / f"{tree.name}-{name}.h5"
    cmd = [str(BIN / "mpiexec"), "-n", str(n), str(BIN / "python"), "-m", "mpikanel.train", "--quiet", *extra,
           "--summary-json", str(summary), "--save-model", str(model)]
    subprocess.run(cmd, check=True, env=env_for(tree), cwd=tmp, timeout=600, capture_output=True)
    s = json.loads(summary.read_text())
    pushes = sum(int(w.get("pushes", 0)) for w in s.get("per_worker", []))
    return {f"{name}/wall_s": s["wall_s"], f"{name}/pushes_per_s": pushes / s["wall_s"],
            f"{name}/test_loss": s.get("test_loss"), f"{name}/model_sha256": model_sha(model)}


def server(tree: Path, tmp: Path) -> dict[str, float]:
    out = tmp / f"{tree.name}-server.json"
    subprocess.run([str(BIN / "python"), "-m", "mpikanel.bench", "server", "--ranks", "4", "--modes", "asp", "bsp",
                    "--repeats", "1", "--json", str(out)], check=True, env=env_for(tree), cwd=tmp, timeout=600,
                   capture_output=True)
    return {f"server4/{r['mode']}": float(r["updates_per_s"]) for r in json.loads(out.read_text())["results"]}


def measure(tree: Path, tmp: Path) -> dict:
    res: dict = {}
    for name in JOBS:
        res.update(job(tree, name, tmp))
    res.update(server(tree, tmp))
    return res


def cell(xs: list[float]) -> str:
    f = (lambda x: f"{x:.3f}") if max(xs) < 10 else (lambda x: f"{x:,.0f}")
    return f"{f(statistics.median(xs))} ({f(min(xs))}-{f(max(xs))})"


def table(doc: dict) -> str:
    lines = ["| refactor | figure | before | after | after / before (median) | beyond noise |", "|---|---|---|---|---|---|"]
    for pair in doc["pairs"]:
        b, a = pair["runs"][pair["before"]], pair["runs"][pair["after"]]
        for key, label, _ in METRICS:
            xb, xa = [r[key] for r in b], [r[key] for r in a]
            beyond = max(xb) < min(xa) or max(xa) < min(xb)
            lines.append(f"| {pair['before']} -> {pair['after']} | {label} | {cell(xb)} | {cell(xa)} | "
                         f"{statistics.median(xa) / statistics.median(xb):.2f}x | {'**yes**' if beyond else 'no'} |")
        shas = {r["bsp4/model_sha256"] for r in b + a}
        lines.append(f"| {pair['before']} -> {pair['after']} | default job's final model, bitwise | - | - | - | "
                     f"{'the same in all runs' if len(shas) == 1 else f'**{len(shas)} different models**'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    out = Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    chosen = [tuple(a.split("..")) for a in sys.argv[3:]]
    pairs = [p for p in PAIRS if not chosen or (p[0], p[1]) in chosen]
    if len(pairs) != (len(chosen) or len(PAIRS)):
        print(f"measure.py: error: no such pair among {' '.join(f'{b}..{a}' for b, a, _ in PAIRS)}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    doc = {"repeats": repeats, "mpi": "this venv's", "pairs": []}
    with tempfile.TemporaryDirectory(prefix="refactor-noise-") as d:
        root = Path(d)
        for before, after, what in pairs:
            trees = {c: export(c, root) for c in (before, after)}
            for tree in trees.values():
                found = subprocess.run([str(BIN / "python"), "-c", "import mpikanel; print(mpikanel.__file__)"],
                                       env=env_for(tree), cwd=root, capture_output=True, text=True, check=True).stdout
                assert found.startswith(str(tree)), f"{tree.name} imports mpikanel from {found}"
                job(tree, "bsp4", root)     # warm its numba cache, untimed
            runs: dict[str, list[dict]] = {before: [], after: []}
            for rep in range(repeats):
                for c in ((before, after) if rep % 2 == 0 else (after, before)):
                    r = measure(trees[c], root)
                    r["load_1min"] = os.getloadavg()[0]
                    runs[c].append(r)
                    print(f"[refactor-noise] {c} rep {rep + 1}: {json.dumps(r)}", file=sys.stderr, flush=True)
            doc["pairs"].append({"before": before, "after": after, "what": what, "runs": runs})
            (out / "results.json").write_text(json.dumps(doc, indent=2))
    md = table(doc)
    (out / "results.md").write_text("Command: `python docs/results/refactor-noise/measure.py OUT "
                                    f"{' '.join(sys.argv[2:]) or repeats}`\n\n" + md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
