"""Predictors of runtime, GPU memory and MPS colocation speed.

The engine asks a :class:`~optsched.predict.base.Predictor` for its coefficients. The default
(:func:`default_predictor`) uses the trained LightGBM models shipped in ``models/`` when they
and ``lightgbm`` are present, and otherwise the documented fallback
(:class:`~optsched.predict.fallback.EstimatePredictor`), saying so in every prediction's
``source``.

The workflow stage predicts LLM activations (latency, memory, model loading) with
:class:`~optsched.predict.activation.ActivationPredictor`, fitted by
:mod:`optsched.predict.activation_calibrate`.
"""

from optsched.predict.base import JobEstimate, PairEstimate, Predictions, Predictor
from optsched.predict.fallback import EstimatePredictor

__all__ = [
    "EstimatePredictor",
    "JobEstimate",
    "PairEstimate",
    "Predictions",
    "Predictor",
]
