"""The SLURM test harness itself: a controller that does not answer once is retried, not a failure."""
from __future__ import annotations

from pathlib import Path

import pytest

from slurm_support import Slurm, controller_unreachable


def _flaky_command(tmp_path: Path, fails: int, message: str) -> str:
    """A stand-in SLURM client that fails `fails` times with `message`, then succeeds."""
    script = tmp_path / "flaky"
    count = tmp_path / "count"
    script.write_text(f"""#!/bin/sh
n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}
if [ "$n" -lt {fails} ]; then echo "scancel: error: {message}" >&2; exit 1; fi
echo ok
""")
    script.chmod(0o755)
    return str(script)


def test_unreachable_controller_is_retried(tmp_path: Path) -> None:
    cmd = _flaky_command(tmp_path, 2, "Unable to contact slurm controller (connect failure)")
    proc = Slurm(tmp_path).cmd(cmd, retry_s=30)
    assert proc.stdout.strip() == "ok"
    assert (tmp_path / "count").read_text().strip() == "3"


def test_job_errors_are_not_retried(tmp_path: Path) -> None:
    cmd = _flaky_command(tmp_path, 1, "Invalid job id specified")
    proc = Slurm(tmp_path).cmd(cmd, check=False, retry_s=30)
    assert proc.returncode == 1
    assert (tmp_path / "count").read_text().strip() == "1"


def test_retries_end_at_the_deadline(tmp_path: Path) -> None:
    cmd = _flaky_command(tmp_path, 100, "Socket timed out on send/recv operation")
    with pytest.raises(pytest.fail.Exception, match="Socket timed out"):
        Slurm(tmp_path).cmd(cmd, retry_s=1.5)


@pytest.mark.parametrize("stderr, expected", [
    ("scancel: error: Kill job error on job id 5: Unable to contact slurm controller (connect failure)", True),
    ("squeue: error: slurm_receive_msg: Socket timed out on send/recv operation", True),
    ("scancel: error: Kill job error on job id 5: Invalid job id specified", False),
    ("", False),
])
def test_controller_unreachable(stderr: str, expected: bool) -> None:
    assert controller_unreachable(stderr) is expected


@pytest.mark.parametrize("nodes", ["0", "x", "65"])
def test_a_bad_node_count_is_one_line_and_exit_2(nodes: str, tmp_path: Path) -> None:
    import os
    import subprocess

    from slurm_support import SCRIPT

    proc = subprocess.run(["bash", str(SCRIPT), "status", str(tmp_path)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SLURM_LOCAL_NODES": nodes})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"slurm-local: SLURM_LOCAL_NODES must be 1-64, not '{nodes}'"]
