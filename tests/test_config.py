"""Config: defaults, TOML mirroring the flags, flag precedence and clear errors."""
import math

import pytest

from mpikanel.config import (GROUPS, TrainConfig, build_parser, config_from_args, load_toml, make_config,
                             known_settings, resumed_config, setting_fields)
from mpikanel.errors import InputError


def test_defaults_are_valid():
    c = TrainConfig()
    assert c.sync == "bsp" and c.model == "softmax" and c.data == "synthetic"


def test_flags_override_toml(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text('sync = "ssp"\nstaleness = 2\nbatch-size = 32\nlr = 0.5\n')
    c = config_from_args(["--config", str(p), "--lr", "0.2"])
    assert (c.sync, c.staleness, c.batch_size, c.lr) == ("ssp", 2, 32, 0.2)


def test_inf_staleness_round_trips():
    c = config_from_args(["--sync", "ssp", "--staleness", "inf"])
    assert math.isinf(c.staleness)
    assert make_config(c.to_dict()) == c


@pytest.mark.parametrize("changes,match", [
    ({"lr": 0}, "--lr"), ({"batch_size": 0}, "--batch-size"), ({"test_fraction": 1.0}, "--test-fraction"),
    ({"staleness": -1}, "--staleness"), ({"sync": "xyz"}, "sync"), ({"epochs": 0}, "--epochs"),
    ({"curve_points": 1}, "--curve-points"),
])
def test_bad_values(changes, match):
    with pytest.raises(InputError, match=match):
        make_config(**changes)


def test_toml_errors(tmp_path):
    with pytest.raises(InputError, match="no such config"):
        load_toml(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("nonsense = 1\n")
    with pytest.raises(InputError, match="unknown key 'nonsense'"):
        load_toml(str(bad))
    broken = tmp_path / "broken.toml"
    broken.write_text("lr = \n")
    with pytest.raises(InputError, match="invalid TOML"):
        load_toml(str(broken))


def test_unknown_flag_value_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        config_from_args(["--sync", "nope"])
    assert exc.value.code == 2


def test_given_settings_are_tracked(tmp_path):
    p = tmp_path / "run.toml"
    p.write_text('sync = "ssp"\n')
    assert config_from_args(["--config", str(p), "--lr", "0.2"]).given == {"sync", "lr"}
    assert make_config({"epochs": 2}, seed=3).given == {"epochs", "seed"}
    assert make_config().replace(l2=0.0).given == {"l2"}
    assert "given" not in make_config().to_dict()


def test_a_resume_takes_every_setting_not_given_from_its_checkpoint():
    checkpointed = make_config(sync="esp", epochs=6, lr=0.05, staleness=float("inf"), summary_json="old.json",
                               threads=2).to_dict()
    now = resumed_config(make_config(lr=0.01, resume="latest", checkpoint_dir="ck"), checkpointed)
    assert (now.sync, now.epochs, now.lr, math.isinf(now.staleness)) == ("esp", 6, 0.01, True)
    # where this invocation writes and how it runs are its own
    assert (now.summary_json, now.threads, now.resume, now.checkpoint_dir) == (None, 1, "latest", "ck")
    assert now.given == {"lr", "resume", "checkpoint_dir"}


def test_every_setting_is_in_one_help_group():
    grouped = [name for names in GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(f.name for f in setting_fields())
    help_text = build_parser().format_help()
    assert all(title.split(":")[0] + ":" in help_text for title in GROUPS)


@pytest.mark.parametrize("argv,expected", [
    (["--epcohs", "3"], "unknown flag --epcohs; did you mean --epochs?"),
    (["--stalness=2"], "unknown flag --stalness; did you mean --staleness?"),
    (["--zzzz"], "unknown flag --zzzz (--help lists the flags)"),
])
def test_a_mistyped_flag_is_one_line_with_the_nearest(argv, expected, capsys):
    with pytest.raises(SystemExit) as exc:
        config_from_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"python -m mpikanel.train: error: {expected}"]


def test_a_setting_an_older_version_recorded_and_this_one_dropped_is_left_out():
    recorded = {**make_config(sync="esp").to_dict(), "esp_busy_max": 3}
    assert resumed_config(make_config(resume="latest", checkpoint_dir="ck"), recorded).sync == "esp"
    assert "esp_busy_max" not in known_settings(recorded)


def test_synthetic_sparse_refuses_a_class_count_it_cannot_make():
    with pytest.raises(InputError, match="binary"):
        make_config(data="synthetic-sparse", synthetic_classes=10)
    make_config(data="synthetic-sparse", synthetic_classes=2)
