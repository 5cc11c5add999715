"""Our openb baselines against FGD's own simulator on the same arrivals (issue 20).

Optional and manual: it needs a checkout of the FGD paper's simulator
(github hkust-adsl/kubernetes-scheduler-simulator, built with ``go build -o bin/simon ./cmd``;
it vendors its Go dependencies, so Debian's ``golang-go`` builds it offline) and an interpreter
with pandas and PyYAML for the simulator's own scripts. CI cannot fetch it; the tests exercise
the script's own parts without it. See docs/openb.md, *Against FGD's own simulator*.

    python scripts/fgd_fidelity.py --simulator KSS --traces TRACES/alibaba_gpu_v2023 \\
        --trace default --seeds 0 --policies fgd --out fgd-fidelity

For each trace and seed, our arrival sequence (``optsched.sim.openb.protocol.arrivals``: the
shuffled trace tuned to 130% of the GPUs) is written as an openb pod list whose names sort in
arrival order (``a00000-openb-pod-6612``, ...). The simulator's own ``data/pod_csv_to_yaml.py``
turns it into its input, and its own ``scripts/generate_config_and_run.py`` runs it with the
policy's flags from the artifact's run scripts and ``--shuffle-pod=false``, no tuning: pods
without a creation time are scheduled in name order, so both simulators see the same pods in
the same order, with the same target workload (the typical pods come from the pods given, in
both). Our replay runs the same sequence with ``workload`` = that sequence. The table
(``OUT/fidelity.md``, ``OUT/fidelity.json``) has the unallocated GPUs at the end (130%
arrived), the placed pods, and how many pods went to the same node in both.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from optsched.sim.openb.protocol import arrivals, replay
from optsched.sim.openb.reader import Nodes, OpenbError, Pods, read_nodes, read_pods
from optsched.sim.openb.report import make_policy

#: our policy name -> the artifact's flags for ``generate_config_and_run.py`` (from its run
#: scripts, ``experiments/run_scripts/generate_run_scripts.py``)
ARTIFACT_FLAGS: dict[str, list[str]] = {
    "random": ["-Random", "1000", "-gpusel", "random"],
    "dotprod": ["-DotProd", "1000", "-gpusel", "best", "-dimext", "merge", "-norm", "max"],
    "clustering": ["-GpuClustering", "1000"],
    "packing": ["-GpuPacking", "1000"],
    "bestfit": ["-BestFit", "1000"],
    "fgd": ["-FGD", "1000", "-gpusel", "FGD", "-dimext", "share", "-norm", "max"],
}
NODE_LIST = "openb_node_list_gpu_node"
_SCHEDULED = re.compile(r"pod\(paib-gpu/(a\d+)-[^)]*\) is scheduled to node\((\d+)-([^)]*)\)")
#: The simulator renames node i (in name order) to ``f"{perm[i]:04d}-{name}"`` with
#: ``perm = rand.Perm(nodes)`` of Go's math/rand, seeded with the workload tuning seed (233 when
#: not given), and breaks equal scores by the smallest name: its node order for ties is that
#: permutation. With no shuffle and no tuning, eleven draws come before the permutation (found
#: by matching the logs; every run checks it against the names in its log). This Go program
#: prints the permutation; the script builds it with the same ``go`` that built ``bin/simon``.
PERM_GO = """package main

import (
	"fmt"
	"math/rand"
)

