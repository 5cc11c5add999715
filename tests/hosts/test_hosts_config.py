"""The Slurm adapter's config: valid files load, bad ones are refused naming the field (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optsched.cli import main
from optsched.errors import SnapshotError
from optsched.hosts.config import load_config, parse_config

GOOD = """
cluster = "dev"
epoch_s = 5
store = "state/optsched.db"

[gpu_types.a100]
name = "A100"
memory_gib = 80

[gpu_types.v100]
memory_gib = 32

[[tenants]]
id = "alpha"
accounts = ["alpha"]
quota = { a100 = 8 }
lend_limit = { a100 = 4 }
qos = { max_queue_delay_s = 60, target = 0.9 }
default_qos = "guaranteed"

[[tenants]]
id = "beta"
partitions = ["b"]
quota = { v100 = 8 }

[qos]
guaranteed = ["high"]
"""


def test_a_valid_config_loads_and_the_store_is_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(GOOD)
    cfg = load_config(tmp_path / "c.toml")
    assert cfg.cluster == "dev" and cfg.epoch_s == 5
    assert cfg.type_name("a100") == "A100" and cfg.type_name("v100") == "v100"
    assert cfg.gres_of("A100") == "a100"
    assert Path(cfg.store) == (tmp_path / "state" / "optsched.db").resolve()
    assert cfg.tenants[0].qos is not None and cfg.tenants[0].qos.target == 0.9


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("quota = { a100 = 8 }", "quota = { h100 = 8 }"), "tenants[0].quota.h100: unknown GPU type"),
        (("epoch_s = 5", "epoch_s = -5"), "epoch_s: Input should be greater than 0"),
        (("epoch_s = 5", "epoch_z = 5"), "epoch_z: unknown field"),
        (('partitions = ["b"]', 'accounts = ["alpha"]'), "tenants[1].accounts: 'alpha' already belongs"),
        (('partitions = ["b"]', ""), "a tenant needs at least one of 'accounts' or 'partitions'"),
        (("target = 0.9", "target = 1.5"), "tenants[0].qos.target"),
        (('id = "beta"', 'id = "alpha"'), "tenants[1].id: duplicate tenant 'alpha'"),
        (("[qos]", "[qos\n"), "not valid TOML"),
    ],
)
def test_bad_configs_name_the_field(edit: tuple[str, str], expected: str) -> None:
    with pytest.raises(SnapshotError) as err:
        parse_config(GOOD.replace(*edit), source="c.toml")
    assert expected in str(err.value)
    assert str(err.value).startswith("c.toml")


def test_the_command_line_exits_2_on_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.toml").write_text(GOOD.replace("memory_gib = 32", "memory_gib = 0"))
    assert main(["slurm", "run", "--config", str(tmp_path / "c.toml"), "--once"]) == 2
    err = capsys.readouterr().err
    assert "gpu_types.v100.memory_gib" in err and "Traceback" not in err
    assert main(["slurm", "run", "--config", str(tmp_path / "missing.toml"), "--once"]) == 2
