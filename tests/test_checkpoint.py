"""Checkpoint directories: parts and manifest, keep-last-N, validation of corrupted, missing,
interrupted, foreign and incompatible checkpoints."""
import json

import h5py
import numpy as np
import pytest

from mpikanel import checkpoint as ck
from mpikanel.checkpoint.cli import main as inspect_main
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
    assert path.name == "ckpt-000001" and path.is_dir()
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "server-0.h5", "worker-00000.h5",
                                                      "worker-00001.h5"]
    d = ck.load(path)
    assert np.array_equal(d.params, c.params) and d.server == c.server and d.config == c.config
    assert d.workers[1]["state"] == c.workers[1]["state"]
    assert np.array_equal(d.workers[0]["unsent"], c.workers[0]["unsent"])
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["schema"] == 2 and manifest["key_ranges"] == [[0, 50]] and manifest["ranks"] == 3
    for entry in manifest["files"]:
        assert entry["bytes"] == (path / entry["file"]).stat().st_size
        assert entry["sha256"] == ck.sha256_of(path / entry["file"])
    assert ck.load(path / "manifest.json").seq == 1


def test_keep_last_n_and_latest(tmp_path):
    for _ in range(5):
        ck.save(tmp_path, make(), keep=2)
    assert [p.name for p in ck.checkpoint_paths(tmp_path)] == ["ckpt-000005", "ckpt-000004"]
    latest, notes = ck.load_latest(tmp_path)
    assert latest.seq == 5 and notes == []


def flip_byte_in(path, dataset="params"):
    with h5py.File(path) as f:
        offset = f[dataset].id.get_offset()
    with open(path, "r+b") as fh:
        fh.seek(offset + 5)
        b = fh.read(1)
        fh.seek(offset + 5)
        fh.write(bytes([b[0] ^ 0xFF]))


@pytest.mark.parametrize("part,dataset", [("server-0.h5", "params"), ("worker-00001.h5", "unsent"),
                                          ("worker-00000.h5", "order")])
def test_flipped_byte_in_any_part_is_refused_naming_the_file_and_latest_falls_back(tmp_path, part, dataset):
    ck.save(tmp_path, make())
    newest = ck.save(tmp_path, make())
    flip_byte_in(newest / part, dataset)
    with pytest.raises(InputError, match=f"ckpt-000002/{part}: checksum mismatch"):
        ck.load(newest)
    latest, notes = ck.load_latest(tmp_path)
    assert latest.seq == 1 and f"ckpt-000002/{part}" in notes[0]


def test_truncated_missing_and_foreign(tmp_path):
    path = ck.save(tmp_path, make())
    part = path / "worker-00000.h5"
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"worker-00000.h5: \d+ bytes, the manifest says"):
        ck.load(path)
    part.unlink()
    with pytest.raises(InputError, match="worker-00000.h5: missing"):
        ck.load(path)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="corrupted manifest"):
        ck.load(path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(InputError, match="not an mpikanel checkpoint"):
        ck.load(other)
    old = tmp_path / "ckpt-000009.h5"
    old.write_bytes(b"x")
    with pytest.raises(InputError, match="not a checkpoint directory"):
        ck.load(old)
    with pytest.raises(InputError, match="no such checkpoint"):
        ck.load(tmp_path / "missing")
    with pytest.raises(InputError, match=f"holds checkpoints, it is not one: name one \\({path}\\)"):
        ck.load(tmp_path)                                           # the --checkpoint-dir itself


def test_wrong_schema(tmp_path):
    path = ck.save(tmp_path, make())
    m = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**m, "schema": 99}))
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


def test_a_checkpoint_without_manifest_is_never_loaded_and_is_cleaned(tmp_path):
    ck.save(tmp_path, make())
    c = make()
    # an interrupted write: both parts there, the manifest never written
    ck.write_server_part(tmp_path, 2, 0, slice(0, 50), c.params, c.initial, book=(c.server, c.server_arrays))
    ck.write_worker_part(tmp_path, 2, 0, c.workers[0])
    (tmp_path / "ckpt-000002" / ".worker-00001.h5.tmp-123").write_bytes(b"half a file")
    with pytest.raises(InputError, match="incomplete checkpoint"):
        ck.load(tmp_path / "ckpt-000002")
    latest, notes = ck.load_latest(tmp_path)
    assert latest.seq == 1 and "ckpt-000002: incomplete checkpoint" in notes[0]
    assert ck.next_seq(tmp_path) == 3
    assert ck.clean_temporaries(tmp_path) == [tmp_path / "ckpt-000002"]
    assert [p.name for p in ck.checkpoint_paths(tmp_path)] == ["ckpt-000001"] and ck.next_seq(tmp_path) == 2


