"""Workloads for the workflow simulator: models, pools, session scenarios and arrivals.

Scenarios (each activation picks one of :data:`MODELS`, 1–70B parameters, skewed popularity):

* ``react`` — a coding agent's ReAct loop: think (coder model) → observe (small summariser)
  → think ..., with an occasional self-critique on the coder model (a fusable chain);
* ``mapreduce`` — a research pipeline: plan → N parallel map calls on one model (fusable
  siblings) → reduce on a large model;
* ``debate`` — 2–3 agents argue for 2–3 rounds (each round waits for the previous one), then a
  judge decides;
* ``taskbench`` — DAGs sampled from the TaskBench Hugging Face tool graph (node = task type →
  model), as TaskBench samples node/chain/DAG subgraphs;
* ``mixed`` — each session draws one of the four.

Arrivals: ``azure-code`` replays the bursty Azure LLM 2023 code trace (read from a path; the
trace is never shipped), ``poisson`` is the control with the same mean rate, and ``bursty``
is a seeded on/off (Markov-modulated) Poisson generator that needs no data (tests, demos).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from optsched.sim.workflows.names import ARRIVALS, SCENARIOS


@dataclass(frozen=True)
class ModelDef:
    name: str
    params_b: float
    memory_gib: float
    """Weights (fp16, or the quantised size for the 32B/70B) plus KV reserve."""
    popularity: float


MODELS: tuple[ModelDef, ...] = (
    ModelDef("llama-3.2-1b", 1.2, 3.0, 0.10),
    ModelDef("phi-3-mini-3.8b", 3.8, 9.0, 0.12),
    ModelDef("llama-3.1-8b", 8.0, 18.5, 0.38),
    ModelDef("qwen2.5-14b", 14.8, 34.0, 0.18),
    ModelDef("qwen2.5-coder-32b-fp8", 32.8, 38.5, 0.14),
    ModelDef("llama-3.1-70b-awq", 70.6, 43.0, 0.08),
)
"""Popularity is Zipf-like (the 8B model dominates)."""

POOL: tuple[tuple[str, int], ...] = (("h100", 2), ("a100", 2), ("l40s", 2), ("a10g", 2))
"""Default heterogeneous serving pool: GPU type and count (4 types, 8 GPUs)."""


@dataclass
class SessionSpec:
    """A session to be simulated: its DAG of activations and its arrival."""

    id: str
    kind: str
    arrival_s: float
    activations: list[dict[str, Any]]


def _pick_model(rng: np.random.Generator, exclude_big: bool = False) -> str:
    ms = [m for m in MODELS if not (exclude_big and m.params_b > 20)]
    p = np.array([m.popularity for m in ms])
    return str(ms[int(rng.choice(len(ms), p=p / p.sum()))].name)


def _tokens(rng: np.random.Generator, med_in: float, med_out: float) -> tuple[int, int]:
    inp = int(np.clip(rng.lognormal(math.log(med_in), 0.6), 32, 12000))
    out = int(np.clip(rng.lognormal(math.log(med_out), 0.5), 8, 1500))
    return inp, out


def _act(aid: str, model: str, tok: tuple[int, int], after: list[str]) -> dict[str, Any]:
    return {"id": aid, "model": model, "input_tokens": tok[0], "output_tokens": tok[1], "after": after}


def react(rng: np.random.Generator) -> list[dict[str, Any]]:
    coder = "qwen2.5-coder-32b-fp8" if rng.random() < 0.6 else _pick_model(rng)
    small = _pick_model(rng, exclude_big=True)
    steps = int(rng.integers(3, 7))
    acts: list[dict[str, Any]] = []
    prev: list[str] = []
    ctx = int(rng.integers(800, 2500))
    for i in range(steps):
        acts.append(_act(f"think{i}", coder, (ctx, int(rng.integers(60, 300))), prev))
        prev = [f"think{i}"]
        if rng.random() < 0.3:
            acts.append(_act(f"critique{i}", coder, (ctx + 200, int(rng.integers(30, 120))), prev))
            prev = [f"critique{i}"]
        if i < steps - 1:
            acts.append(_act(f"observe{i}", small, _tokens(rng, 1500, 80), prev))
            prev = [f"observe{i}"]
        ctx += int(rng.integers(200, 600))
    return acts


def mapreduce(rng: np.random.Generator) -> list[dict[str, Any]]:
    mapper = _pick_model(rng, exclude_big=True)
    reducer = _pick_model(rng)
    n = int(rng.integers(3, 9))
    acts = [_act("plan", _pick_model(rng), _tokens(rng, 600, 150), [])]
    ctx = int(rng.integers(1000, 3000))
    for i in range(n):
        acts.append(
            _act(f"map{i}", mapper, (ctx + int(rng.integers(0, 400)), int(rng.integers(80, 250))), ["plan"])
        )
    acts.append(_act("reduce", reducer, _tokens(rng, 2500, 300), [f"map{i}" for i in range(n)]))
    return acts


def debate(rng: np.random.Generator) -> list[dict[str, Any]]:
    agents = int(rng.integers(2, 4))
    rounds = int(rng.integers(2, 4))
    shared = rng.random() < 0.5
    base = _pick_model(rng)
    models = [base if shared else _pick_model(rng) for _ in range(agents)]
    acts: list[dict[str, Any]] = []
    prev: list[str] = []
    ctx = int(rng.integers(500, 1500))
    for r in range(rounds):
        cur = []
        for a in range(agents):
            acts.append(_act(f"r{r}a{a}", models[a], (ctx, int(rng.integers(100, 350))), prev))
            cur.append(f"r{r}a{a}")
        prev = cur
        ctx += 300 * agents
    acts.append(_act("judge", _pick_model(rng), (ctx, int(rng.integers(50, 200))), prev))
    return acts


@lru_cache(maxsize=1)
def taskbench_graph() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    text = resources.files("optsched.sim.workflows").joinpath("data/taskbench_hf_graph.json")
    g = json.loads(text.read_text())
    return tuple(g["nodes"]), tuple((a, b) for a, b in g["links"])


def taskbench(rng: np.random.Generator) -> list[dict[str, Any]]:
    """A DAG sampled from the tool graph: a random walk grows a connected subgraph."""
    nodes, links = taskbench_graph()
    out_edges: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in links:
        if a != b:
            out_edges[a].append(b)
    size = int(rng.integers(3, 7))
    chosen = [str(nodes[int(rng.integers(len(nodes)))])]
    edges: list[tuple[str, str]] = []
    tries = 0
    while len(chosen) < size and tries < 50:
        tries += 1
        src = chosen[int(rng.integers(len(chosen)))]
        nxt = [t for t in out_edges[src] if t not in chosen]
        if not nxt:
            continue
        t = nxt[int(rng.integers(len(nxt)))]
        chosen.append(t)
        edges.append((src, t))
    # extra edges forward in the chosen order keep it a DAG (the TaskBench "dag" mode)
    for i, a in enumerate(chosen):
        for b in chosen[i + 1 :]:
            if b in out_edges[a] and (a, b) not in edges and rng.random() < 0.25:
                edges.append((a, b))
    names = {n: f"t{i}" for i, n in enumerate(chosen)}
    by_task = {n: MODELS[(sum(map(ord, n)) * 7) % len(MODELS)].name for n in nodes}
    acts = []
    for n in chosen:
        model = by_task[n] if rng.random() < 0.7 else _pick_model(rng)
        after = [names[a] for a, b in edges if b == n]
        acts.append(_act(names[n], model, _tokens(rng, 900, 150), after))
    return acts


GENERATORS = {"react": react, "mapreduce": mapreduce, "debate": debate, "taskbench": taskbench}


def make_sessions(scenario: str, arrivals: list[float], seed: int) -> list[SessionSpec]:
    """One session per arrival time, deterministic in ``seed``."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario '{scenario}', choose from {SCENARIOS}")
    rng = np.random.default_rng([seed, 17])
    out = []
    kinds = ("react", "mapreduce", "debate", "taskbench")
    for i, t in enumerate(arrivals):
        kind = scenario if scenario != "mixed" else kinds[int(rng.integers(len(kinds)))]
        out.append(
            SessionSpec(id=f"s{i:03d}", kind=kind, arrival_s=float(t), activations=GENERATORS[kind](rng))
        )
    return out


