"""Across emulated hosts (scripts/multihost.sh: network namespaces, TCP between them, shared memory
within): BSP bitwise the same as on one host, with its two servers on different hosts and checkpoint
parts from every host in one directory, resumed on another host count; PSP and ASP train; a host
whose ranks all die ends the job within LOST_ENDS_JOB_S with one line naming them, and
``--resume latest`` completes the budget. Few launches, small problems: CI runs this file under
two MPI families. Skips with the script's reason where it cannot run (not root, no namespaces);
under CI=true that is an error."""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import PACE, UNPACED, checkpoints, clean_env, run_train
from need import need

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "multihost.sh"
#: namespaces mkth0.., bridge mktbr0: apart from a user's own runs (default prefix mh)
PREFIX = "mkt"
#: a host's ranks killed: the job ends this soon, the lost ranks named
LOST_ENDS_JOB_S = 5.0
SMALL = ["--synthetic-rows", "4000", "--epochs", "2", "--progress", "off"]
#: >= 2.5 s of paced training on 3 workers: the kill lands mid-run
PACED_RUN = ["--synthetic-rows", "12000", "--epochs", "4", "--progress", "off", *PACE]
PACED_SAMPLES = 4 * 12000 * 9 // 10            # the shared budget: epochs x training rows


def bounded(cmd: list[str], timeout: float) -> list[str]:
    """`cmd` under timeout(1): SIGTERM first (multihost.sh's trap removes the hosts), SIGKILL 20 s later."""
    return ["timeout", "--kill-after=20", str(timeout), *cmd]


def multihost_env() -> dict[str, str]:
    """The job's environment: this venv's MPI, the tests' prefix."""
    return clean_env(MPIKANEL_PYTHON=sys.executable, MULTIHOST_PREFIX=PREFIX)


