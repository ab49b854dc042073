"""The README's configuration reference is the schema's: generated, complete, and current."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel

from extproc.cli import main
from extproc.config import schema
from extproc.config.descriptions import DESCRIPTIONS
from extproc.config.reference import (
    END_MARKER,
    START_MARKER,
    MissingDescription,
    readme_block,
    render_markdown,
    rows,
    type_text,
)

README = Path(__file__).resolve().parent.parent / "README.md"
REGENERATE = (
    "the README's configuration reference differs from the schema: regenerate it with "
    "`semantic-router config reference` and paste the output between "
    f"{START_MARKER} and {END_MARKER} in README.md"
)


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """Every model an annotation mentions (inside lists, unions, Annotated, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models_in(arg)


def _reachable() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [schema.RouterFile]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            todo.extend(_models_in(field.annotation))
    return seen


def _leaf_fields() -> list[tuple[type[BaseModel], str]]:
    """Every field of every model under RouterFile whose value is not itself a model."""
    return [
        (model, name)
        for model in _reachable()
        for name, field in model.model_fields.items()
        if not any(_models_in(field.annotation))
    ]


def _readme_block() -> str:
    block = readme_block(README.read_text(encoding="utf-8"))
    assert block is not None, f"README.md lacks the markers {START_MARKER} / {END_MARKER}"
    return block


def test_readme_block_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "reference"]) == 0
    printed = capsys.readouterr().out
    assert printed == render_markdown()
    assert _readme_block() == printed, REGENERATE


def test_every_leaf_field_of_the_schema_is_in_the_readme() -> None:
    block = _readme_block()
    table = rows()
    leaves = _leaf_fields()
    assert len(leaves) > 60  # the walk above really reached the nested models
    for model, name in leaves:
        found = [r for r in table if model in r.owners and r.field == name]
        assert found, f"{model.__name__}.{name} is missing from the reference"
        for row in found:
            key = model.model_fields[name].alias or name
            assert row.path.endswith(f".{key}") or row.path == key
            assert f"| `{row.path}` |" in block, f"{row.path}: {REGENERATE}"


def test_nested_and_per_type_keys_are_listed() -> None:
    paths = {row.path for row in rows()}
    for path in (
        "router.probe.startup_timeout_s",
        "router.tls.server_name",
        "listener.auth.api_keys_env",
        "classifiers.batching.max_queue",
        "providers.defaults.model",
        "providers.models[].backend_refs[].api_key_env",
        "signals[].on_error",
        "signals[type=keyword].word_boundary",
        "signals[type=context_length].max_tokens",
        "signals[type=pii].entity_types",
        "decisions[].rules.not",
        "decisions[].plugins.block.respond",
        "decisions[].plugins.system_prompt.mode",
        "decisions[].plugins.set_headers",
        "workers",
    ):
        assert path in paths, path
    assert len(paths) == len(rows()), "a key is listed twice"


def test_defaults_and_types_come_from_the_schema() -> None:
    by_path = {row.path: row for row in rows()}
    assert by_path["router.grpc"].default == "`127.0.0.1:50051`"
    assert by_path["router.auto_model_names"].default == "`[auto]`"
    assert by_path["router.health_check_path"].value_type == "path or null"
    assert by_path["router.tls.cert_file"].default == "required"
    assert by_path["router.failure_mode"].value_type == "`closed` \\| `open`"
    assert by_path["router.probe.interval_s"].value_type == "float in (0, 3600]"
    assert by_path["providers.models"].value_type == "list of model, non-empty"
    assert "`keyword`" in by_path["signals[].type"].value_type
    assert "`pii`" in by_path["signals[].type"].value_type
    assert type_text(list[int]) == "list of int"


def test_no_stale_descriptions() -> None:
    paths = {row.path for row in rows()}
    assert set(DESCRIPTIONS) <= paths, sorted(set(DESCRIPTIONS) - paths)


def test_an_undescribed_field_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(DESCRIPTIONS, "router.probe.timeout_s")
    with pytest.raises(MissingDescription, match=r"router\.probe\.timeout_s"):
        render_markdown()
