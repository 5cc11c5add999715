"""The openb readers: exact values, order, optional columns and errors naming the column."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from optsched.sim.openb.reader import OpenbError, read_nodes, read_pods


def test_nodes_exact(nodes_csv: Path) -> None:
    n = read_nodes(nodes_csv)
    assert n.names == ("n0", "n1", "n2")
    assert n.cpu_milli.tolist() == [32000, 64000, 16000]
    assert n.memory_mib.tolist() == [65536, 131072, 32768]
    assert n.gpus.tolist() == [2, 8, 1]
    assert n.models == ("T4", "V100M16", "T4")
    assert n.gpu_capacity_milli == 11000


def test_pods_exact_in_creation_order(pods_csv: Path) -> None:
    p = read_pods(pods_csv)
    assert p.names == ("p1", "p2", "p0", "p3", "p4", "p5", "p6")
    assert p.creation_time.tolist() == [10, 20, 30, 40, 50, 60, 70]
    assert p.cpu_milli.tolist() == [2000, 4000, 2000, 4000, 1000, 2000, 8000]
    assert p.memory_mib.tolist() == [4096, 8192, 4096, 8192, 2048, 4096, 16384]
    assert p.num_gpu.tolist() == [1, 1, 1, 1, 0, 1, 2]
    assert p.gpu_milli.tolist() == [400, 1000, 400, 1000, 0, 400, 1000]
    assert p.gpu_spec[3] == frozenset({"V100M16", "T4"})
    assert p.gpu_spec[0] == frozenset()
    assert p.gpu_spec[6] == frozenset({"V100M16"})
    assert p.qos[3] == "BE"
    assert p.gpu_request_milli.tolist() == [400, 1000, 400, 1000, 0, 400, 2000]
    assert p.cpu_milli.dtype == np.int64


def test_gzip_and_five_column_lists(tmp_path: Path) -> None:
    path = tmp_path / "openb_pod_list_multigpu20.csv.gz"
    path.write_bytes(
        gzip.compress(b"name,cpu_milli,memory_mib,num_gpu,gpu_milli\nb,1,2,1,1000\na,3,4,4,1000\n")
    )
    p = read_pods(path)
    assert p.names == ("b", "a")  # file order when there is no creation_time
    assert p.num_gpu.tolist() == [1, 4]
    assert p.gpu_spec == (frozenset(), frozenset())


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", "gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,x,1,1,1000\n", "row 2:cpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1200\n", "row 2:gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", "row 2:gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,9,1000\n", "row 2:num_gpu"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,-1,1,1000\n", "row 2:memory_mib"),
    ],
)
def test_pod_errors_name_the_column(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(OpenbError) as err:
        read_pods(path)
    assert where in err.value.path


def test_node_errors(tmp_path: Path) -> None:
    path = tmp_path / "n.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,2,\n")
    with pytest.raises(OpenbError, match="needs a model") as err:
        read_nodes(path)
    assert err.value.path.endswith("row 2:model")
    path.write_text("sn,cpu_milli,memory_mib,model\nn0,1,1,T4\n")
    with pytest.raises(OpenbError, match="missing column 'gpu'"):
        read_nodes(path)
    with pytest.raises(OpenbError, match="no such file"):
        read_nodes(tmp_path / "absent.csv")