func main() {
	rand.Seed(233)
	for i := 0; i < 11; i++ {
		_ = rand.Int()
	}
	for _, v := range rand.Perm(%d) {
		fmt.Println(v)
	}
}
"""
_ALLOC = re.compile(r"\[Alloc\]; .*Used GPU Milli: (\d+); Total GPUs: (\d+); Arrived GPU Milli: (\d+)")


def fail(field: str, msg: str) -> None:
    print(f"error: {field}: {msg}", file=sys.stderr)
    raise SystemExit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--simulator", required=True, type=Path,
                    help="checkout of hkust-adsl/kubernetes-scheduler-simulator with bin/simon built")
    ap.add_argument("--traces", required=True, type=Path,
                    help="folder with openb_node_list_gpu_node.csv(.gz) and the pod lists")
    ap.add_argument("--trace", default="default", help="comma list of pod lists, e.g. default,gpushare40")
    ap.add_argument("--seeds", default="0", help="comma list of seeds of our arrival sequence")
    ap.add_argument("--policies", default="fgd", help=f"comma list of {', '.join(ARTIFACT_FLAGS)}")
    ap.add_argument("--out", type=Path, default=Path("fgd-fidelity"))
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter for the simulator's scripts (needs pandas and PyYAML)")
    ap.add_argument("--max-pods", type=int, default=None,
                    help="keep only the first N arrivals (a quick check; default: all)")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="seconds the simulator may run per replay (default 3600)")
    a = ap.parse_args(argv)
    if not (a.simulator / "bin" / "simon").is_file():
        fail("--simulator", f"'{a.simulator}' has no bin/simon (build it: go build -o bin/simon ./cmd)")
    for rel in ("scripts/generate_config_and_run.py", "data/pod_csv_to_yaml.py",
                f"data/node_yaml/{NODE_LIST}.yaml"):
        if not (a.simulator / rel).is_file():
            fail("--simulator", f"'{a.simulator}' has no {rel}")
    if a.timeout <= 0:
        fail("--timeout", f"{a.timeout}: must be positive")
    if a.max_pods is not None and a.max_pods < 1:
        fail("--max-pods", f"{a.max_pods}: must be at least 1")
    a.trace_list = [t.strip() for t in a.trace.split(",") if t.strip()]
    if not a.trace_list:
        fail("--trace", "names no pod list")
    try:
        a.seed_list = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        fail("--seeds", f"'{a.seeds}': must be a comma list of integers")
    if not a.seed_list:
        fail("--seeds", "names no seed")
    a.policy_list = [p.strip() for p in a.policies.split(",") if p.strip()]
    bad = [p for p in a.policy_list if p not in ARTIFACT_FLAGS]
    if bad or not a.policy_list:
        fail("--policies", f"'{a.policies}': must name some of {', '.join(ARTIFACT_FLAGS)}")
    return a


def _find(traces: Path, stem: str, field: str) -> Path:
    for name in (f"{stem}.csv.gz", f"{stem}.csv"):
        if (traces / name).is_file():
            return traces / name
    fail(field, f"no {stem}.csv(.gz) in '{traces}'")
    raise AssertionError  # unreachable: fail exits


def write_sequence(seq: Pods, path: Path) -> None:
    """Our arrival sequence as an openb pod list whose names sort in arrival order."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for i in range(len(seq)):
            w.writerow([f"a{i:05d}-{seq.names[i]}", int(seq.cpu_milli[i]), int(seq.memory_mib[i]),
                        int(seq.num_gpu[i]), int(seq.gpu_milli[i]), "|".join(sorted(seq.gpu_spec[i]))])


def read_artifact_log(path: Path) -> dict[str, Any]:
    """Per-pod node (by arrival index) and the last allocation line of a simon log."""
    nodes: dict[int, tuple[int, str]] = {}  # arrival index -> (tie rank, node name)
    last: tuple[int, int, int] | None = None
    with open(path, errors="replace") as fh:
        for line in fh:
            m = _SCHEDULED.search(line)
            if m:
                # the simulator prefixes node names with their tie-break rank ("0115-openb-node-0544")
                nodes[int(m.group(1)[1:])] = (int(m.group(2)), m.group(3))
                continue
            m = _ALLOC.search(line)
            if m:
                last = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if last is None:
        raise ValueError(f"{path}: no [Alloc] line (did the simulator finish?)")
    return {"nodes": nodes, "used_milli": last[0], "total_gpus": last[1], "arrived_milli": last[2]}


def tie_ranks(out: Path, n: int) -> list[int]:
    """The simulator's tie-break rank of the ``n`` nodes in name order (see ``PERM_GO``)."""
    src = out / "perm" / "main.go"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(PERM_GO % n)
    try:
        res = subprocess.run(["go", "run", str(src.resolve())], capture_output=True, text=True, check=True,
                             env={**os.environ, "GO111MODULE": "off"})
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"error: could not run go for the node permutation: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    ranks = [int(v) for v in res.stdout.split()]
    if sorted(ranks) != list(range(n)):
        print("error: the node permutation is not a permutation", file=sys.stderr)
        raise SystemExit(1)
    return ranks


def rank_by_name(nodes: Nodes, ranks: list[int]) -> dict[str, int]:
    """Each node's tie-break rank (``ranks`` are given for the nodes in name order)."""
    return dict(zip(sorted(nodes.names), ranks, strict=True))