def test_parts_of_several_servers_assemble_the_model(tmp_path):
    c = make()
    ranges = [(0, 20), (20, 50)]
    unapplied = np.arange(50.0)
    parts = [ck.write_server_part(tmp_path, 1, k, slice(a, b), c.params[a:b], c.initial[a:b], unapplied[a:b],
                                  (c.server, c.server_arrays) if k == 0 else None)
             for k, (a, b) in enumerate(ranges)][::-1]            # the manifest's order does not matter
    parts += [ck.write_worker_part(tmp_path, 1, w, saved) for w, saved in enumerate(c.workers)]
    run = ck.run_fields(c.config, 3, ranges, "bsp", "softmax", 1.0, False, "periodic")
    d = ck.load(ck.commit(tmp_path, 1, run, parts))
    assert d.servers == 2 and np.array_equal(d.params, c.params) and np.array_equal(d.initial, c.initial)
    assert np.array_equal(d.server_arrays["unapplied"], unapplied) and d.server == c.server


def test_a_part_of_an_earlier_checkpoint_is_linked_in_and_outlives_it(tmp_path):
    c = make()
    first = ck.load(ck.save(tmp_path, c, keep=1))
    done = next(e for e in first.parts if e["file"] == "worker-00001.h5")   # a worker that has left
    done = {**done, "path": str(first.path / done["file"])}
    parts = [ck.write_server_part(tmp_path, 2, 0, slice(0, 50), c.params, c.initial, book=(c.server, c.server_arrays)),
             ck.write_worker_part(tmp_path, 2, 0, c.workers[0]), done]
    second = ck.commit(tmp_path, 2, ck.run_fields(c.config, 3, [(0, 50)], "bsp", "softmax", 2.0, True, "end"),
                       parts, keep=1)
    assert not first.path.exists()                               # keep=1 removed the first checkpoint
    assert done["path"] == str((second / "worker-00001.h5").resolve())
    d = ck.load(second)
    assert np.array_equal(d.workers[1]["unsent"], c.workers[1]["unsent"]) and d.final


