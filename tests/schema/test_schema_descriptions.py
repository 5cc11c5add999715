"""Every property of the published JSON Schemas (``optsched schema snapshot|decision``) is described."""

from __future__ import annotations

import json
from typing import Any

import pytest

from optsched.cli import main


def _schema(which: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["schema", which]) == 0
    out, _ = capsys.readouterr()
    schema: dict[str, Any] = json.loads(out)
    return schema


def undescribed(schema: dict[str, Any]) -> list[str]:
    """Paths of every property (top level and in ``$defs``) that has no non-empty description."""
    missing: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for name, sub in props.items():
                    desc = sub.get("description") if isinstance(sub, dict) else None
                    if not (isinstance(desc, str) and desc.strip()):
                        missing.append(f"{path}.{name}" if path else name)
            for key, sub in node.items():
                walk(sub, f"{path}.{key}" if path else key)
        elif isinstance(node, list):
            for k, sub in enumerate(node):
                walk(sub, f"{path}[{k}]")

    walk(schema, "")
    return missing


@pytest.mark.parametrize("which", ["snapshot", "decision"])
def test_every_property_has_a_description(which: str, capsys: pytest.CaptureFixture[str]) -> None:
    schema = _schema(which, capsys)
    assert schema.get("$defs"), "expected nested models under $defs"
    missing = undescribed(schema)
    assert not missing, f"{which} schema: properties without a description: {missing}"


def test_the_walk_finds_a_missing_description() -> None:
    schema = {
        "properties": {"a": {"type": "integer", "description": "ok"}},
        "$defs": {"Inner": {"properties": {"b": {"type": "string"}, "c": {"description": " "}}}},
    }
    assert undescribed(schema) == ["$defs.Inner.b", "$defs.Inner.c"]
