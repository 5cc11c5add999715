"""The simulator's policy names, importable without the simulator (for the command line)."""

from __future__ import annotations

POLICIES: dict[str, str] = {
    "fifo": "strict FIFO, pooled",
    "sjf": "shortest estimated job first, backfill, pooled",
    "qssf": "Helios QSSF: smallest estimated GPU-time first, pooled",
    "tiresias": "Tiresias discretised 2D-LAS with preemption, pooled",
    "kueue": "Kueue-like quota + borrowing + reclaim, no sharing",
    "gandiva": "Gandiva-like greedy packer (sharing, no interference model)",
    "lucid": "Lucid-like: estimate priority, share-score packing, adaptive switch-off",
    "antman": "AntMan-like guaranteed (quota, preempts) / opportunistic (idle GPUs, squeezed)",
    "optsched": "the optsched engine (solve_epoch)",
}
"""Every policy name, with a one-line description."""
