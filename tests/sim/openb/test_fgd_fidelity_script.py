"""scripts/fgd_fidelity.py without FGD's simulator: its sequence file, log reader and node order."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from optsched.sim.openb.reader import Nodes, read_pods

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "fgd_fidelity.py"


@pytest.fixture(scope="module")
def ff() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fgd_fidelity", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fgd_fidelity"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_sequence_file_keeps_arrival_order(ff: ModuleType, tmp_path: Path, pods_csv: Path) -> None:
    pods = read_pods(pods_csv)
    seq = pods.take([3, 0, 3, 6])  # repeats, as the 130% tuning draws them
    out = tmp_path / "seq.csv"
    ff.write_sequence(seq, out)
    back = read_pods(out)
    assert list(back.names) == sorted(back.names)  # the simulator schedules in name order
    assert [n.split("-", 1)[1] for n in back.names] == list(seq.names)
    assert seq.names[0] == seq.names[2] != seq.names[1]
    assert back.gpu_milli.tolist() == seq.gpu_milli.tolist()
    assert back.num_gpu.tolist() == seq.num_gpu.tolist()
    assert back.cpu_milli.tolist() == seq.cpu_milli.tolist()
    assert back.gpu_spec == seq.gpu_spec


def test_log_reader(ff: ModuleType, tmp_path: Path) -> None:
    log = tmp_path / "log-x.log"
    log.write_text(
        'time="t" level=info msg="[0] attempt to create pod(paib-gpu/a00000-openb-pod-6612)\\n"\n'
        'time="t" level=info msg="pod(paib-gpu/a00000-openb-pod-6612) is scheduled to '
        'node(0130-openb-node-0479)\\n"\n'
        'time="t" level=info msg="[Alloc]; Used nodes: 1; Used GPUs: 1; Used GPU Milli: 320; '
        'Total GPUs: 6212; Arrived GPU Milli: 320\\n"\n'
        'time="t" level=info msg="[1] failed to schedule pod(paib-gpu/a00001-openb-pod-8015): x\\n"\n'
        'time="t" level=info msg="pod(paib-gpu/a00002-openb-pod-0835) is scheduled to '
        'node(0218-openb-node-0155)\\n"\n'
        'time="t" level=info msg="[Alloc]; Used nodes: 2; Used GPUs: 2; Used GPU Milli: 1320; '
        'Total GPUs: 6212; Arrived GPU Milli: 2130\\n"\n'
    )
    got = ff.read_artifact_log(log)
    assert got["nodes"] == {0: (130, "openb-node-0479"), 2: (218, "openb-node-0155")}
    assert (got["used_milli"], got["total_gpus"], got["arrived_milli"]) == (1320, 6212, 2130)
    empty = tmp_path / "log-empty.log"
    empty.write_text("nothing\n")
    with pytest.raises(ValueError, match="no \\[Alloc\\] line"):
        ff.read_artifact_log(empty)


def test_tie_order_follows_the_ranks(ff: ModuleType) -> None:
    nodes = Nodes(
        names=("b", "a", "c"),
        cpu_milli=np.array([1, 2, 3]),
        memory_mib=np.array([10, 20, 30]),
        gpus=np.array([1, 2, 8]),
        models=("T4", "P100", "G2"),
    )
    # ranks are given in name order: a -> 2, b -> 0, c -> 1
    tied = ff.in_tie_order(nodes, [2, 0, 1])
    assert tied.names == ("b", "c", "a")
    assert tied.cpu_milli.tolist() == [1, 3, 2] and tied.models == ("T4", "G2", "P100")


def test_bad_simulator_exits_2_naming_it(
    ff: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        ff.main(["--simulator", str(tmp_path), "--traces", str(tmp_path), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert "error: --simulator:" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_timeout_stops_the_simulator_the_run_script_started(ff: ModuleType, tmp_path: Path) -> None:
    """The run script starts ``bin/simon`` as its own child: past ``--timeout`` both stop (a
    timeout that killed only the script left the simulator running without a parent)."""
    import argparse
    import os
    import time

    sim = tmp_path / "sim"
    (sim / "scripts").mkdir(parents=True)
    pid_file = tmp_path / "grandchild.pid"
    (sim / "scripts" / "generate_config_and_run.py").write_text(
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    a = argparse.Namespace(simulator=sim, python=sys.executable, timeout=3.0)
    with pytest.raises(SystemExit):
        ff.run_artifact(a, tmp_path / "inputs", tmp_path / "run", "fgd")
    pid = int(pid_file.read_text())
    for _ in range(50):  # killed at once; reaped by init a moment later
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split()[2] == "Z":  # a zombie has stopped running
                break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the simulator's process {pid} still runs after the timeout")
