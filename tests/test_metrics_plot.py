"""Metrics: snapshot recorder, curve evaluation, time to target, HDF5 round trip; the plot command."""
import math

import numpy as np
import pytest

from mpikanel.errors import InputError
from mpikanel.metrics import (SnapshotRecorder, evaluate_curve, first_touch, read_metrics, time_to_target,
                              write_metrics)


def test_recorder_respects_interval_and_copies():
    rec = SnapshotRecorder(interval_s=1.0)
    p = np.zeros(3)
    taken = [rec.maybe_snapshot(t, p + t, int(t * 10)) for t in (0.0, 0.4, 0.99, 1.0, 1.5, 2.2)]
    assert taken == [True, False, False, True, False, True]
    p[:] = 99.0
    assert [s.time_s for s in rec] == [0.0, 1.0, 2.2]
    assert rec.snapshots[1].params.dtype == np.float32
    np.testing.assert_array_equal(rec.snapshots[1].params, [1.0, 1.0, 1.0])


def test_recorder_cap_thins_and_doubles_interval():
    rec = SnapshotRecorder(interval_s=1.0, max_snapshots=8)
    p = np.zeros(2)
    for i in range(8):
        assert rec.maybe_snapshot(float(i), p, i)
    assert len(rec) == 8
    assert rec.maybe_snapshot(8.0, p, 8)
    assert rec.interval_s == 2.0
    assert [s.version for s in rec] == [0, 2, 4, 6, 8]
    assert not rec.maybe_snapshot(9.0, p, 9)
    for t in range(10, 1000):
        rec.maybe_snapshot(float(t), p, t)
        assert len(rec) <= 8
    times = np.diff([s.time_s for s in rec])
    assert (times >= rec.interval_s / 2).all()


def test_recorder_holds_no_more_snapshots_than_its_memory_budget():
    # 1,000 float32 parameters = 4,000 bytes a copy; a 20,000-byte budget holds 5 of them
    rec = SnapshotRecorder(interval_s=1.0, max_snapshots=400, max_bytes=20_000)
    p = np.zeros(1000)
    for t in range(200):
        rec.maybe_snapshot(float(t), p, t)
        assert len(rec) <= 5
    assert sum(s.params.nbytes for s in rec) <= 20_000
    assert rec.interval_s > 1.0 and rec.snapshots[0].version == 0
    tiny = SnapshotRecorder(interval_s=1.0, max_bytes=1)      # never fewer than two: the start and now
    for t in range(5):
        tiny.maybe_snapshot(float(t), p, t)
    assert len(tiny) == 2


def test_final_always_recorded():
    rec = SnapshotRecorder(interval_s=10.0, max_snapshots=4)
    p = np.ones(2)
    rec.maybe_snapshot(0.0, p, 0)
    rec.maybe_snapshot(1.0, p, 5)
    rec.final(1.5, p * 2, 7)
    assert [(s.time_s, s.version) for s in rec] == [(0.0, 0), (1.5, 7)]
    rec.final(1.6, p * 3, 7)          # same version again replaces the last one
    assert [(s.time_s, s.version) for s in rec] == [(0.0, 0), (1.6, 7)]


def test_evaluate_curve():
    rec = SnapshotRecorder(interval_s=1.0)
    for t in range(3):
        rec.maybe_snapshot(float(t), np.full(2, float(t)), t * 4)
    curve = evaluate_curve(rec, lambda w: float(w.sum()), lambda w: float(w[0]) / 10)
    np.testing.assert_array_equal(curve["time_s"], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(curve["version"], [0, 4, 8])
    np.testing.assert_allclose(curve["test_loss"], [0.0, 2.0, 4.0])
    np.testing.assert_allclose(curve["test_accuracy"], [0.0, 0.1, 0.2])
    no_acc = evaluate_curve(rec.snapshots, lambda w: 1.0, None)
    assert np.isnan(no_acc["test_accuracy"]).all()


def test_time_to_target():
    t = [0.0, 1.0, 2.0, 3.0]
    loss = [2.0, 1.5, 0.5, 0.4]
    assert time_to_target(t, loss, 1.0) == pytest.approx(1.5)
    assert time_to_target(t, loss, 0.5) == pytest.approx(2.0)
    assert time_to_target(t, loss, 2.5) == 0.0
    assert time_to_target(t, loss, 0.1) is None
    assert time_to_target([], [], 1.0) is None
    assert time_to_target(t, [math.nan, 0.5, 0.4, 0.3], 1.0) == 1.0


def test_time_to_target_is_held_not_first_touch():
    """A run that dips below the target and drifts back up has reached it only at its last crossing."""
    t = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    loss = [2.0, 0.8, 1.2, 0.9, 0.7, 0.6]
    assert first_touch(t, loss, 1.0) == pytest.approx(1.0 / 1.2)
    assert time_to_target(t, loss, 1.0) == pytest.approx(2.0 + 0.2 / 0.3)
    drifted = [2.0, 0.8, 0.9, 1.1, 1.2, 1.3]           # touches, then ends above: never held
    assert first_touch(t, drifted, 1.0) is not None
    assert time_to_target(t, drifted, 1.0) is None
    assert time_to_target(t, [2.0, 0.5, math.nan, 0.5, 0.4, 0.3], 1.0) == 3.0


def _fake_run(path, sync, scenario, slow_rank=1, n_workers=3):
    t = np.linspace(0.0, 5.0, 11)
    curve = {"time_s": t, "version": np.arange(11, dtype=np.int64) * 7,
             "test_loss": 2.3 * np.exp(-t / (2.0 if sync == "asp" else 4.0)),
             "test_accuracy": np.linspace(0.1, 0.9, 11)}
    workers = [{"rank": r, "rows": 1000, "steps": 100 + r, "pushes": 100 + r,
                "compute_s": 1.0 + 0.25 * r, "comm_s": 0.1, "wait_s": 0.0 if r == slow_rank else 2.5,
                "injected_s": 3.0 if r == slow_rank else 0.0, "note": "text is skipped"}
               for r in range(1, n_workers + 1)]
    summary = {"sync": sync, "wall_s": 5.25, "test_loss": float(curve["test_loss"][-1]),
               "test_accuracy": None, "per_worker": workers, "versions": {"mpikanel": "0.1.0"},
               "ratio": math.inf}
    attrs = {"sync": sync, "model": "softmax", "workers": n_workers, "seed": 3, "scenario": scenario,
             "command_line": "mpirun -n 4 python -m mpikanel.train --sync " + sync,
             "versions": {"mpikanel": "0.1.0", "numpy": np.__version__}, "staleness": 2.5,
             "quiet": False, "data_dir": None}
    write_metrics(path, summary, curve, workers, attrs)
    return summary, curve, workers, attrs


def test_metrics_round_trip(tmp_path):
    path = tmp_path / "run.h5"
    summary, curve, workers, attrs = _fake_run(path, "bsp", "straggler 1:4")
    back = read_metrics(path)
    assert back["summary"] == summary
    assert back["attrs"] == attrs
    assert set(back["curve"]) == set(curve)
    for key, values in curve.items():
        assert back["curve"][key].dtype == values.dtype
        np.testing.assert_array_equal(back["curve"][key], values)
    expected = [{k: v for k, v in w.items() if k != "note"} for w in workers]
    assert back["workers"] == expected
    assert [list(w) for w in back["workers"]] == [list(w) for w in expected]
    assert type(back["workers"][0]["steps"]) is int


def test_read_metrics_errors(tmp_path):
    with pytest.raises(InputError, match="no such metrics file"):
        read_metrics(tmp_path / "missing.h5")
    junk = tmp_path / "junk.h5"
    junk.write_text("not hdf5")
    with pytest.raises(InputError, match="not a valid"):
        read_metrics(junk)
    import h5py
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1, 2]
    with pytest.raises(InputError, match="not an mpikanel metrics file"):
        read_metrics(tmp_path / "other.h5")