# ---------------------------------------------------------------------------- arrivals
def read_azure_code(traces: Path) -> np.ndarray:
    """Arrival times (s from the first request) of the Azure 2023 code trace."""
    path = traces / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
    if traces.is_file():
        path = traces
    times = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            ts = row["TIMESTAMP"]
            head, _, frac = ts.partition(".")
            dt = datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
            times.append(dt.timestamp() + float("0." + (frac or "0")))
    arr = np.sort(np.array(times))
    return arr - arr[0]


def burst_window(stamps: np.ndarray, n: int, seed: int, window_s: float) -> np.ndarray:
    """``n`` arrivals from a ``window_s`` slice of a trace that holds a burst, thinned evenly.

    The slice starts shortly before one of the trace's busiest seconds (``seed`` k picks
    the k-th busiest of ten busy seconds at least a window apart); the kept requests are every k-th
    one, so the burst shape survives.
    """
    secs = np.floor(stamps).astype(int)
    counts = np.bincount(secs)
    peaks: list[int] = []
    for sec in np.argsort(-counts, kind="stable"):
        if all(abs(int(sec) - p) >= window_s for p in peaks):
            peaks.append(int(sec))
        if len(peaks) == 10:
            break
    peak = peaks[seed % len(peaks)]
    start = max(0.0, peak - 0.25 * window_s)
    sel = stamps[(stamps >= start) & (stamps < start + window_s)] - start
    if len(sel) <= n:
        return np.asarray(sel, dtype=float)
    idx = np.linspace(0, len(sel) - 1, n).round().astype(int)
    return np.asarray(sel[idx], dtype=float)


