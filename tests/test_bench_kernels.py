"""bench kernels' reporting: baseline accuracies, no speedup over a baseline that did not learn, the roofs."""

from __future__ import annotations

import numpy as np

from mpikanel.bench import kernels
from mpikanel.bench.provenance import REPO_ROOT
from mpikanel.bench.report import table_of


def result(model: str, sk_acc: float, learned: bool | None = None) -> dict:
    r = {"data": "dense 10x3", "model": model, "rate": 2000.0, "gbps": 0.1, "gflops": 1.0, "bound": "compute",
         "bound_rate": 4000.0, "fraction_of_bound": 0.5, "fraction_of_matmul": 1.2, "loop_rate": 1000.0,
         "train_accuracy": 0.9, "classes": 10, "sklearn_rate": 500.0, "sklearn_train_accuracy": sk_acc}
    if learned is not None:
        r["sklearn_learned"] = learned
    return r


def test_chance_accuracy_is_the_majority_share():
    assert kernels.chance_accuracy(np.array([0, 1, 1, 1], dtype=np.int32)) == 0.75
    assert kernels.chance_accuracy(np.zeros(0, dtype=np.int32)) == 0.0


def test_a_baseline_that_did_not_learn_gets_no_speedup():
    table = kernels.format_table([result("softmax", 0.85, True), result("mlp", 0.11, False)])
    learned, chance = table.splitlines()[1:]
    assert learned.split()[-4:] == ["0.900", "500", "0.850", "4.0"]       # acc, sklearn/s, sk acc, x sklearn
    assert chance.split()[-7:] == ["0.900", "500", "0.110", "baseline", "did", "not", "learn"]
    # sets written before sklearn_learned was recorded: judged against 1/classes
    assert kernels.baseline_learned(result("mlp", 0.1075)) is False
    assert kernels.baseline_learned(result("lsq", 0.29)) is True
    no_baseline = {k: v for k, v in result("svm", 0.5).items() if not k.startswith("sklearn")}
    assert kernels.baseline_learned(no_baseline) is None
    assert kernels.format_table([no_baseline]).splitlines()[1].split()[-4:] == ["0.900", "-", "-", "-"]


def test_the_committed_kernels_set_still_reads():
    table = table_of(REPO_ROOT / "docs" / "results" / "kernels" / "results.json")
    csr_mlp = [line for line in table.splitlines() if line.startswith("| csr") and " mlp " in line]
    assert len(csr_mlp) == 1 and "baseline did not learn" in csr_mlp[0]


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
