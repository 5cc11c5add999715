"""Exceptions and warnings raised by optsched.

Every error that comes from bad input names the offending field with a JSON-like path
(``jobs[3].tenant``) so that the CLI can print ``error: <path>: <message>`` and exit 2.
"""

from __future__ import annotations

from typing import Any


class OptschedError(Exception):
    """Root of every error optsched raises on purpose."""


class SnapshotError(OptschedError, ValueError):
    """A snapshot (or decision) is malformed or inconsistent.

    Parameters
    ----------
    path:
        Where the problem is, e.g. ``jobs[3].tenant``; ``""`` for the document itself.
    message:
        One line saying what is wrong.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class BackendUnavailableError(OptschedError):
    """A solver backend was asked for but its optional dependency is not installed."""


class DomainWarning(UserWarning):
    """Root of optsched's soft warnings (also collected into ``Decision.solver.notes``)."""


class PredictionFallbackWarning(DomainWarning):
    """A trained predictor was not available and the fallback estimates were used."""


class NumericScaleWarning(DomainWarning):
    """Objective coefficients span too many orders of magnitude for a robust solve."""


# ------------------------------------------------------------------ validation-error formatting


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """``tp`` without ``Annotated`` and ``| None``; and whether a plain validator stands in for
    its validation (then pydantic reports no member tags below it)."""
    import types
    import typing

    from pydantic.functional_validators import PlainValidator

    plain = False
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            args = typing.get_args(tp)
            plain = plain or any(isinstance(m, PlainValidator) for m in args[1:])
            tp = args[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
        return tp, plain


def _field_path(model: Any, loc: tuple[int | str, ...]) -> tuple[list[int | str], tuple[str, str] | None]:
    """The parts of a pydantic error location that name data, walking the model's types: the
    tags pydantic adds for the members of a union (``options.partitions.constrained-int``) and
    for dict keys (``[key]``) are dropped. Also (model name, field) of the last field named."""
    import typing

    from pydantic import BaseModel

    kept: list[int | str] = []
    owner: tuple[str, str] | None = None
    tp: Any = model
    plain = False
    for part in loc:
        if part == "[key]":
            continue
        tp, plain_here = _unwrap(tp)
        plain = plain or plain_here
        if plain or tp is None:
            kept.append(part)
            tp = None
            continue
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str):
            field = tp.model_fields.get(part)
            kept.append(part)
            if field is None:
                tp = None
                continue
            owner = (tp.__name__, part)
            from pydantic.functional_validators import PlainValidator

            plain = any(isinstance(m, PlainValidator) for m in field.metadata)
            tp = field.annotation
        elif origin in (list, tuple, set, frozenset) and isinstance(part, int):
            kept.append(part)
            args = typing.get_args(tp)
            tp = args[0] if args else None
        elif origin is dict:
            kept.append(part)
            args = typing.get_args(tp)
            tp = args[1] if len(args) == 2 else None
        elif origin in (typing.Union, __import__("types").UnionType) and isinstance(part, str):
            # a member tag of a union: not part of the data's path; below it the member is
            # unknown, so the rest of the location is kept as it is
            tp = None
        else:
            kept.append(part)
            tp = None
    return kept, owner


def error_path(loc: tuple[int | str, ...] | list[int | str], model: Any = None) -> str:
    """A pydantic error location as a field path: ``('jobs', 3, 'gpus')`` -> ``jobs[3].gpus``.

    With ``model`` (the pydantic class validated), union-member tags and dict-key markers that
    pydantic adds to the location are dropped (``options.partitions``, not
    ``options.partitions.constrained-int``)."""
    parts = list(loc) if model is None else _field_path(model, tuple(loc))[0]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _shown(value: Any) -> str:
    """A short JSON rendering of an offending scalar input (containers by kind only)."""
    import json

    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validation_error(exc: Any, model: Any) -> SnapshotError:
    """The first error of a pydantic ``ValidationError`` raised validating ``model``, as a
    :class:`SnapshotError` naming the field: ``nodes[0].gpus: at most 128 GPUs per node (got
    1000000000000)``, ``jobs[2].gpus: Input should be a valid integer (got "4")``."""
    from optsched.schema.limits import LIMIT_NOUNS

    err = exc.errors(include_url=False)[0]
    kind = err["type"]
    ctx = err.get("ctx") or {}
    raw = err.get("input")
    if kind == "json_invalid":
        return SnapshotError("", f"malformed JSON: {ctx.get('error', err['msg'])}")
    loc = tuple(err["loc"])
    extra = ctx.get("field")
    if isinstance(extra, str):  # a model-level check names the field it is about
        loc = loc + tuple(extra.split("."))
    parts, owner = _field_path(model, loc)
    path = error_path(parts)
    noun = LIMIT_NOUNS.get(owner, "") if owner is not None and owner[1] == parts[-1] else ""
    noun = f" {noun}" if noun else ""
    msg = str(err["msg"])
    if kind == "missing":
        msg = "required field is missing"
    elif kind == "extra_forbidden":
        msg = "unknown field"
    elif kind == "literal_error" and path == "format":
        msg = f"unsupported format {_shown(raw)}; this engine reads format 1"
    elif kind == "less_than_equal" and noun:
        msg = f"at most {ctx.get('le')}{noun} (got {_shown(raw)})"
    elif kind in ("less_than_equal", "less_than"):
        msg = f"{msg} (got {_shown(raw)})"
    elif kind in ("too_long", "string_too_long"):
        unit = "characters" if kind == "string_too_long" else (noun.strip() or "entries")
        got = ctx.get("actual_length")
        msg = f"at most {ctx.get('max_length')} {unit}" + (f" (got {got})" if got is not None else "")
    elif kind in ("int_type", "bool_type", "float_type", "string_type"):
        msg = f"{msg} (got {_shown(raw)})"
    return SnapshotError(path, msg)
