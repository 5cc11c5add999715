"""Interference sources: Lucid's CSVs read from a traces folder, and the synthetic model."""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import pytest

from optsched.sim import synthetic
from optsched.sim.profiles import find_lucid_dir, load_lucid, sqrt_rule
from optsched.sim.runner import RunSpec, run_one
from optsched.sim.synthetic import (
    fit_pair_law,
    law_mean,
    pair_law_speeds,
    synthetic_interference,
    synthetic_profiles,
)
from optsched.sim.trace import load_trace, read_venus, resolve_interference

SINGLE = """model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label
BERT,SQuAD,32,0,84.872,99.689,62.484,20162.0,2
ResNet18,CIFAR-10,32.0,1,2000.5,40.0,20.0,2330.0,0
MobileNetV3,ImageNet,64,0,500.0,70.0,35.0,4096.0,1
"""
COLOC = """,model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,\
amp2,speed2,gpu_util,gmem_util,gmem
0,ResNet18,CIFAR-10,1,32,1,0.9,MobileNetV3,ImageNet,1,64,0,0.7,80.0,30.0,6400
1,MobileNetV3,ImageNet,1,64.0,0,0.8,ResNet18,CIFAR-10,1,32,1,1.2,80.0,30.0,6400
2,BERT,SQuAD,1,32,0,0.2,ResNet18,CIFAR-10,1,32,1,0.5,99.0,70.0,22000
"""
BERT = ("BERT", "SQuAD", 32, 0)
RES = ("ResNet18", "CIFAR-10", 32, 1)
MOB = ("MobileNetV3", "ImageNet", 64, 0)


def _lucid(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "single_data.csv").write_text(SINGLE)
    (folder / "colocate_info.csv").write_text(COLOC)
    return folder


def test_lucid_reader_reads_the_original_columns(tmp_path: Path) -> None:
    inter = load_lucid(_lucid(tmp_path / "lucid_venus"))
    assert inter.source.startswith("lucid:") and inter.source.endswith("lucid_venus")
    assert set(inter.profiles) == {BERT, RES, MOB}
    bert = inter.profiles[BERT]
    assert bert.label == 2 and bert.memory_gib == pytest.approx(20162.0 / 1024.0)
    assert bert.workload() == {"gpu_util": 99.689, "gmem": 20162.0, "speed": 84.872,
                               "gmem_util": 62.484}
    assert inter.n_pairs == 2
    # the pair measured in both orders is averaged; each order returns its own job first
    # (ResNet18 at (0.9 + 1.2) / 2 = 1.05, clipped to 1; MobileNetV3 at (0.7 + 0.8) / 2)
    assert inter.pair_speeds(RES, MOB) == pytest.approx((1.0, 0.75))
    assert inter.pair_speeds(MOB, RES) == pytest.approx((0.75, 1.0))
    assert inter.pair_speeds(BERT, RES) == (0.3, 0.5)  # clipped to [0.3, 1]
    # an unmeasured pair follows the sqrt rule on the profiles' utilisations
    assert inter.pair_speeds(BERT, MOB) == sqrt_rule(99.689, 70.0)
    assert inter.pair_speeds(BERT, MOB)[0] == pytest.approx(math.sqrt(100.0 / 169.689))


def test_missing_lucid_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "single_data.csv").write_text(SINGLE)
    with pytest.raises(FileNotFoundError):
        load_lucid(tmp_path / "half")


VENUS = """job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,duration,dataset,\
model,batchsize,amp
7,u1,vcA,j,1,4,1,COMPLETED,2020-09-01 00:00:13,877,CIFAR-10,ResNet18,32,1
8,u2,vcA,k,1,4,1,COMPLETED,2020-09-01 00:01:00,50,SQuAD,BERT,32,0
"""


def _venus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    log = folder / "log_SYNTHETIC.csv.gz"
    log.write_bytes(gzip.compress(VENUS.encode()))
    return log


def test_venus_trace_finds_the_lucid_folder_of_its_traces_path(tmp_path: Path) -> None:
    lucid = _lucid(tmp_path / "traces" / "lucid_venus")
    (lucid / "vc_config.csv").write_text(",num\nvcA,1\n")
    log = _venus(tmp_path / "traces" / "venus_surrogate")
    assert find_lucid_dir(log) == lucid
    tr = load_trace(log)
    assert tr.interference_source == f"lucid:{lucid.name}"
    # the trace has no workload columns: the profile comes from single_data.csv
    assert tr.jobs[1].workload == {"gpu_util": 99.689, "gmem": 20162.0, "speed": 84.872,
                                   "gmem_util": 62.484}
    assert tr.jobs[1].memory_gib == pytest.approx(20162.0 / 1024.0)
    assert any("interference: lucid:" in n for n in tr.notes)