def poisson_arrivals(n: int, window_s: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 23])
    gaps = rng.exponential(window_s / n, size=n)
    return np.asarray(np.cumsum(gaps) - gaps[0], dtype=float)


def bursty_arrivals(n: int, window_s: float, seed: int) -> np.ndarray:
    """Seeded on/off Poisson: 80% of the sessions arrive in short bursts (no data needed)."""
    rng = np.random.default_rng([seed, 29])
    n_burst = int(0.8 * n)
    bursts = max(1, n // 12)
    centers = np.sort(rng.uniform(0, 0.8 * window_s, size=bursts))
    which = rng.integers(bursts, size=n_burst)
    t_burst = centers[which] + rng.exponential(1.5, size=n_burst)
    t_bg = rng.uniform(0, window_s, size=n - n_burst)
    arr = np.sort(np.concatenate([t_burst, t_bg]))
    return np.asarray(arr - arr[0], dtype=float)


def arrivals(kind: str, n: int, window_s: float, seed: int, traces: Path | None = None) -> np.ndarray:
    """Arrival times for ``n`` sessions. ``azure-code`` needs ``traces`` (a folder or the CSV)."""
    if kind == "azure-code":
        if traces is None:
            from optsched.sim.paths import require_traces_dir

            traces = require_traces_dir()
        return burst_window(read_azure_code(traces), n, seed, window_s)
    if kind == "poisson":
        return poisson_arrivals(n, window_s, seed)
    if kind == "bursty":
        return bursty_arrivals(n, window_s, seed)
    raise ValueError(f"unknown arrivals '{kind}', choose from {ARRIVALS}")
