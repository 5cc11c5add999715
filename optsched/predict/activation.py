"""Per-GPU-type predictor of LLM activation latency, peak memory and model loading time.

Form (one GPU per device, batch of one request unless fused):

* ``prefill_s(P, n) = (pf_fixed_ms + pf_ms_per_gflop * 2 * P * n) / 1000`` for ``n`` input tokens
  of a ``P``-billion-parameter model (dense matmul FLOPs);
* ``decode_s_per_token(P, ctx) = (dec_fixed_ms + dec_ms_per_gb * W + 1000 * KV(ctx) / BW) / 1000``
  where ``W`` is the weight gigabytes read per step and ``KV(ctx)`` the KV-cache gigabytes read
  by attention (analytic, since the profiled tables exclude attention);
* both times are multiplied by ``e2e_prefill`` / ``e2e_decode``: the ratio of measured
  end-to-end times (Splitwise) to the per-operator sum (Vidur), which covers attention kernels,
  scheduling and sampling overheads;
* ``peak_memory_gib = weights + KV(in + out)``;
* ``load_s = load_fixed_s + weight_gb / load_gb_s[loader]`` (ServerlessLLM measurements).

The coefficients come from :func:`optsched.predict.activation_calibrate.calibrate` and ship as
``optsched/predict/data/predictor_coeffs.json``; types measured in the Vidur tables use their
fitted coefficients (``source="table"``), others a roofline from their specs scaled by the mean
measured efficiency (``source="roofline"``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

GIB_TO_GB = 1.073741824
KV_RESERVE = 0.15
"""Share of a model's ``memory_gib`` reserved for KV cache (the rest are weights)."""


@dataclass(frozen=True)
class TypeCoeffs:
    """Calibrated coefficients of one GPU type."""

    name: str
    memory_gib: float
    hbm_gb_s: float
    fp16_tflops: float
    dec_fixed_ms: float
    dec_ms_per_gb: float
    pf_fixed_ms: float
    pf_ms_per_gflop: float
    source: str


@dataclass(frozen=True)
class ModelSpec:
    """What the predictor needs to know about a served model."""

    params_b: float
    memory_gib: float

    @property
    def weight_gb(self) -> float:
        return self.memory_gib * (1.0 - KV_RESERVE) * GIB_TO_GB

    @property
    def kv_gb_per_token(self) -> float:
        """Approximate KV bytes per token (GQA-era models): 0.05 MB x sqrt(params_b)."""
        return 0.05e-3 * math.sqrt(self.params_b)


class ActivationPredictor:
    """Latency, memory and load time per (model, GPU type), from a coefficient table."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table
        self.types: dict[str, TypeCoeffs] = {
            name: TypeCoeffs(name=name, **row) for name, row in table["types"].items()
        }
        self.e2e_prefill = float(table["e2e_prefill"])
        self.e2e_decode = float(table["e2e_decode"])
        self.load_gb_s: dict[str, float] = dict(table["load_gb_s"])
        self.load_fixed_s: dict[str, float] = dict(table["load_fixed_s"])
        self.batch_decode_slowdown = float(table.get("batch_decode_slowdown", 0.06))

    # ---------------------------------------------------------------- construction
    @classmethod
    def default(cls) -> ActivationPredictor:
        """The shipped calibration."""
        return cls(_shipped_table())

    def coeffs(self, gpu_type: str) -> TypeCoeffs:
        """Coefficients of a type; unknown names map by alias (``H100`` -> ``h100``...)."""
        key = resolve_type(gpu_type, tuple(self.types))
        return self.types[key]

    # ---------------------------------------------------------------- predictions
    def prefill_s(self, spec: ModelSpec, tokens: float, gpu_type: str) -> float:
        c = self.coeffs(gpu_type)
        if tokens <= 0:
            return 0.0
        ms = c.pf_fixed_ms + c.pf_ms_per_gflop * 2.0 * spec.params_b * tokens
        return self.e2e_prefill * ms / 1000.0

    def decode_s(
        self, spec: ModelSpec, out_tokens: float, ctx: float, gpu_type: str, batch: int = 1
    ) -> float:
        """Time to generate ``out_tokens`` after a context of ``ctx`` tokens, ``batch`` at once."""
        if out_tokens <= 0:
            return 0.0
        c = self.coeffs(gpu_type)
        mean_ctx = ctx + out_tokens / 2.0
        kv_ms = 1000.0 * batch * spec.kv_gb_per_token * mean_ctx / c.hbm_gb_s
        step = c.dec_fixed_ms + c.dec_ms_per_gb * spec.weight_gb + kv_ms
        step *= 1.0 + self.batch_decode_slowdown * (batch - 1)
        return self.e2e_decode * step * out_tokens / 1000.0

    def latency_s(self, spec: ModelSpec, in_tokens: int, out_tokens: int, gpu_type: str) -> float:
        """One activation alone: prefill of its input plus decode of its output."""
        return self.prefill_s(spec, in_tokens, gpu_type) + self.decode_s(
            spec, out_tokens, in_tokens, gpu_type
        )

    def peak_memory_gib(self, spec: ModelSpec, in_tokens: int, out_tokens: int) -> float:
        return (spec.weight_gb + spec.kv_gb_per_token * (in_tokens + out_tokens)) / GIB_TO_GB

    def load_s(self, spec: ModelSpec, loader: str = "safetensors", speedup: float = 1.0) -> float:
        """Seconds to load the weights with ``loader`` (``sllm`` or ``safetensors``)."""
        rate = self.load_gb_s[loader] * speedup
        return self.load_fixed_s[loader] / speedup + spec.weight_gb / rate


def resolve_type(name: str, known: tuple[str, ...]) -> str:
    """Map a snapshot GPU type name to a calibrated one (case/prefix insensitive)."""
    low = name.lower().replace("_", "-")
    if low in known:
        return low
    for k in sorted(known, key=len, reverse=True):
        if low.startswith(k) or k.startswith(low):
            return k
    raise KeyError(f"GPU type '{name}' has no calibration; known: {sorted(known)}")


@lru_cache(maxsize=1)
def _shipped_table() -> dict[str, Any]:
    text = resources.files("optsched.predict").joinpath("data/predictor_coeffs.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data