def test_explicit_lucid_dir_wins_and_fallback_is_synthetic_and_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = _venus(tmp_path / "traces" / "venus_surrogate")
    cfg = tmp_path / "vc_config.csv"
    cfg.write_text(",num\nvcA,1\n")
    with caplog.at_level(logging.WARNING, logger="optsched.sim"):
        tr = read_venus(log, vc_config=cfg)
    assert tr.interference_source == "synthetic"
    assert "synthetic interference model" in caplog.text
    assert tr.jobs[0].workload == {}  # a real profile name unknown to the synthetic model
    other = _lucid(tmp_path / "elsewhere")
    assert read_venus(log, vc_config=cfg, lucid_dir=other).interference_source.startswith(
        "lucid:")
    assert resolve_interference(None).source == "synthetic"


def test_mini_run_reports_the_synthetic_model() -> None:
    tr = load_trace("mini", max_jobs=30)
    assert tr.interference_source == "synthetic"
    assert all(j.profile is not None and j.profile[0].startswith("synth-") for j in tr.jobs)
    log = run_one(RunSpec(trace="mini", policy="gandiva", seed=0, max_jobs=30))
    assert log.interference == "synthetic"


def test_synthetic_profiles_are_deterministic_and_plausible() -> None:
    a, b = synthetic_profiles(), synthetic_profiles()
    assert a == b and len(a) == synthetic.N_PROFILES
    assert synthetic_profiles(seed=1) != a
    for k, p in enumerate(a):
        assert p.key[0] == f"synth-{k}" and p.key[1] == "synth"
        assert 25.0 <= p.gpu_util <= 100.0 and 0 < p.gmem_util < p.gpu_util
        assert 1.2 <= p.memory_gib <= 30.0 and p.speed > 0 and p.label in (0, 1, 2)
        assert set(p.workload()) == {"speed", "gpu_util", "gmem_util", "gmem"}
    assert {p.label for p in a} == {0, 1, 2}


def test_pair_law_is_seeded_symmetric_and_bounded() -> None:
    keys = [p.key for p in synthetic_profiles()]
    utils = [0.0, 10.0, 35.0, 50.0, 80.0, 100.0]
    differs = False
    for ua in utils:
        for ub in utils:
            for a, b in ((keys[0], keys[1]), (keys[2], None), (None, None)):
                s = pair_law_speeds(ua, ub, a, b, seed=3)
                assert s == pair_law_speeds(ua, ub, a, b, seed=3)
                assert pair_law_speeds(ub, ua, b, a, seed=3) == (s[1], s[0])
                assert all(synthetic.LAW_MIN <= x <= synthetic.LAW_MAX for x in s)
                differs |= s != pair_law_speeds(ua, ub, a, b, seed=4)
    assert differs
    # the noiseless law falls as the pair oversubscribes the GPU and as the partner's share grows
    assert law_mean(50, 50) > law_mean(80, 80) > law_mean(100, 100)
    assert law_mean(60, 20) > law_mean(20, 60)
    inter = synthetic_interference(seed=3)
    assert inter.source == "synthetic"
    assert inter.pair_speeds(keys[0], keys[1]) == pair_law_speeds(
        inter.profiles[keys[0]].gpu_util, inter.profiles[keys[1]].gpu_util, keys[0], keys[1],
        seed=3)


def test_fit_pair_law_recovers_known_constants(tmp_path: Path) -> None:
    # pairs generated from the noiseless law with the module's constants: the fit must return them
    folder = tmp_path / "lucid"
    folder.mkdir()
    utils = [20.0, 35.0, 50.0, 65.0, 80.0, 95.0]
    rows = ["model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label"]
    rows += [f"m{k},d,32,0,100,{u},10,2048,0" for k, u in enumerate(utils)]
    (folder / "single_data.csv").write_text("\n".join(rows) + "\n")
    pairs = [",model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,"
             "batchsize2,amp2,speed2,gpu_util,gmem_util,gmem"]
    n = 0
    for i, ui in enumerate(utils):
        for j, uj in enumerate(utils[i:], start=i):
            pairs.append(f"{n},m{i},d,1,32,0,{law_mean(ui, uj):.6f},m{j},d,1,32,0,"
                         f"{law_mean(uj, ui):.6f},0,0,0")
            n += 1
    (folder / "colocate_info.csv").write_text("\n".join(pairs) + "\n")
    fit = fit_pair_law(folder)
    assert fit.n == 2 * n
    assert (fit.c0, fit.c1, fit.c2) == pytest.approx((synthetic.C0, synthetic.C1, synthetic.C2),
                                                     abs=1e-4)
    assert fit.rmse < 1e-4 and fit.sigma < 1e-4
