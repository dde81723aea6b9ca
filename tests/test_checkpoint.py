"""Checkpoint files: atomic writes, keep-last-N, validation of corrupted/foreign/incompatible files."""
import os

import h5py
import numpy as np
import pytest

from mpikanel import checkpoint as ck
from mpikanel.errors import InputError


def make(n=50, workers=2, **kw):
    rng = np.random.default_rng(0)
    return ck.Checkpoint(
        params=rng.normal(size=n), initial=np.zeros(n), config={"sync": "bsp", "seed": 1}, ranks=workers + 1,
        sync="bsp", model="softmax", server={"version": 7, "policy": {}},
        server_arrays={"clock": np.arange(workers), "active": np.ones(workers, np.int8)},
        workers=[{"state": {"rank": w + 1, "cursor": {"step": 3}}, "unsent": rng.normal(size=n),
                  "produced": rng.normal(size=n), "order": np.arange(10)} for w in range(workers)], **kw)


def test_round_trip(tmp_path):
    c = make()
    path = ck.save(tmp_path, c)
    assert path.name == "ckpt-000001.h5"
    d = ck.load(path)
    assert np.array_equal(d.params, c.params) and d.server == c.server and d.config == c.config
    assert d.workers[1]["state"] == c.workers[1]["state"]
    assert np.array_equal(d.workers[0]["unsent"], c.workers[0]["unsent"])
    with h5py.File(path) as f:
        assert f["params"].fletcher32 and f["params"].compression == "gzip"


def test_keep_last_n_and_latest(tmp_path):
    for _ in range(5):
        ck.save(tmp_path, make(), keep=2)
    assert [p.name for p in ck.checkpoint_paths(tmp_path)] == ["ckpt-000005.h5", "ckpt-000004.h5"]
    latest, notes = ck.load_latest(tmp_path)
    assert latest.seq == 5 and notes == []


def flip_byte_in(path, dataset="params"):
    with h5py.File(path) as f:
        offset = f[dataset].id.get_offset() if f[dataset].chunks is None else \
            f[dataset].id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as fh:
        fh.seek(offset + 5)
        b = fh.read(1)
        fh.seek(offset + 5)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_flipped_byte_is_detected_and_latest_falls_back(tmp_path):
    ck.save(tmp_path, make())
    newest = ck.save(tmp_path, make())
    flip_byte_in(newest)
    with pytest.raises(InputError, match="ckpt-000002.h5: corrupted"):
        ck.load(newest)
    latest, notes = ck.load_latest(tmp_path)
    assert latest.seq == 1 and "ckpt-000002.h5" in notes[0]


def test_truncated_and_foreign_files(tmp_path):
    path = ck.save(tmp_path, make())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="corrupted or truncated"):
        ck.load(path)
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["x"] = 1
    with pytest.raises(InputError, match="not an mpikanel checkpoint"):
        ck.load(other)
    with pytest.raises(InputError, match="no such checkpoint"):
        ck.load(tmp_path / "missing.h5")


def test_wrong_schema(tmp_path):
    path = ck.save(tmp_path, make())
    with h5py.File(path, "r+") as f:
        f.attrs["schema"] = 99
    with pytest.raises(InputError, match="schema 99"):
        ck.load(path)


def test_incompatible_run(tmp_path):
    c = ck.load(ck.save(tmp_path, make()))
    ck.check_compatible(c, 5, "bsp", "softmax", 50)          # shared budget: reshaped on 5 ranks
    c.config["budget"] = "per-worker"
    with pytest.raises(InputError, match="written by 2 workers, this run has 4"):
        ck.check_compatible(c, 5, "bsp", "softmax", 50)
    with pytest.raises(InputError, match="--sync bsp run"):
        ck.check_compatible(c, 3, "asp", "softmax", 50)
    with pytest.raises(InputError, match="50 parameters"):
        ck.check_compatible(c, 3, "bsp", "softmax", 51)
    ck.check_compatible(c, 3, "bsp", "softmax", 50)


