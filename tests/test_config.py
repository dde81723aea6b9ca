"""Config: defaults, TOML mirroring the flags, flag precedence and clear errors."""
import math

import pytest

from mpikanel.config import TrainConfig, config_from_args, load_toml, make_config
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
