"""Several server ranks (--servers K) for real: the same model as one server, every delta kept,
checkpoints that resume on any K, and a killed server rank ends the job."""
import json

import h5py
import pytest

from launch import checkpoints, run_train, stop_signal
from mpikanel.engine.messages import PAYLOAD_OFFSET
from mpikanel.metrics import read_metrics
from test_checkpoint_e2e import PACED, assert_killed_mid_run, assert_stopped_by_the_signal, finish, finish_after_kill, \
    mid_run, start
from test_train_e2e import assert_no_lost_work, kill_rank, rank_pids

RUN = ["--synthetic-rows", "20000", "--epochs", "2"]


def check_servers(s, k):
    """K server reports whose key ranges tile the parameters, each handling every push."""
    ranks = s["server_ranks"]
    assert s["servers"] == k and [r["rank"] for r in ranks] == list(range(k))
    assert ranks[0]["keys"][0] == 0 and ranks[-1]["keys"][1] == s["n_params"]
    assert all(a["keys"][1] == b["keys"][0] for a, b in zip(ranks, ranks[1:]))
    assert all(r["pushes"] == s["deltas_sent"] for r in ranks)
    assert all(r.get("deltas_applied", s["deltas_applied"]) == s["deltas_applied"] for r in ranks)
    # the loss curve's snapshots come in pieces at the end: the only range a server k > 0 sends
    # server 0 is its final one
    assert all(r["slices_sent"] == 1 for r in ranks[1:])


