"""tests/need.py: a missing prerequisite skips with its reason, and fails under CI=true."""
import shutil
import sys
from pathlib import Path

import pytest

import launch
import need as need_mod
from need import need, need_fashion_mnist


@pytest.mark.parametrize("ci", ["", "false", "0"])
def test_need_skips_with_the_reason_outside_ci(ci, monkeypatch):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="no mpiexec here"):
        need("mpiexec", "no mpiexec here")


@pytest.mark.parametrize("ci", ["true", "TRUE", " true"])
def test_need_fails_under_ci(ci, monkeypatch):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match="mpiexec missing under CI=true.*no mpiexec here"):
        need("mpiexec", "no mpiexec here")


def test_required_overrides_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception):
        need("x", "why", required=False)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.fail.Exception):
        need("x", "why", required=True)


def test_no_mpiexec_fails_the_end_to_end_tests_under_ci(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="mpiexec"):
        launch.mpiexec()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no mpiexec"):
        launch.mpiexec()


@pytest.mark.parametrize("ci,uid,outcome", [("true", 0, pytest.fail.Exception), ("true", 1000, pytest.skip.Exception),
                                            ("", 0, pytest.skip.Exception)])
def test_missing_fashion_mnist_fails_only_under_ci_as_root(ci, uid, outcome, tmp_path, monkeypatch):
    monkeypatch.setattr(need_mod, "FASHION_DIR", tmp_path / "absent")
    monkeypatch.setattr(need_mod.os, "geteuid", lambda: uid)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="dataset-fashion-mnist"):
        need_fashion_mnist()
    monkeypatch.setattr(need_mod, "FASHION_DIR", tmp_path)       # present: nothing happens
    need_fashion_mnist()


pytest_plugins = ["pytester"]


def test_a_marked_test_and_the_stage_line_in_a_real_session(pytester, monkeypatch):
    """The needs_fashion mark goes through conftest; the stage line counts what ran."""
    conftest = str(Path(__file__).with_name("conftest.py"))
    pytester.makeconftest(f"import runpy\nglobals().update((k, v) for k, v in runpy.run_path({conftest!r}).items()\n"
                          "                 if k.startswith('pytest_'))\n")
    pytester.makeini("[pytest]\nmarkers =\n    needs_fashion: x\n")
    pytester.makepyfile("import pytest\n\n@pytest.mark.needs_fashion\ndef test_real(): pass\n\n"
                        "def test_ok(): pass\n\ndef test_bad(): assert 0\n")
    monkeypatch.setattr(need_mod, "FASHION_DIR", pytester.path / "absent")
    monkeypatch.setenv("MPIKANEL_TEST_STAGE", "stage 9")
    monkeypatch.setenv("CI", "false")
    result = pytester.runpytest_inprocess("-rs")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*absent (apt-get install dataset-fashion-mnist)*",
                                 "*= 1 failed, 1 passed, 1 skipped in *",
                                 "stage 9: 1 passed, 1 failed, 1 skipped, 0 errors"])
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(need_mod.os, "geteuid", lambda: 0)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1, errors=1)
    result.stdout.fnmatch_lines(["stage 9: 1 passed, 1 failed, 0 skipped, 1 errors"])