def test_write_metrics_rejects_reserved_attrs(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        write_metrics(tmp_path / "x.h5", {}, {}, [], {"summary_json": "x"})


def test_plot_command_makes_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    from mpikanel.plot import main
    a, b = tmp_path / "bsp.h5", tmp_path / "asp.h5"
    _fake_run(a, "bsp", "straggler")
    _fake_run(b, "asp", "straggler")
    loss, timeline = tmp_path / "loss.png", tmp_path / "timeline.png"
    rc = main([str(a), str(b), "-o", str(loss), "--timeline", str(timeline), "--target-loss", "0.5",
               "--logy"])
    assert rc == 0
    for png in (loss, timeline):
        data = png.read_bytes()
        assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "loss.svg"
    assert main([str(a), "-o", str(svg)]) == 0
    assert b"<svg" in svg.read_bytes()[:2000]


def test_plot_command_errors(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from mpikanel.plot import main
    assert main([str(tmp_path / "nope.h5"), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no such metrics file" in err and "\n" not in err
    run = tmp_path / "r.h5"
    _fake_run(run, "bsp", "")
    assert main([str(run), "-o", str(tmp_path / "x.jpg")]) == 2
    with pytest.raises(SystemExit) as info:
        main([str(run)])
    assert info.value.code == 2


def test_plot_without_matplotlib(tmp_path, monkeypatch, capsys):
    import builtins
    from mpikanel import plot
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    assert plot.main([str(tmp_path / "r.h5"), "-o", str(tmp_path / "x.png")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


def test_labels_fall_back_to_file_stem():
    from mpikanel.plot import _labels, run_label
    assert run_label({"attrs": {"sync": "ssp", "scenario": "lognormal"}}) == "SSP lognormal"
    assert run_label({"attrs": {}, "summary": {}, "path": "/x/my_run.h5"}) == "my_run"
    runs = [{"attrs": {"sync": "bsp"}, "path": "a.h5"}, {"attrs": {"sync": "bsp"}, "path": "b.h5"}]
    assert _labels(runs) == ["BSP (a)", "BSP (b)"]


def test_timeline_marks_skips_by_reason():
    from mpikanel.plot import _skip_text
    assert _skip_text({"skips": 0}, {}) == ""
    assert _skip_text({"skips": 5}, {}) == "skips 5"
    assert _skip_text({}, {"skips": 7, "skips_by_reason": {"value": 2, "cost": 5, "busy": 0}}) == \
        "skips 7 (cost 5, value 2)"


def test_timeline_with_skips_draws(tmp_path):
    pytest.importorskip("matplotlib")
    from mpikanel.plot import plot_timeline
    workers = [{"rank": 1, "compute_s": 1.0, "comm_s": 0.2, "wait_s": 0.1, "injected_s": 0.0, "skips": 3},
               {"rank": 2, "compute_s": 1.0, "comm_s": 0.1, "wait_s": 0.0, "injected_s": 0.0, "skips": 0}]
    run = {"workers": workers, "attrs": {"sync": "esp", "scenario": "x"},
           "summary": {"wall_s": 1.5, "per_worker": [{"skips": 3, "skips_by_reason": {"cost": 3}}, {"skips": 0}]},
           "path": "esp.h5"}
    plot_timeline([run], tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