def test_bsp_gives_bitwise_the_same_model_on_one_and_two_servers(tmp_path):
    runs, curves = {}, {}
    for k in (1, 2):            # three servers: the sparse-frames test below
        metrics = tmp_path / f"metrics-{k}.h5"
        flow = "on" if k == 2 else "off"       # pushes that ask first move the same deltas
        proc, s = run_train(3 + k, "--servers", str(k), "--sync", "bsp", *RUN, "--metrics", str(metrics),
                            "--snapshot-interval", "0.1", "--flow-control", flow, tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert s["workers"] == 3 and s["ranks"] == 3 + k
        assert all(r["flow_control"] == (flow == "on") for r in s["server_ranks"])
        check_servers(s, k)
        assert_no_lost_work(s)
        runs[k], curves[k] = s, read_metrics(metrics)["curve"]
    assert runs[1]["params_sha256"] == runs[2]["params_sha256"]
    assert [w["steps"] for w in runs[2]["per_worker"]] == [w["steps"] for w in runs[1]["per_worker"]]
    # the curve of two servers' pieces: snapshot points are times, so they differ between runs,
    # but BSP goes through bitwise the same versions: equal versions have equal losses, to the
    # rounding of the float32 evaluation (snapshots are scored in blocks of one BLAS product, whose
    # rounding may depend on how many snapshots a block holds: 2.8e-9 apart was seen on an AVX2 machine)
    one, two = curves[1], curves[2]
    assert len(two["version"]) >= 3 and (two["version"][1:] >= two["version"][:-1]).all()
    assert two["version"][0] == 0 and two["version"][-1] == one["version"][-1] == runs[1]["deltas_applied"]
    loss = {int(v): x for v, x in zip(one["version"], one["test_loss"])}
    common = [(loss[int(v)], x) for v, x in zip(two["version"], two["test_loss"]) if int(v) in loss]
    assert len(common) >= 2                 # the start and the end at least
    for a, b in common:
        assert abs(a - b) <= 1e-6 * abs(a)
    assert abs(two["test_loss"][-1] - one["test_loss"][-1]) <= 1e-6 * abs(one["test_loss"][-1])
    assert runs[2]["test_loss"] == runs[1]["test_loss"]       # the final model, scored alone: exact


# the default --l2: CSR steps decay lazily, so deltas stay sparse
SPARSE = ["--data", "synthetic-sparse", "--model", "logistic", "--synthetic-features", "20000", "--lr", "0.3"]


def check_sparse_frames(s):
    """Pushes and replies went as keys and values, far smaller than the dense vector."""
    assert s["push"] in ("auto", "sparse")
    dense = 8 * s["n_params"]
    assert s["bytes_per_push"] < dense / 2
    if s["push"] == "auto":     # forced sparse replies may be larger than dense ones
        assert s["bytes_received"] < dense * s["deltas_sent"] / 2
    assert sum(r["bytes_received"] for r in s["server_ranks"]) == s["bytes_sent"] + PAYLOAD_OFFSET * s["deltas_sent"] * s["servers"]


def test_sparse_frames_give_bitwise_the_dense_model_on_one_two_and_three_servers(tmp_path):
    runs = {}
    for k, push in ((1, "dense"), (2, "auto"), (3, "sparse")):
        proc, s = run_train(3 + k, "--servers", str(k), "--push", push, "--sync", "bsp", "--synthetic-rows", "6000",
                            "--epochs", "2", *SPARSE,
                            tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        check_servers(s, k)
        assert_no_lost_work(s)
        runs[push] = s
    assert runs["dense"]["bytes_per_push"] == 8 * runs["dense"]["n_params"]
    for push in ("auto", "sparse"):
        check_sparse_frames(runs[push])
        assert runs[push]["params_sha256"] == runs["dense"]["params_sha256"]


@pytest.mark.parametrize("k,sync,data", [(2, ["asp"], SPARSE), (3, ["ssp", "--staleness", "2", "--flow-control", "on"], []),
                                         (2, ["esp", "--push", "sparse", "--permute-features", "on"], SPARSE),
                                         (2, ["psp", "--flow-control", "on"], [])])
def test_every_sync_model_keeps_every_delta_on_several_servers(k, sync, data, tmp_path):
    proc, s = run_train(3 + k, "--servers", str(k), "--sync", *sync, *RUN, *data, "--slowdown", "1:3",
                        tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_servers(s, k)
    assert_no_lost_work(s)
    assert s["samples"] == s["samples_budget"]
    assert s["test_accuracy"] > (0.6 if data else 0.8)     # sparse: ~0.69 after 2 epochs of 18k rows
    if data:
        check_sparse_frames(s)
        received = [r["bytes_received"] for r in s["server_ranks"]]
        if "--permute-features" in sync:    # popular (low) feature ids spread over both ranges
            assert max(received) < 1.3 * min(received)
        else:                               # contiguous ranges: server 0 gets the popular ids
            assert received[0] > 2 * received[1]


def test_checkpoint_of_two_servers_resumes_bitwise_on_three_and_on_one(tmp_path):
    ck = tmp_path / "ck"
    proc, full = run_train(5, "--servers", "2", *RUN, "--checkpoint-dir", str(ck), "--checkpoint-every", "150steps",
                           "--keep-checkpoints", "10", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    paths = checkpoints(ck)
    assert len(paths) >= 3
    for k in (3, 1):
        proc, resumed = run_train(3 + k, "--servers", str(k), *RUN, "--resume", str(paths[1]), tmp_path=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert resumed["resumed_from"] == str(paths[1]) and resumed["reshaped"] is None
        assert resumed["params_sha256"] == full["params_sha256"]
        assert_no_lost_work(resumed)


def test_a_stop_signal_stops_two_servers_with_a_checkpoint(tmp_path):
    ck, summary = tmp_path / "ck", tmp_path / "stopped.json"
    proc = start(5, "--servers", "2", *PACED, "--sync", "ssp", "--checkpoint-dir", str(ck),
                 "--checkpoint-every", "0.5", "--summary-json", str(summary))
    mid_run(proc, ck)
    proc.send_signal(stop_signal())
    rc, _, err = finish(proc)
    stopped = json.loads(summary.read_text())
    assert_stopped_by_the_signal(rc, err, stopped)
    assert_no_lost_work(stopped)


def test_killed_server_rank_ends_the_job(tmp_path):
    ck = tmp_path / "ck"
    # sparse frames (a dense run loses a server the same way: the kill tests of test_checkpoint_e2e)
    proc = start(5, "--servers", "2", *PACED, *SPARSE, "--checkpoint-dir", str(ck), "--checkpoint-every", "0.3")
    pids = rank_pids(proc.pid, 5, timeout=60)
    mid_run(proc, ck)
    kill_rank(pids[1], 1)                      # the second server, not the one that decides
    rc = finish_after_kill(proc, "[killed server rank] rank 1")
    assert rc != 0
    assert_killed_mid_run(ck)


def test_too_few_ranks_for_the_servers_is_a_clear_error(tmp_path):
    proc, _ = run_train(3, "--servers", "3", *RUN, tmp_path=tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "needs at least 4 MPI ranks (3 servers + workers)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_what_a_scaling_policy_held_back_survives_a_resume_on_two_servers(tmp_path):
    # ESP with stale deltas scaled down: each server keeps what it scaled away ("unapplied") in
    # its part, and continues its own range of it after the resume, so the delta sums still match
    ck = tmp_path / "ck"
    args = ["--servers", "2", *RUN, "--sync", "esp", "--esp-scale", "inverse"]
    proc, full = run_train(5, *args, "--checkpoint-dir", str(ck), "--checkpoint-every", "150steps",
                           "--keep-checkpoints", "10", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first = checkpoints(ck)[0]
    with h5py.File(first / "server-1.h5") as f:
        assert "unapplied" in f                      # server 1 had scaled deltas by the first cut
    proc, resumed = run_train(5, *args, "--resume", str(first), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert_no_lost_work(resumed)
