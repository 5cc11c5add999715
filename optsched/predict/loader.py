"""Choose the predictor the engine uses: the shipped boosters, else the fallback.

The models folder is, in order: the ``models_dir`` argument, ``$OPTSCHED_MODELS``, then the
repository's ``models/`` (next to the ``optsched`` package, as in a source checkout or an
editable install). An installed wheel has no ``models/``; point ``OPTSCHED_MODELS`` at a copy.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from optsched.errors import PredictionFallbackWarning
from optsched.predict.base import Predictor
from optsched.predict.fallback import EstimatePredictor

log = logging.getLogger(__name__)

MODELS_ENV = "OPTSCHED_MODELS"


def repo_models_dir() -> Path:
    """``models/`` at the root of the source tree that holds this package."""
    return Path(__file__).resolve().parents[2] / "models"


def default_models_dir() -> Path:
    """``$OPTSCHED_MODELS`` if set, else :func:`repo_models_dir`."""
    env = os.environ.get(MODELS_ENV)
    return Path(env) if env else repo_models_dir()


def default_predictor(models_dir: Path | str | None = None) -> Predictor:
    """The LightGBM predictor when lightgbm and at least one booster are available.

    Otherwise the :class:`~optsched.predict.fallback.EstimatePredictor`, with a
    :class:`~optsched.errors.PredictionFallbackWarning` saying why. A LightGBM predictor
    with some boosters missing also warns, naming them (they use the fallback rules).
    """
    folder = Path(models_dir) if models_dir is not None else default_models_dir()
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        warnings.warn(
            "lightgbm is not installed (pip install optsched[ml]); using fallback estimates",
            PredictionFallbackWarning,
            stacklevel=2,
        )
        return EstimatePredictor()
    from lightgbm.basic import LightGBMError

    from optsched.predict.lgbm import LightGBMPredictor, ModelCardError

    try:
        pred = LightGBMPredictor(folder)
    except (ModelCardError, LightGBMError, OSError, ValueError, KeyError) as exc:
        warnings.warn(
            f"could not load the models in '{folder}': {exc}; using fallback estimates",
            PredictionFallbackWarning,
            stacklevel=2,
        )
        return EstimatePredictor()
    if not pred.boosters:
        warnings.warn(
            f"no trained models in '{folder}'; using fallback estimates",
            PredictionFallbackWarning,
            stacklevel=2,
        )
        return EstimatePredictor()
    if pred.missing:
        warnings.warn(
            f"no trained model for {', '.join(pred.missing)} in '{folder}'; "
            "those use fallback estimates",
            PredictionFallbackWarning,
            stacklevel=2,
        )
    log.debug("loaded predictors %s from %s", sorted(pred.boosters), folder)
    return pred
