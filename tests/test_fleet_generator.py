"""``optsched generate --size fleet --gpus N``: valid, sized as asked, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optsched.engine.state import ClusterState, parse_snapshot
from optsched.instances import generate, generate_fleet
from tests.cli.test_cli import run


@pytest.mark.parametrize("gpus", [64, 2048, 8000])
def test_fleet_is_valid_and_sized(gpus: int) -> None:
    data = generate("fleet", seed=4, gpus=gpus)
    st = ClusterState.from_snapshot(parse_snapshot(json.dumps(data)))
    assert sum(n.gpus for n in st.snapshot.nodes) == gpus
    assert len(st.snapshot.nodes) == gpus // 8
    assert len(st.pending()) == gpus // 2
    assert len(st.snapshot.tenants) == max(20, gpus // 250)
    held = sum(j.gpus for j in st.running() if j.id not in st.host_of)
    cap = sum(st.capacity().values())
    assert held <= 0.85 * cap + 64
    if gpus >= 2048:  # (at 64 GPUs, 20 tenants' integer quotas cap the fill)
        assert held >= 0.8 * cap  # about 85% of the available GPUs run
        assert any(j.on_loan for j in st.running())
        assert any(j.guest_of for j in st.running())
    for t in st.type_names:  # in-quota use within every tenant's quota
        for x in st.tenant_ids:
            own = sum(j.gpus for j in st.running()
                      if j.tenant == x and not j.on_loan and j.id not in st.host_of and st.job_type(j) == t)
            assert own <= st.quota(x, t)
    assert generate("fleet", seed=4, gpus=gpus) == data
    assert generate("fleet", seed=5, gpus=gpus) != data


def test_fleet_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="gpus"):
        generate_fleet(1001)
    with pytest.raises(ValueError, match="gpus"):
        generate("large", gpus=800)


def test_generate_fleet_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "f.json"
    assert run(["generate", "--size", "fleet", "--gpus", "800", "-o", str(p)], capsys)[0] == 0
    assert sum(n["gpus"] for n in json.loads(p.read_text())["nodes"]) == 800
    code, _, err = run(["generate", "--size", "fleet", "--gpus", "100"], capsys)
    assert code == 2 and "--gpus" in err
    code, _, err = run(["generate", "--size", "venus", "--gpus", "800"], capsys)
    assert code == 2 and "--gpus" in err