def our_namespaces() -> list[str]:
    """The test prefix's namespaces that exist now."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{PREFIX}h")]


def leftovers() -> list[str]:
    """What a finished multihost.sh left behind: its namespaces, and processes started under it."""
    mine = f"MULTIHOST_PREFIX={PREFIX}".encode()
    procs = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and mine in (d / "environ").read_bytes().split(b"\0"):
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                procs.append(f"pid {d.name}: {cmdline[:80]}")
        except OSError:
            continue
    return our_namespaces() + procs


@pytest.fixture(scope="module", autouse=True)
def emulated_hosts():
    """Skip (CI: fail) with the script's reason where it cannot run; afterwards nothing of it is left."""
    if os.geteuid() != 0:
        need("root", "scripts/multihost.sh needs root (network namespaces); run the tests as root")
    proc = subprocess.run(bounded([str(SCRIPT), "1", "1", "--", "true"], 60), capture_output=True, text=True,
                          timeout=100, env=multihost_env())
    if proc.returncode in (2, 3):
        need("emulated hosts", proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    yield
    left = leftovers()
    subprocess.run(bounded([str(SCRIPT), "--cleanup"], 60), capture_output=True, timeout=100, env=multihost_env())
    assert left == []


def multihost(hosts: int, ranks: int, *args: str, tmp_path: Path, timeout: float = 180) -> tuple[subprocess.CompletedProcess, dict | None]:
    """`python -m mpikanel.train` on `hosts` emulated hosts; the process and its summary."""
    summary = tmp_path / f"summary-{hosts}-{len(list(tmp_path.iterdir()))}.json"
    cmd = [str(SCRIPT), str(hosts), str(ranks), "--", sys.executable, "-m", "mpikanel.train", "--quiet", *args,
           "--summary-json", str(summary)]
    try:
        proc = subprocess.run(bounded(cmd, timeout), capture_output=True, text=True, timeout=timeout + 40,
                              env=multihost_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"hang: {' '.join(cmd)} did not end in {timeout}s\n{exc.stderr}")
    assert proc.returncode != 124, f"hang: {' '.join(cmd)} did not end in {timeout}s\n{proc.stderr}"
    assert leftovers() == []
    return proc, json.loads(summary.read_text()) if summary.exists() else None


def model_sha256(path: Path) -> str:
    """The sha256 of a saved model's parameters (the file also holds its run's settings and paths)."""
    import mpikanel

    return hashlib.sha256(mpikanel.load_model(str(path)).params.tobytes()).hexdigest()


def assert_on_hosts(s: dict, node_ranks: dict[str, list[int]]) -> None:
    assert s["nodes"] == len(node_ranks) and s["node_ranks"] == node_ranks


def test_bsp_across_hosts_is_bitwise_one_host_and_checkpoints_resume_on_another_host_count(tmp_path):
    proc, one = run_train(4, *SMALL, "--save-model", str(tmp_path / "one.h5"), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert one["nodes"] == 1
    # two servers (ranks 0 and 1) on h0 and h1, workers on both; every rank writes its part into ck
    ck = tmp_path / "ck"
    proc, two = multihost(2, 5, *SMALL, "--servers", "2", "--save-model", str(tmp_path / "two.h5"),
                          "--checkpoint-dir", str(ck), "--checkpoint-every", "15steps", "--keep-checkpoints", "10",
                          tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_on_hosts(two, {"h0": [0, 2, 4], "h1": [1, 3]})
    assert [r["rank"] for r in two["server_ranks"]] == [0, 1]
    assert model_sha256(tmp_path / "two.h5") == model_sha256(tmp_path / "one.h5")
    assert two["params_sha256"] == one["params_sha256"]
    saved = checkpoints(ck)
    assert len(saved) >= 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["ck"]    # no part written elsewhere
    for path in saved:          # one directory per checkpoint, holding the parts of both hosts' ranks
        entries = json.loads((path / "manifest.json").read_text())["files"]
        assert {e["host"] for e in entries} == {"h0", "h1"}
        assert sorted(p.name for p in path.glob("*.h5")) == sorted(e["file"] for e in entries)
    # resumed from the first checkpoint on three hosts and one server (the same 3 workers): still the same model
    proc, three = multihost(3, 4, *SMALL, "--servers", "1", "--resume", str(saved[0]), "--save-model", str(tmp_path / "three.h5"),
                            tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_on_hosts(three, {"h0": [0, 3], "h1": [1], "h2": [2]})
    assert three["resumed_from"] == str(saved[0])
    assert model_sha256(tmp_path / "three.h5") == model_sha256(tmp_path / "one.h5")


def test_psp_trains_across_three_hosts(tmp_path):
    proc, s = multihost(3, 4, *SMALL, "--sync", "psp", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_on_hosts(s, {"h0": [0, 3], "h1": [1], "h2": [2]})
    assert s["deltas_sent"] == s["deltas_applied"] > 0 and s["test_accuracy"] > 0.7


def rank_processes(namespace: str) -> list[int]:
    """The MPI ranks running in a namespace (not the launcher's proxies or daemons)."""
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=10).stdout
    ranks = []
    for pid in map(int, out.split()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"mpikanel.train" in cmdline and any(v.startswith((b"PMI_RANK=", b"OMPI_COMM_WORLD_RANK=")) for v in environ):
            ranks.append(pid)
    return ranks


def test_asp_on_a_lost_host_ends_the_job_naming_its_ranks_and_resume_latest_completes(tmp_path):
    ck = tmp_path / "ck"
    cmd = [str(SCRIPT), "2", "4", "--", sys.executable, "-m", "mpikanel.train", "--quiet", "--sync", "asp",
           *PACED_RUN, "--checkpoint-dir", str(ck), "--checkpoint-every", "0.8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=multihost_env(),
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while not checkpoints(ck) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        # killed just after a checkpoint, not while writing one (a process in fsync dies only after it)
        victims = rank_processes(f"{PREFIX}h1")
        assert proc.poll() is None and len(victims) == 2, f"no checkpoint mid-run: {proc.stderr.read() if proc.poll() is not None else ''}"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        t0 = time.time()
        _, err = proc.communicate(timeout=LOST_ENDS_JOB_S)
        ended = time.time() - t0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)       # the script's trap removes the hosts
        proc.communicate(timeout=30)
        pytest.fail(f"the job did not end within {LOST_ENDS_JOB_S} s of losing h1")
    sys.stderr.write(f"[lost host] job ended {ended:.2f} s after h1's ranks were killed\n")
    assert leftovers() == []
    assert proc.returncode != 0
    # (Open MPI's launcher ends its own messages with a NUL byte)
    lost = [line.strip("\0") for line in err.splitlines() if line.strip("\0").startswith("mpikanel: lost")]
    assert lost == ["mpikanel: lost ranks 1, 3 on h1 (all its ranks): the processes ended mid-run; ending the job"], err
    assert not [p for p in checkpoints(ck) if json.loads((p / "manifest.json").read_text())["final"]]
    proc, s = multihost(3, 4, "--checkpoint-dir", str(ck), "--resume", "latest", *UNPACED, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # ASP trains on to the end of its budget on three hosts
    assert s["sync"] == "asp" and s["nodes"] == 3
    assert s["resumed_from"] and s["samples"] == s["samples_budget"] == PACED_SAMPLES
    assert s["deltas_sent"] == s["deltas_applied"] and s["test_accuracy"] > 0.7


#: Open MPI's verbose BTL line: the sender's host, the BTL, the receiving rank's host
BTL_LINE = re.compile(r"\[(h\d+):\d+\] mca: bml: Using (\w+) btl for send to \S+ on node (h\d+)")


def transport_lines(hosts: int) -> tuple[str, list[str]]:
    """The MPI's name and its own words on its transports (multihost.sh --transport), 4 ranks exchanging a value."""
    program = "from mpi4py import MPI; MPI.COMM_WORLD.allgather(MPI.COMM_WORLD.Get_rank())"
    proc = subprocess.run(bounded([str(SCRIPT), "--transport", str(hosts), "4", "--", sys.executable, "-c", program], 60),
                          capture_output=True, text=True, timeout=100, env=multihost_env())
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip("\0") for line in (proc.stdout + proc.stderr).splitlines()]
    banner = next(line for line in lines if "ranks round-robin" in line)
    return banner, [line for line in lines if line.startswith("multihost: transport:")]


def test_the_mpi_says_tcp_between_hosts_and_shared_memory_within():
    banner, two = transport_lines(2)
    if "Open MPI" in banner:
        # every pair of ranks that talked: sm to a rank on the same host, tcp to one on the other
        pairs = [m.groups() for m in map(BTL_LINE.search, two) if m and m[2] != "self"]
        assert {btl for _, btl, _ in pairs} == {"sm", "tcp"}, two
        assert all((btl == "sm") == (src == dst) for src, btl, dst in pairs), two
    else:
        # Intel MPI: libfabric's tcp provider between nodes and shared memory within (shm-ofi); one host: shm only
        text = "\n".join(two)
        assert "libfabric provider: tcp" in text and "tuning_generic_shm-ofi.dat" in text, text
        text = "\n".join(transport_lines(1)[1])
        assert "tuning_generic_shm.dat" in text and "libfabric provider" not in text, text
