"""Provenance of a result set (git state, refusal of a dirty tree, provenance.json) and ``bench report``."""
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpikanel.bench import provenance
from mpikanel.bench.__main__ import SUBCOMMANDS, main
from mpikanel.bench.report import build, holds

ROOT = Path(__file__).resolve().parents[1]
PSP_PLAN = ["psp-plan", "--workers", "20", "--rounds", "2"]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git checkout with one committed file, standing in for this one."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


def test_git_state_counts_changes_but_not_untracked_results(repo):
    head, changed = provenance.git_state(repo / "out", repo)
    assert len(head) == 40 and changed == []
    (repo / "out").mkdir()
    (repo / "out" / "results.json").write_text("{}")        # the results being written: not a change
    assert provenance.git_state(repo / "out", repo)[1] == []
    assert provenance.git_state(None, repo)[1] == ["?? out/"]
    (repo / "notes.txt").write_text("untracked elsewhere")
    (repo / "code.py").write_text("x = 2\n")
    assert sorted(provenance.git_state(repo / "out", repo)[1]) == [" M code.py", "?? notes.txt"]
    assert provenance.git_commit(repo) == head + "-dirty"
    assert provenance.git_state(None, repo.parent / "elsewhere") == (None, None)


def test_a_dirty_tree_is_refused_in_one_line_and_allowed_with_allow_dirty(repo, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    out = tmp_path / "set"
    assert main([*PSP_PLAN, "--out", str(out)]) == 0          # clean
    prov = json.loads((out / provenance.PROVENANCE).read_text())
    assert prov["dirty"] is False and prov["git_commit"] == provenance.git_state(None, repo)[0]
    assert prov["command"] == [sys.executable, "-m", "mpikanel.bench", *PSP_PLAN, "--out", str(out)]
    assert prov["exit_code"] == 0 and prov["wall_s"] > 0
    assert prov["mpi_library"] and "unknown" not in prov["mpi_library"]
    assert prov["versions"]["numpy"] and prov["versions"]["numba"] and prov["versions"]["python"]
    assert prov["machine"]["cores"] >= 1 and prov["machine"]["memory_gib"] > 0
    assert len(prov["load_average_start"]) == len(prov["load_average_end"]) == 3
    assert prov["date_utc"].endswith("+00:00")
    (repo / "code.py").write_text("x = 2\n")
    capsys.readouterr()
    assert main([*PSP_PLAN, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "uncommitted change" in err and "--allow-dirty" in err
    assert not (tmp_path / "refused").exists()
    assert main([*PSP_PLAN, "--out", str(tmp_path / "dirty"), "--allow-dirty"]) == 0
    prov = json.loads((tmp_path / "dirty" / provenance.PROVENANCE).read_text())
    assert prov["dirty"] is True and prov["dirty_paths"] == [" M code.py"]


def test_outside_git_nothing_is_recorded_as_clean(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    assert main([*PSP_PLAN, "--out", str(tmp_path / "a")]) == 2
    assert "not a git checkout" in capsys.readouterr().err
    assert main([*PSP_PLAN, "--out", str(tmp_path / "b"), "--allow-dirty"]) == 0
    prov = json.loads((tmp_path / "b" / provenance.PROVENANCE).read_text())
    assert prov["git_commit"] is None and prov["dirty"] is None


def test_every_result_writing_subcommand_takes_allow_dirty():
    writers = {n for n, (m, _) in SUBCOMMANDS.items() if hasattr(importlib.import_module(m), "results_dir")}
    assert writers == {"mpi", "sync", "psp-plan", "simcheck", "scale", "checkpoint", "kernels", "server"}


def test_report_reads_the_committed_sets_every_one_with_provenance():
    text, unreadable, no_prov = build(ROOT / "docs" / "results")
    assert "## sync-paced-17/results.json" in text and "## sparse-k4/results.json" in text
    assert "## server/server.json" in text and "## mpi/results.json" in text
    assert "does NOT hold" not in text          # every table rebuilt is the one the committed markdown shows
    assert any(u.startswith("csr-compact/") for u in unreadable) and any(u.startswith("reshape:") for u in unreadable)
    assert no_prov == [] and "- (none)" in text.split("## No provenance")[1]


def test_report_names_a_set_with_provenance_and_catches_a_changed_table(tmp_path):
    shutil.copytree(ROOT / "docs" / "results" / "sparse-k4", tmp_path / "a")
    (tmp_path / "a" / provenance.PROVENANCE).write_text(json.dumps(
        {"git_commit": "abc", "dirty": False, "date_utc": "2026-12-04T00:00:00+00:00", "mpi_library": "MPI x",
         "machine": {"cores": 2}, "load_average_start": [1, 1, 1], "load_average_end": [2, 2, 2]}))
    shutil.copytree(ROOT / "docs" / "results" / "sparse-w8", tmp_path / "b")
    (tmp_path / "b" / provenance.PROVENANCE).unlink(missing_ok=True)
    md = tmp_path / "b" / "results.md"
    md.write_text(md.read_text().replace("| bsp |", "| BSP |", 1))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text('{"something": 1}')
    text, unreadable, no_prov = build(tmp_path)
    assert "provenance: commit abc, 2026-12-04" in text and no_prov == ["b", "c"]
    assert "the committed results.md holds" in text and "the committed results.md does NOT hold" in text
    assert unreadable == ["c/results.json: results.json: a format of no bench subcommand"]
    assert holds("a\n| x |\n", "| x |") and not holds("a\n", "| x |") and not holds("| x |", "no table")


def test_report_writes_out_file(tmp_path):
    assert main(["report", "--out", str(tmp_path / "r.md")]) == 0
    assert "## Sets not read" in (tmp_path / "r.md").read_text()
    assert main(["report", "--results", str(tmp_path / "none")]) == 2


def test_mpi_table_shows_no_control_characters_from_an_mpi_version_string():
    from mpikanel.bench.mpi import format_markdown
    doc = {"command": "c", "commit": "x", "load_before": [0], "load_after": [0], "cpus": 2, "repeats": 1,
           "venvs": [{"name": "openmpi", "mpi": "Open MPI v5, Sep 16, 2026\x00", "mpi4py": "4"}], "table": {}}
    text = format_markdown(doc)
    assert "2026 " in text and not any(ord(c) < 32 and c != "\n" for c in text)


def test_mpi_table_has_the_paced_rows_lower_wins():
    from mpikanel.bench.mpi import format_markdown, summarize
    raw = {"a": {"paced17": [{"wall_s": 5.0, "cores_used": 0.6}, {"wall_s": 5.2, "cores_used": 0.7}]},
           "b": {"paced17": [{"wall_s": 9.0, "cores_used": 2.0}]}}
    doc = {"command": "x", "commit": "c", "load_before": [0], "load_after": [0], "cpus": 2, "repeats": 2,
           "venvs": [{"name": "a"}, {"name": "b"}], "table": summarize(raw)}
    md = format_markdown(doc)
    assert "| paced BSP job (17 ranks, 20 ms steps), wall | **5.100 s (5.000-5.200)** | 9.000 s |" in md
    assert "| paced BSP job (17 ranks), cores used while training | **0.650 cores (0.600-0.700)** | 2.000 cores |" in md
