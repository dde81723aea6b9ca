"""``bench report``: the tables of the committed result sets, rebuilt from their machine-readable files.

A result set is each entry of ``--results`` (default docs/results): a directory, or a single
``.json`` file (``bench server --json``, ``bench kernels --json``). Read: the ``results.json`` of
``bench scale`` and ``bench checkpoint`` (their rows), of ``bench sync`` (its tables, one per
scenario; the simulator's sets hold one per ``workers-N`` directory) and of ``bench mpi``;
``psp-plan.json``, ``simcheck.json``, ``server.json`` and ``kernels.json``. Each table is formatted
by its bench's own formatter, and checked against the committed markdown next to it. The rule
that picks the default MPI (:mod:`mpikanel.bench.mpi_rule`) is applied to the ``bench mpi`` sets
together. Sets it cannot read (another format, no JSON) and sets without ``provenance.json`` are
listed at the end.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from . import checkpoint, kernels, mpi, mpi_rule, psp_plan, scale, server, simcheck
from .provenance import PROVENANCE, REPO_ROOT
from .sync import markdown_table


class Unreadable(ValueError):
    """A result set in no format this report knows."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the report."""
    parser.add_argument("--results", default=str(REPO_ROOT / "docs" / "results"),
                        help="directory of result sets (default: this checkout's docs/results)")
    parser.add_argument("--out", metavar="FILE", help="write the markdown here instead of printing it")


def _rows_table(doc: dict) -> str:
    """write_results' sets: bench scale's or bench checkpoint's rows, told apart by their fields."""
    rows = doc["rows"]
    if not isinstance(rows, list) or not rows:
        raise Unreadable("no rows")
    if "write_s" in rows[0]:
        return checkpoint.format_table(rows)
    if "pushes_per_s" in rows[0]:
        return scale.format_table(rows)
    raise Unreadable("rows of neither bench scale nor bench checkpoint")


def _sync_tables(doc: dict) -> str:
    """bench sync's tables, one per scenario, as stored (header -> cell)."""
    parts = []
    for scenario, table in doc["tables"].items():
        rows = table["rows"]
        text = markdown_table(list(rows[0]), [list(r.values()) for r in rows]) if rows else "(no rows)"
        parts.append(f"### {scenario}\n\n{text}")
    return "\n\n".join(parts)


def table_of(path: Path) -> str:
    """The markdown table(s) of one results file; Unreadable when its format is none of the benches'."""
    return _table(_load(path), path.name)


