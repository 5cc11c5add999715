"""Small openb CSVs written into tmp_path (the project never ships trace files)."""

from __future__ import annotations

from pathlib import Path

import pytest

NODES_CSV = (
    "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,64000,131072,8,V100M16\nn2,16000,32768,1,T4\n"
)

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
PODS_ROWS = [
    "p0,2000,4096,1,400,,LS,Running,30,99,30",
    "p1,2000,4096,1,400,,LS,Running,10,99,10",
    "p2,4000,8192,1,1000,,LS,Running,20,99,",
    "p3,4000,8192,1,1000,V100M16|T4,BE,Pending,40,99,",
    "p4,1000,2048,0,0,,Burstable,Running,50,99,50",
    "p5,2000,4096,1,400,,LS,Running,60,99,60",
    "p6,8000,16384,2,1000,V100M16,LS,Running,70,99,70",
]


@pytest.fixture
def nodes_csv(tmp_path: Path) -> Path:
    p = tmp_path / "nodes.csv"
    p.write_text(NODES_CSV)
    return p


@pytest.fixture
def pods_csv(tmp_path: Path) -> Path:
    p = tmp_path / "openb_pod_list_default.csv"
    p.write_text(POD_HEADER + "\n".join(PODS_ROWS) + "\n")
    return p
