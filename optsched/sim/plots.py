"""PNG plots of a comparison: utilisation over time, CDFs of queueing delay and JCT, and
per-tenant assurance over time. Uses matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from optsched.sim.metrics import jcts, queue_delays, utilization_series

if TYPE_CHECKING:
    from optsched.sim.cluster import EventLog


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_utilization(logs: dict[str, EventLog], path: Path, bin_s: float = 3600.0) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, 4))
    for name, log in logs.items():
        t, u = utilization_series(log, bin_s)
        ax.plot(t / 86400.0, u, label=name, linewidth=1)
    ax.set_xlabel("day")
    ax.set_ylabel("allocated GPUs / capacity")
    ax.set_ylim(0, 1.05)
    ax.legend(ncol=4, fontsize=8)
    ax.set_title("GPU utilisation over time (hourly)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cdf(ax: object, values: np.ndarray, label: str) -> None:
    x = np.sort(np.maximum(values, 1.0))
    y = np.arange(1, len(x) + 1) / max(len(x), 1)
    ax.plot(x, y, label=label, linewidth=1)  # type: ignore[attr-defined]


def plot_cdfs(logs: dict[str, EventLog], path: Path) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, log in logs.items():
        _cdf(axes[0], queue_delays(log), name)
        _cdf(axes[1], jcts(log), name)
    for ax, what in zip(axes, ("queueing delay (s)", "JCT (s)"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel(what)
        ax.set_ylabel("CDF")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_assurance(logs: dict[str, EventLog], path: Path) -> Path:
    """Per-tenant assurance over time, for the policies that report one (optsched)."""
    plt = _plt()
    with_a = {n: lg for n, lg in logs.items() if lg.assurance["t"]}
    fig, axes = plt.subplots(max(1, len(with_a)), 1, figsize=(10, 3.5 * max(1, len(with_a))),
                             squeeze=False)
    if not with_a:
        axes[0][0].text(0.5, 0.5, "no policy reported an assurance signal",
                        ha="center", va="center")
        axes[0][0].set_axis_off()
    for ax, (name, log) in zip(axes[:, 0], with_a.items(), strict=False):
        a = log.assurance
        t = np.asarray(a["t"], float)
        v = np.asarray(a["value"], float)
        ten = np.asarray(a["tenant"], dtype=object)
        for tenant in sorted(set(ten.tolist())):
            sel = ten == tenant
            # hourly minimum, so a long run stays readable
            hours = np.floor(t[sel] / 3600.0)
            uh, idx = np.unique(hours, return_inverse=True)
            low = np.full(len(uh), np.inf)
            np.minimum.at(low, idx, v[sel])
            ax.step(uh / 24.0, low, where="post", label=str(tenant), linewidth=0.8)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("day")
        ax.set_ylabel("assurance")
        ax.set_title(f"{name}: per-tenant assurance (hourly minimum)")
        ax.legend(ncol=5, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(logs: dict[str, EventLog], out: Path) -> list[Path]:
    """All plots of one comparison (one seed's logs per policy) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    return [
        plot_utilization(logs, out / "utilization.png"),
        plot_cdfs(logs, out / "cdf_queue_delay_jct.png"),
        plot_assurance(logs, out / "assurance.png"),
    ]