def in_tie_order(nodes: Nodes, ranks: list[int]) -> Nodes:
    """``nodes`` reordered so that index order is the simulator's tie-break order."""
    rank = rank_by_name(nodes, ranks)
    return nodes.take(sorted(range(len(nodes)), key=lambda i: rank[nodes.names[i]]))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and every process it started (its process group), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_artifact(a: argparse.Namespace, inputs: Path, run_dir: Path, policy: str) -> float:
    sim = a.simulator.resolve()
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    cmd = [a.python, "scripts/generate_config_and_run.py", "-d", str(run_dir.resolve()), "-e", "-b",
           "-f", str(inputs.resolve()), *ARTIFACT_FLAGS[policy], "--shuffle-pod=false"]
    t0 = time.perf_counter()
    with open(run_dir / "terminal.out", "w") as fh:
        # its own process group: the run script starts ``bin/simon`` as a child of its own, and a
        # timeout (or Ctrl-C) must stop that one too, not leave it running without a parent
        proc = subprocess.Popen(cmd, cwd=sim, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            print(f"error: the simulator ran past --timeout {a.timeout} s; see {run_dir}", file=sys.stderr)
            raise SystemExit(1) from None
        except BaseException:
            _kill_group(proc)
            raise
    if rc != 0:
        print(f"error: the simulator failed (exit {rc}); see {run_dir / 'terminal.out'}", file=sys.stderr)
        raise SystemExit(1)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    try:
        nodes = read_nodes(_find(a.traces, NODE_LIST, "--traces"))
        pod_lists = {t: read_pods(_find(a.traces, f"openb_pod_list_{t}", "--trace")) for t in a.trace_list}
    except OpenbError as exc:
        fail("--traces", str(exc))
    ranks = tie_ranks(out, len(nodes))
    expected = rank_by_name(nodes, ranks)
    tied = in_tie_order(nodes, ranks)
    rows: list[dict[str, Any]] = []
    for trace, pods in pod_lists.items():
        for seed in a.seed_list:
            seq = arrivals(pods, nodes.gpu_capacity_milli, seed=seed)
            if a.max_pods is not None:
                seq = seq.take(list(range(min(a.max_pods, len(seq)))))
            stem = f"openb_pod_list_seq{trace}s{seed}"
            csv_dir, inputs = out / "csv", out / "inputs" / stem
            csv_dir.mkdir(parents=True, exist_ok=True)
            inputs.mkdir(parents=True, exist_ok=True)
            write_sequence(seq, csv_dir / f"{stem}.csv")
            subprocess.run([a.python, str((a.simulator / "data" / "pod_csv_to_yaml.py").resolve()),
                            str((csv_dir / f"{stem}.csv").resolve())], cwd=inputs.parent, check=True,
                           stdout=subprocess.DEVNULL)
            node_yaml = f"{NODE_LIST}.yaml"
            shutil.copyfile(a.simulator / "data" / "node_yaml" / node_yaml, inputs / node_yaml)
            for pol in a.policy_list:
                print(f"{trace} seed {seed} {pol}: FGD's simulator ...", file=sys.stderr)
                run_dir = out / "runs" / f"{trace}_s{seed}" / pol
                art_s = run_artifact(a, inputs, run_dir, pol)
                logs = sorted(run_dir.glob("log-*.log"))
                if not logs:
                    print(f"error: no log-*.log in {run_dir}", file=sys.stderr)
                    raise SystemExit(1)
                theirs = read_artifact_log(logs[-1])
                wrong = sorted({nm for r_, nm in theirs["nodes"].values() if expected.get(nm) != r_})
                if wrong:
                    print(f"error: the simulator's node ranks differ from the predicted permutation "
                          f"({len(wrong)} nodes, e.g. {wrong[0]}); see {logs[-1]}", file=sys.stderr)
                    raise SystemExit(1)
                print(f"{trace} seed {seed} {pol}: ours ...", file=sys.stderr)
                r = replay(tied, seq, make_policy(pol, batch=32, work_limit=2.0, seed=seed),
                           workload=seq, seed=seed)
                ours_nodes = {i: tied.names[c[0]] for i, c in enumerate(r.placements) if c is not None}
                their_nodes = {i: nm for i, (_, nm) in theirs["nodes"].items()}
                same = sum(1 for i, nm in their_nodes.items() if ours_nodes.get(i) == nm)
                first_diff = next(
                    (i for i in range(len(seq)) if ours_nodes.get(i) != their_nodes.get(i)), None
                )
                cap = nodes.gpu_capacity_milli
                rows.append({
                    "trace": trace, "seed": seed, "policy": pol, "pods": len(seq),
                    "arrived_pct": round(100.0 * theirs["arrived_milli"] / cap, 2),
                    "artifact_gpus": theirs["total_gpus"],
                    "artifact_unalloc_gpus": round((cap - theirs["used_milli"]) / 1000, 1),
                    "ours_unalloc_gpus": round(r.curve.unallocated_gpus[-1], 1),
                    "artifact_placed": len(theirs["nodes"]), "ours_placed": r.placed,
                    "same_node": same, "first_difference": first_diff,
                    "artifact_s": round(art_s, 1), "ours_s": round(r.wall_s, 1),
                })
                print(json.dumps(rows[-1]), file=sys.stderr)
    md = ["| trace | seed | policy | pods | FGD's simulator: unalloc GPUs | ours | placed (theirs / ours) "
          "| same node | first pod placed differently | their s | our s |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in rows:
        md.append(f"| {w['trace']} | {w['seed']} | {w['policy']} | {w['pods']:,} "
                  f"| {w['artifact_unalloc_gpus']} "
                  f"| {w['ours_unalloc_gpus']} | {w['artifact_placed']:,} / {w['ours_placed']:,} "
                  f"| {w['same_node']:,} | {w['first_difference']} | {w['artifact_s']} | {w['ours_s']} |")
    (out / "fidelity.md").write_text("\n".join(md) + "\n")
    (out / "fidelity.json").write_text(json.dumps({"rows": rows}, indent=1))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