def test_stale_temporaries_are_removed_and_never_loaded(tmp_path):
    ck.save(tmp_path, make())
    junk = tmp_path / ".ckpt-000002.h5.tmp-123"
    junk.write_bytes(b"half a file")
    assert [p.name for p in ck.checkpoint_paths(tmp_path)] == ["ckpt-000001.h5"]
    assert ck.clean_temporaries(tmp_path) == [junk] and not junk.exists()


def test_parse_every():
    assert ck.parse_every("30") == (30.0, 0) and ck.parse_every("2.5s") == (2.5, 0)
    assert ck.parse_every("500steps") == (0.0, 500) and ck.parse_every(None) == (0.0, 0)
    with pytest.raises(InputError):
        ck.parse_every("soon")


def test_control_due():
    c = ck.CheckpointControl(every_s=10)
    assert c.due(5, 0) is None and c.due(10, 0) == "periodic"
    c.written(10, 0)
    assert c.due(15, 0) is None
    s = ck.CheckpointControl(every_steps=100)
    assert s.due(0, 99) is None and s.due(0, 100) == "periodic"


def test_works_without_file_locking(tmp_path, monkeypatch):
    monkeypatch.setenv("HDF5_USE_FILE_LOCKING", "FALSE")
    assert ck.load(ck.save(tmp_path, make())).seq == 1


def test_inspect_lists_checkpoints_verified_and_says_what_resume_latest_loads(tmp_path, capsys):
    ck.save(tmp_path, make())
    newest = ck.save(tmp_path, make())
    flip_byte_in(newest)
    assert ck.main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{newest}: INVALID") and "corrupted" in out[0]
    assert "ckpt-000001.h5: valid; seq 1, 3 ranks, --sync bsp, softmax (50 params)" in out[1]
    assert out[2].endswith("ckpt-000001.h5")
    assert ck.main(["inspect", "--json", str(tmp_path / "ckpt-000001.h5")]) == 0
    import json
    rows = json.loads(capsys.readouterr().out)["checkpoints"]
    assert len(rows) == 1 and rows[0]["valid"] and rows[0]["n_params"] == 50
    assert ck.main(["inspect", str(tmp_path / "nowhere")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_reshape_folds_every_workers_unsent_work_and_samples_into_the_start():
    import numpy as np

    from mpikanel import checkpoint as ck
    from mpikanel.budget import Budget

    workers = [{"state": {"schedule": {"unsent_samples": 64 * (i + 1)}}, "unsent": np.full(3, float(i + 1)),
                "produced": np.zeros(3), "order": np.arange(4)} for i in range(3)]
    old = ck.Checkpoint(params=np.ones(3), initial=np.zeros(3), config={"budget": "shared"}, ranks=4, sync="ssp",
                        model="softmax", server={"version": 7, "deltas_applied": 9, "busy_s": 1.0, "policy": {},
                                                 "budget": {"counted": 1000, "lease": [5, 5, 5], "expired": False}},
                        server_arrays={}, workers=workers, seq=3)
    new = ck.reshape(old, 6)
    assert new.ranks == 6 and len(new.workers) == 5
    assert new.params.tolist() == [7.0, 7.0, 7.0]           # 1 + (1 + 2 + 3): nothing unsent is lost
    assert new.initial.tolist() == new.params.tolist()      # delta accounting restarts at the cut
    assert new.server["budget"]["counted"] == 1000 + 64 * 6 and new.server["version"] == 7
    b = Budget(5, 2000, 64)
    b.restore(new.server["budget"])
    assert b.counted == 1384 and b.lease.sum() <= 2000 - 1384   # fresh leases within what is left
    with pytest.raises(InputError, match="per-worker"):
        ck.check_compatible(ck.Checkpoint(**{**vars(old), "config": {"budget": "per-worker"}}), 6, "ssp",
                            "softmax", 3)
