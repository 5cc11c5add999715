"""Per-VC fidelity of our partitioned replay against Lucid's own simulator (issue 21, item 3).

Optional and manual: it needs a checkout of Lucid's ``simulation/`` folder
(github S-Lab-System-Group/Lucid; pandas and numpy), which CI cannot fetch. No test depends
on it. See docs/fidelity.md.

    python scripts/lucid_fidelity.py --lucid-dir LUCID/simulation \\
        --trace TRACES/venus_surrogate_SYNTHETIC/cluster_full_log_SYNTHETIC_seed0.csv.gz \\
        --jobs 3000 --policies fifo --out fidelity-out

Steps: the first ``--jobs`` jobs of ``--trace`` (plus Lucid's anchor row) are written to
``OUT/trace/cluster_full_log.csv`` next to a copy of ``vc_config.csv``; Lucid's
``simulator.py`` replays that folder (in a copy of ``--lucid-dir`` at ``OUT/lucid-sim``, logs in
``OUT/lucid``), and
our simulator replays the same file in ``partitioned`` mode with exact runtimes
(``runtime_jitter`` 0, as Lucid's) and the node choice ``--placement`` (``best_fit`` is
Lucid's rule). The per-VC table goes to ``OUT/fidelity.md`` and
``OUT/fidelity.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from optsched.sim.cluster import SimConfig
from optsched.sim.fidelity import (
    clock_offset,
    compare,
    cut_venus_log,
    markdown_table,
    read_lucid_logs,
    records_from_log,
    same_starts,
    split_by_vc,
    vc_metrics,
)
from optsched.sim.paths import default_traces_dir
from optsched.sim.policies import PLACEMENTS
from optsched.sim.runner import RunSpec, run_one
from optsched.sim.trace import load_trace, read_vc_config

POLICIES = ("fifo", "lucid")


def fail(field: str, msg: str) -> None:
    print(f"error: {field}: {msg}", file=sys.stderr)
    raise SystemExit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lucid-dir", required=True, type=Path,
                    help="Lucid's simulation/ folder (simulator.py, policy/, data/...)")
    ap.add_argument("--trace", required=True, type=Path, help="a Venus log in Lucid's schema")
    ap.add_argument("--vc-config", type=Path, default=None,
                    help="default: lucid_venus/vc_config.csv on the traces path")
    ap.add_argument("--jobs", type=int, default=None,
                    help="keep the first N jobs by submission (default: all)")
    ap.add_argument("--policies", default="fifo", help="comma list of fifo, lucid")
    ap.add_argument("--out", type=Path, default=Path("fidelity-out"))
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs Lucid (needs pandas and numpy)")
    ap.add_argument("--lucid-timeout", type=float, default=3600.0,
                    help="seconds Lucid's simulator may run per policy (default 3600)")
    ap.add_argument("--skip-lucid", action="store_true",
                    help="reuse Lucid's logs already in OUT/lucid")
    ap.add_argument("--placement", default="buddy", choices=PLACEMENTS,
                    help="our baselines' node choice: buddy (the default, the engine's rule) "
                    "or best_fit (Lucid's ConsolidatePlacement)")
    a = ap.parse_args(argv)
    if not (a.lucid_dir / "simulator.py").is_file():
        fail("--lucid-dir", f"'{a.lucid_dir}' has no simulator.py")
    if not a.trace.is_file():
        fail("--trace", f"'{a.trace}' is not a file")
    if a.lucid_timeout <= 0:
        fail("--lucid-timeout", f"{a.lucid_timeout}: must be positive")
    if a.jobs is not None and a.jobs < 1:
        fail("--jobs", f"{a.jobs}: must be at least 1")
    pols = [p.strip() for p in a.policies.split(",") if p.strip()]
    bad = [p for p in pols if p not in POLICIES]
    if bad or not pols:
        fail("--policies", f"'{a.policies}': must name some of {', '.join(POLICIES)}")
    a.policy_list = pols
    if a.vc_config is None:
        base = default_traces_dir()
        if base is None:
            fail("--vc-config", "not given, and no traces path ($OPTSCHED_TRACES) to find it on")
            raise AssertionError  # unreachable: fail exits
        a.vc_config = base / "lucid_venus" / "vc_config.csv"
    if not a.vc_config.is_file():
        fail("--vc-config", f"'{a.vc_config}' is not a file")
    return a


def lucid_workdir(a: argparse.Namespace, out: Path) -> Path:
    """A fresh copy of ``--lucid-dir`` to run in (Lucid reads paths relative to its working
    folder; the user's checkout is left untouched). Lucid's ``lucid`` policy reads vcYVn's
    elastic-scaling log at ``log/Venus_Sept/profvc/profvc_scaling.csv`` (relative) and asserts
    that its steps sum to 0. On a cut the profiler's own log can end scaled up (the first 3,000
    jobs: +1) and that assert kills Lucid's pool worker, which hangs the run; so the copy gets a
    header-only file there (no vcYVn scaling) and Lucid writes its logs to ``OUT/lucid``
    instead. docs/fidelity.md, rule 6."""
    work = out / "lucid-sim"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(a.lucid_dir, work, ignore=shutil.ignore_patterns("log", "__pycache__"))
    dst = work / "log" / "Venus_Sept" / "profvc" / "profvc_scaling.csv"
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("time,scaling_num\n")
    return work


def run_lucid(a: argparse.Namespace, work: Path, trace_dir: Path, log_dir: Path,
              policy: str) -> float:
    cmd = [a.python, "simulator.py", "-e", "Venus_Sept", "-t", str(trace_dir.resolve()),
           "-l", str(log_dir.resolve()), "-s", policy, "-j", "1"]
    t0 = time.perf_counter()
    with open(work / f"{policy}_stdout.txt", "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=work, stdout=fh, stderr=subprocess.STDOUT,
                                timeout=a.lucid_timeout).returncode
        except subprocess.TimeoutExpired:
            print(f"error: Lucid's simulator ran past --lucid-timeout {a.lucid_timeout} s "
                  f"(a dead pool worker hangs it); see {work / f'{policy}_stdout.txt'}",
                  file=sys.stderr)
            raise SystemExit(1) from None
    if rc != 0:
        print(f"error: Lucid's simulator failed (exit {rc}); see "
              f"{work / f'{policy}_stdout.txt'}", file=sys.stderr)
        raise SystemExit(1)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    out: Path = a.out
    trace_dir, lucid_log = out / "trace", out / "lucid"
    trace_dir.mkdir(parents=True, exist_ok=True)
    lucid_log.mkdir(parents=True, exist_ok=True)
    try:
        n = cut_venus_log(a.trace, trace_dir / "cluster_full_log.csv", a.jobs)
    except (ValueError, KeyError, UnicodeDecodeError, OSError) as exc:
        fail("--trace", f"'{a.trace}': {exc}")
    shutil.copyfile(a.vc_config, trace_dir / "vc_config.csv")
    vc_gpus = read_vc_config(trace_dir / "vc_config.csv")
    print(f"{n} jobs -> {trace_dir}", file=sys.stderr)
    tr = load_trace(trace_dir / "cluster_full_log.csv", vc_config=trace_dir / "vc_config.csv",
                    estimates=_estimates(a))
    work = out / "lucid-sim" if a.skip_lucid else lucid_workdir(a, out)
    result: dict[str, Any] = {"trace": a.trace.name, "jobs": n, "placement": a.placement,
                              "policies": {}}
    md = [f"Input: the first {n:,} jobs of `{a.trace.name}`; window = first to last "
          f"submission; our placement: {a.placement}.", ""]
    for pol in a.policy_list:
        lucid_s = math.nan
        if not a.skip_lucid:
            lucid_s = run_lucid(a, work, trace_dir, lucid_log, pol)
        theirs = read_lucid_logs(lucid_log / "Venus_Sept", vc_gpus, pol)
        spec = RunSpec(trace=str(trace_dir / "cluster_full_log.csv"), policy=pol, seed=0,
                       config=SimConfig(mode="partitioned", runtime_jitter=0.0),
                       policy_options={"placement": a.placement})
        res: dict[str, Any] = {"lucid_seconds": lucid_s}
        m_t = vc_metrics(theirs, vc_gpus)
        for variant in ("cluster", "per_vc"):
            t0 = time.perf_counter()
            if variant == "cluster":
                ours = records_from_log(run_one(spec, trace=tr))
            else:
                ours = [r for part in split_by_vc(tr).values()
                        for r in records_from_log(run_one(spec, trace=part))]
            ours_s = time.perf_counter() - t0
            off = clock_offset(ours, theirs)
            rows = compare(vc_metrics(ours, vc_gpus), m_t)
            same, both = same_starts(ours, theirs, off)
            res[variant] = {"rows": rows, "same_start_jobs": same, "jobs_compared": both,
                            "clock_offset_s": off, "ours_seconds": ours_s}
            title = (f"{pol}, one partitioned replay of the whole cluster" if variant == "cluster"
                     else f"{pol}, one replay per VC (Lucid's structure)")
            md.append(markdown_table(rows, title))
            md.append(f"Jobs starting within 1 s of each other in both: {same:,} of {both:,}. "
                      f"Within 10%: {sum(r['ok'] for r in rows)} of {len(rows)} VCs. "
                      f"Our replay: {ours_s:.0f} s; Lucid's: {lucid_s:.0f} s.\n")
        result["policies"][pol] = res
        print(f"{pol}: done", file=sys.stderr)
    (out / "fidelity.md").write_text("\n".join(md))
    (out / "fidelity.json").write_text(json.dumps(_clean(result), indent=1))
    print("\n".join(md))
    return 0


def _estimates(a: argparse.Namespace) -> Path | None:
    cand = Path(a.vc_config).parent / "Venus_Sept_lgb.csv"
    return cand if cand.is_file() else None


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