def test_hold_applies_to_one_rank_and_checkpoint(monkeypatch):
    monkeypatch.setenv(ck.HOLD_ENV, "2:3")
    assert ck.hold_s(2, 3) == ck.HOLD_S and ck.hold_s(2, 2) == 0 == ck.hold_s(1, 3)


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
    flip_byte_in(newest / "server-0.h5")
    assert inspect_main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{newest}: INVALID") and "server-0.h5: checksum mismatch" in out[0]
    assert "ckpt-000001: valid; seq 1, 2 workers, 1 server, --sync bsp, softmax (50 params)" in out[1]
    assert "3 files" in out[1]
    assert out[2].endswith("ckpt-000001")
    assert inspect_main(["inspect", str(tmp_path / "ckpt-000001")]) == 0     # one checkpoint: its parts too
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("  server-0.h5: server 0, ") and out[3].startswith("  worker-00001.h5: worker 1, ")
    assert inspect_main(["inspect", "--json", str(tmp_path / "ckpt-000001")]) == 0
    rows = json.loads(capsys.readouterr().out)["checkpoints"]
    assert len(rows) == 1 and rows[0]["valid"] and rows[0]["n_params"] == 50 and len(rows[0]["files"]) == 3
    assert inspect_main(["inspect", str(tmp_path / "nowhere")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_inspect_of_one_checkpoint_names_what_its_directory_resumes(tmp_path, capsys):
    first = ck.save(tmp_path, make())
    newest = ck.save(tmp_path, make())
    assert inspect_main(["inspect", str(first)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (f"--resume latest --checkpoint-dir {tmp_path} would load: "
                                                       f"{newest}")
    flip_byte_in(newest / "server-0.h5")
    assert inspect_main(["inspect", "--json", str(newest)]) == 0
    assert json.loads(capsys.readouterr().out)["resume_latest"] == str(first)


def test_a_folder_that_is_not_a_checkpoint_is_called_that(tmp_path):
    plain = tmp_path / "results"
    plain.mkdir()
    (plain / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="results: not a checkpoint \\(no manifest.json; a checkpoint is a "
                                         "ckpt-NNNNNN directory"):
        ck.load(plain)
    interrupted = tmp_path / "elsewhere"
    interrupted.mkdir()
    (interrupted / "server-0.h5").write_bytes(b"x")       # parts without a manifest: an interrupted write
    with pytest.raises(InputError, match="incomplete checkpoint"):
        ck.load(interrupted)


def test_reshape_folds_every_workers_unsent_work_and_samples_into_the_start():
    import numpy as np

    from mpikanel import checkpoint as ck
    from mpikanel.engine.budget import Budget

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


def test_mostly_zero_vectors_are_stored_as_keys_and_values_and_come_back_bitwise(tmp_path):
    c = make(n=10_000)
    sparse = np.zeros(10_000)
    sparse[[3, 77, 9_999]] = [1.5, -2.0, -0.0]          # -0.0 too: bitwise, not just equal
    c.workers[0]["unsent"] = sparse
    path = ck.save(tmp_path, c)
    with h5py.File(path / "worker-00000.h5") as f:
        assert isinstance(f["unsent"], h5py.Group) and f["unsent/keys"][()].tolist() == [3, 77, 9_999]
        assert isinstance(f["produced"], h5py.Dataset)                   # dense stays dense
    d = ck.load(path)
    assert d.workers[0]["unsent"].tobytes() == sparse.tobytes()
    assert np.array_equal(d.workers[0]["produced"], c.workers[0]["produced"])


def test_a_part_that_cannot_be_written_is_one_error_naming_the_file(tmp_path):
    from mpikanel.errors import CheckpointError

    (tmp_path / "ckpt-000001").write_text("a file where the checkpoint's directory goes")
    with pytest.raises(CheckpointError, match=r"ckpt-000001/worker-00003.h5: cannot write this checkpoint file"):
        ck.write_worker_part(tmp_path, 1, 3, make().workers[0])
    (tmp_path / "ckpt-000002").mkdir()
    (tmp_path / "ckpt-000002" / "manifest.json").mkdir()       # the manifest cannot replace a directory
    with pytest.raises(CheckpointError, match=r"ckpt-000002/manifest.json: cannot write"):
        ck.commit(tmp_path, 2, {}, [])
    assert not list((tmp_path / "ckpt-000002").glob(".manifest.json.tmp-*"))   # no temporary left


def test_workers_parts_can_stay_on_disk_until_each_worker_reads_its_own(tmp_path):
    c = make()
    for w in c.workers:
        w["state"]["schedule"] = {"unsent_samples": 64}
    c.server.update(budget={"counted": 0, "lease": [1, 1], "expired": False}, deltas_applied=0, busy_s=0.0)
    lazy = ck.load(ck.save(tmp_path, c), worker_arrays=False)
    assert set(lazy.workers[1]) == {"state", "part"} and lazy.workers[1]["part"].endswith("worker-00001.h5")
    full = ck.worker_state(lazy.workers[1])
    assert np.array_equal(full["unsent"], c.workers[1]["unsent"]) and full["state"] == c.workers[1]["state"]
    assert ck.worker_state(full) is full                        # already loaded: as it is
    # a reshape reads them one by one: the same start as from the fully loaded checkpoint
    assert np.array_equal(ck.reshape(lazy, 4).params, ck.reshape(ck.load(lazy.path), 4).params)
    assert np.allclose(ck.reshape(lazy, 4).params, c.params + c.workers[0]["unsent"] + c.workers[1]["unsent"])
    again = ck.load(ck.save(tmp_path / "copy", lazy))          # written anew from the parts left on disk
    assert np.array_equal(again.workers[1]["unsent"], c.workers[1]["unsent"])
