"""``optsched train``: fit, score and save the three shipped predictors in one go.

The fitting is :mod:`optsched.predict.train`, the held-out scores that go on each model card
are :mod:`optsched.predict.evaluate`; this module sits above both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from optsched.predict.datasets import (
    COLOCATE_INFO,
    SINGLE_DATA,
    load_colocate,
    load_runtime_trace,
    load_single,
    resolve,
)
from optsched.predict.evaluate import (
    data_info,
    evaluate_interference,
    evaluate_memory,
    evaluate_runtime,
)
from optsched.predict.train import SEED, save

ProgressFn = Callable[[str], None]


def train_models(
    traces: Path,
    out: Path,
    seed: int = SEED,
    runtime_trace: str = "venus_surrogate",
    step: ProgressFn | None = None,
) -> dict[str, Path]:
    """Train and save the three shipped predictors; return their folders.

    * runtime: trained on the first 80 % (by submission) of ``runtime_trace`` (default: the
      Venus surrogate, whose durations are SYNTHETIC), so its last 20 % stays unseen; the
      card holds the test metrics;
    * memory and interference: trained on all of Lucid's profiles and measured pairs; the
      cards hold the held-out (k-fold / group k-fold) metrics.
    """
    def say(msg: str) -> None:
        if step is not None:
            step(msg)

    folders: dict[str, Path] = {}
    say(f"runtime ({runtime_trace})")
    df, paths = load_runtime_trace(runtime_trace, traces)
    metrics, fit, _ = evaluate_runtime(df, seed)
    info = data_info(
        paths,
        traces,
        trace=runtime_trace,
        rows=metrics["n_train"],
        split="time: first 80% of submissions (test = the rest)",
        test_from_submit_s=metrics["test_from_submit_s"],
    )
    if runtime_trace == "venus_surrogate":
        info["note"] = "SYNTHETIC durations (Venus surrogate)"
    folders["runtime"] = save(fit, out, info, metrics)

    single_p, coloc_p = resolve(traces, SINGLE_DATA), resolve(traces, COLOCATE_INFO)
    single, coloc = load_single(single_p), load_colocate(coloc_p)
    say("memory")
    mmetrics, mfit, _ = evaluate_memory(single, coloc, seed)
    minfo = data_info([single_p, coloc_p], traces, rows=len(single))
    folders["memory"] = save(mfit, out, minfo, mmetrics)
    say("interference")
    imetrics, ifit, _ = evaluate_interference(single, coloc, seed)
    iinfo = data_info([single_p, coloc_p], traces, rows=len(coloc))
    folders["interference"] = save(ifit, out, iinfo, imetrics)
    return folders
