"""bench kernels' reporting: baseline accuracies, no speedup over a baseline that did not learn, the roofs."""

from __future__ import annotations

import numpy as np

from mpikanel.bench import kernels
from mpikanel.bench.provenance import REPO_ROOT
from mpikanel.bench.report import table_of


def result(model: str, sk_acc: float, learned: bool | None = None) -> dict:
    r = {"data": "dense 10x3", "model": model, "rate": 2000.0, "gbps": 0.1, "gflops": 1.0, "bound": "compute",
         "bound_rate": 4000.0, "fraction_of_bound": 0.5, "fraction_of_matmul": 1.2, "loop_rate": 1000.0,
         "lr": 0.2, "test_accuracy": 0.9, "classes": 10, "sklearn_rate": 500.0, "sklearn_lr": 0.01,
         "sklearn_test_accuracy": sk_acc}
    if learned is not None:
        r["sklearn_learned"] = learned
    return r


def test_chance_accuracy_is_the_majority_share():
    assert kernels.chance_accuracy(np.array([0, 1, 1, 1], dtype=np.int32)) == 0.75
    assert kernels.chance_accuracy(np.zeros(0, dtype=np.int32)) == 0.0


def test_a_baseline_that_did_not_learn_gets_no_speedup():
    table = kernels.format_table([result("softmax", 0.85, True), result("mlp", 0.11, False)])
    learned, chance = table.splitlines()[1:]
    assert learned.split()[-6:] == ["0.2", "0.900", "500", "0.01", "0.850", "4.0"]  # lr, acc, sklearn/s, sk lr, sk acc, x
    assert chance.split()[-8:] == ["0.900", "500", "0.01", "0.110", "baseline", "did", "not", "learn"]
    # sets written before sklearn_learned was recorded: judged against 1/classes
    assert kernels.baseline_learned(result("mlp", 0.1075)) is False
    assert kernels.baseline_learned(result("lsq", 0.29)) is True
    no_baseline = {k: v for k, v in result("svm", 0.5).items() if not k.startswith("sklearn")}
    assert kernels.baseline_learned(no_baseline) is None
    assert kernels.format_table([no_baseline]).splitlines()[1].split()[-5:] == ["0.900", "-", "-", "-", "-"]
    # sets written before the rates were chosen on validation held the training accuracy
    old = {**result("softmax", 0.85, True), "train_accuracy": 0.7, "sklearn_train_accuracy": 0.8}
    for k in ("lr", "test_accuracy", "sklearn_lr", "sklearn_test_accuracy"):
        del old[k]
    assert kernels.format_table([old]).splitlines()[1].split()[-6:] == ["-", "0.700", "500", "-", "0.800", "4.0"]


def test_the_rows_split_80_10_10_in_order_dense_and_csr():
    from mpikanel.kernels import CSR

    X = np.arange(100, dtype=np.float32).reshape(50, 2)
    y = np.arange(50, dtype=np.int32)
    (Xa, ya), (Xv, yv), (Xt, yt) = kernels.split_rows(X, y)
    assert (len(ya), len(yv), len(yt)) == (40, 5, 5)
    assert ya[-1] == 39 and yv[0] == 40 and yt[0] == 45 and Xt[0, 0] == 90.0
    csr = CSR(np.arange(51, dtype=np.int64), np.zeros(50, dtype=np.int32), np.arange(50, dtype=np.float32), (50, 3))
    (Ca, _), (Cv, _), (Ct, _) = kernels.split_rows(csr, y)
    assert (Ca.shape[0], Cv.shape[0], Ct.shape[0]) == (40, 5, 5) and Ct.data[0] == 45.0 and Ct.indptr[0] == 0


def test_the_rate_is_chosen_on_validation_and_the_accuracy_is_on_test(monkeypatch):
    import argparse

    X, y = kernels.dense_data(3000, 8, 3)
    train, val, test = kernels.split_rows(X, y)
    args = argparse.Namespace(hidden=4, batch_size=32, repeats=1, lrs=[0.01, 0.1, 1.0])
    scores = iter([0.3, 0.9, 0.5, 0.77])                     # validation per rate, then test
    parts = []
    monkeypatch.setattr(kernels, "accuracy", lambda m, w, part, C: parts.append(part[1]) or next(scores))
    r = kernels.time_ours("softmax", train, val, test, 3, args, 0.0)
    assert r["lr"] == 0.1 and r["test_accuracy"] == 0.77
    assert r["val_accuracy_by_lr"] == {"0.01": 0.3, "0.1": 0.9, "1.0": 0.5}
    assert [p is val[1] for p in parts] == [True, True, True, False] and parts[-1] is test[1]


def test_the_committed_kernels_set_still_reads():
    table = table_of(REPO_ROOT / "docs" / "results" / "kernels" / "results.json")
    csr_mlp = [line for line in table.splitlines() if line.startswith("| csr") and " mlp " in line]
    assert len(csr_mlp) == 1 and "baseline did not learn" in csr_mlp[0]


def test_accuracy_scores_non_finite_parameters_zero():
    from mpikanel.kernels import get_model

    X, y = kernels.dense_data(200, 4, 3)
    w = np.zeros(4 * 3 + 3)
    assert kernels.accuracy(get_model("softmax"), w, (X, y), 3) == np.mean(y == 0)   # argmax of zeros: class 0
    w[0] = np.nan
    assert kernels.accuracy(get_model("softmax"), w, (X, y), 3) == 0.0


def test_gemm_roof_is_a_rate():
    assert kernels.gemm_roof(n=64, repeats=1) > 0.0


def test_out_writes_a_result_set_the_report_rebuilds(tmp_path, monkeypatch):
    from mpikanel.bench.__main__ import main
    from mpikanel.bench.report import holds

    monkeypatch.setattr(kernels, "stream_bandwidth", lambda: 10.0)     # the roofs are not under test here
    monkeypatch.setattr(kernels, "gemm_roof", lambda: 20.0)
    out = tmp_path / "kernels"
    assert main(["kernels", "--kinds", "dense", "--models", "logistic", "--dense-rows", "2000", "--dense-features",
                 "10", "--no-sklearn", "--repeats", "1", "--out", str(out), "--allow-dirty"]) == 0
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "provenance.json"}
    table = table_of(out / "results.json")
    assert table.startswith("| data | model |") and "| logistic |" in table
    assert holds((out / "results.md").read_text(), table)