def _load(path: Path) -> object:
    """A results file's JSON document; Unreadable when it is not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Unreadable(f"{path.name}: not JSON ({exc})") from None


def _table(doc: object, name: str) -> str:
    """table_of for a document already read (name: its file's, for the errors)."""
    readers: list[tuple[Callable[[dict], bool], Callable[[dict], str]]] = [
        (lambda d: d.get("benchmark") == "sync" and "tables" in d, _sync_tables),
        (lambda d: d.get("benchmark") == "server", lambda d: server.format_table(d["results"])),
        (lambda d: "venvs" in d and "table" in d, mpi.format_markdown),
        (lambda d: "compute_roof_gflops" in d or "fma_peak_gflops" in d,   # fma_peak_gflops: sets before the gemm roof
         lambda d: kernels.format_markdown(d["results"])),
        (lambda d: "k_max" in d and "rows" in d, lambda d: psp_plan.format_table(d["rows"])),
        (lambda d: "records" in d and "within" in d, lambda d: simcheck.format_table(d["records"])),
        (lambda d: "rows" in d and "command" in d, _rows_table),
    ]
    if isinstance(doc, dict):
        for matches, read in readers:
            if matches(doc):
                try:
                    return read(doc)
                except (KeyError, TypeError, IndexError, ValueError, ZeroDivisionError) as exc:
                    raise Unreadable(f"{name}: {type(exc).__name__} {exc}") from None
    raise Unreadable(f"{name}: a format of no bench subcommand")


def result_files(entry: Path) -> list[Path]:
    """The machine-readable files of one set: itself (a .json), or results.json / psp-plan.json /
    simcheck.json / server.json in it or one directory down (the simulator's workers-N)."""
    if entry.is_file():
        return [entry] if entry.suffix == ".json" else []
    names = ("results.json", "psp-plan.json", "simcheck.json", "server.json")
    found = [entry / n for n in names if (entry / n).is_file()]
    return found or sorted(p for sub in sorted(entry.iterdir()) if sub.is_dir() for n in names
                           if (p := sub / n).is_file())


def _committed_md(path: Path) -> Path | None:
    md = path.with_suffix(".md")
    return md if md.is_file() else None


def holds(markdown: str, tables: str) -> bool:
    """Whether every table (a block of lines starting with '|'; else the whole plain-text table) of
    `tables` appears verbatim in `markdown`."""
    blocks = [b for b in tables.split("\n\n") if b.startswith("|")] or [tables.strip()]
    return bool(blocks) and all(b in markdown for b in blocks)


def _provenance_line(entry: Path) -> str | None:
    path = entry / PROVENANCE
    if not entry.is_dir() or not path.is_file():
        return None
    try:
        p = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return f"{PROVENANCE} unreadable ({exc})"
    return (f"commit {p.get('git_commit')}{' (dirty)' if p.get('dirty') else ''}, {p.get('date_utc')}, "
            f"{p.get('mpi_library')}, {p.get('machine', {}).get('cores')} cores, load "
            f"{p.get('load_average_start', ['?'])[0]} -> {p.get('load_average_end', ['?'])[0]}")


def build(results: Path) -> tuple[str, list[str], list[str]]:
    """The report's markdown, the sets it could not read (with why), the sets without provenance."""
    sections, unreadable, no_provenance, mpi_docs = [], [], [], []
    for entry in sorted(results.iterdir()):
        name = entry.name
        prov = _provenance_line(entry)
        if prov is None:
            no_provenance.append(name)
        files = result_files(entry)
        if not files:
            unreadable.append(f"{name}: no results.json, psp-plan.json, simcheck.json or server.json")
            continue
        for path in files:
            label = str(path.relative_to(results))
            try:
                doc = _load(path)
                table = _table(doc, path.name)
            except Unreadable as exc:
                unreadable.append(f"{label}: {exc}")
                continue
            if isinstance(doc, dict) and "venvs" in doc and "table" in doc:
                mpi_docs.append(doc)
            md = _committed_md(path)
            check = ("" if md is None else
                     f"; the committed {md.name} {'holds' if holds(md.read_text(), table) else 'does NOT hold'} "
                     "these tables")
            sections.append(f"## {label}\n\nprovenance: {prov or 'none'}{check}\n\n{table}\n")
    if mpi_docs:
        sections.append("## The default MPI, by its rule\n\n"
                        + mpi_rule.format_verdict(mpi_rule.verdict(mpi_rule.merge_tables(mpi_docs))) + "\n")
    tail = ["## Sets not read", ""] + [f"- {u}" for u in unreadable or ["(none)"]]
    tail += ["", "## No provenance", ""] + [f"- {n}: no provenance" for n in no_provenance or []] \
        + ([] if no_provenance else ["- (none)"])
    text = f"# Result sets in {results}\n\n" + "\n".join(sections) + "\n" + "\n".join(tail) + "\n"
    return text, unreadable, no_provenance


def run(args: argparse.Namespace) -> int:
    """Print (or write to --out) the rebuilt tables and the lists of unread and unprovenanced sets."""
    results = Path(args.results)
    if not results.is_dir():
        print(f"mpikanel bench report: error: {results} is not a directory", file=sys.stderr)
        return 2
    text, _, _ = build(results)
    if args.out:
        Path(args.out).write_text(text)
        print(f"report: {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0
