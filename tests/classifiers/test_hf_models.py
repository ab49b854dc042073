"""Sequence and token classifiers loaded from disk (tiny random BERTs) through the engine."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from classifiers import (
    BatchingSettings,
    ClassifierSettings,
    ClassifierTimeout,
    LearnedSignalSpec,
    SignalScore,
)
from classifiers.batching import StageReporter
from classifiers.engine import SignalEngine
from classifiers.hf_models import HFModelRunner, entity_type


def _load(kind: str, path: Path, threshold: float = 0.0, trace: bool = False) -> HFModelRunner:
    return HFModelRunner.load(
        "x", "sequence" if kind == "sequence" else "token", str(path),
        device=torch.device("cpu"), dtype=torch.float32, max_length=256, max_windows=4,
        threshold=threshold, chunk_size=8, trace=trace,
    )


@pytest.mark.parametrize("kind", ["sequence", "token"])
def test_traced_model_scores_equal_eager(
    kind: str, tiny_sequence_dir: Path, tiny_token_dir: Path
) -> None:
    path = tiny_sequence_dir if kind == "sequence" else tiny_token_dir
    traced, eager = _load(kind, path, trace=True), _load(kind, path)
    assert (traced.execution, traced.trace_skipped) == ("traced", "")
    assert eager.execution == "eager"
    texts = ["alice lives in london", "", "bob", " ".join(["weather", "paris"] * 150)]
    for batch in (texts, texts[:1], texts[2:]):
        got = traced(batch, lambda stage, s: None)
        want = eager(batch, lambda stage, s: None)
        for a, b in zip(got, want, strict=True):
            assert (a.label, a.entities, a.windows, a.truncated) == (
                b.label, b.entities, b.windows, b.truncated)
            assert a.score == pytest.approx(b.score, abs=1e-6)


def test_entity_type() -> None:
    assert entity_type("B-PER") == "PER"
    assert entity_type("I-LOC") == "LOC"
    assert entity_type("O") is None
    assert entity_type("MISC") == "MISC"


def test_sequence_classifier_labels_from_config(
    tiny_sequence_dir: Path, tiny_labels: dict[str, dict[int, str]]
) -> None:
    labels = tiny_labels["sequence"]
    runner = _load("sequence", tiny_sequence_dir)
    assert runner.labels == tuple(labels.values())
    assert runner.max_length == 64  # bounded by max_position_embeddings
    [score] = runner(["alice lives in paris"], lambda stage, s: None)
    assert score.label in labels.values()
    assert len(score.labels) == 3
    assert sum(p for _, p in score.labels) == pytest.approx(1.0, abs=1e-5)
    assert score.matched  # threshold 0


def test_sequence_classifier_windows_long_text(tiny_sequence_dir: Path) -> None:
    runner = _load("sequence", tiny_sequence_dir)
    stages: list[str] = []
    short, long = runner(
        ["bob", " ".join(["weather"] * 400)], lambda stage, s: stages.append(stage)
    )
    assert (short.windows, short.truncated) == (1, False)
    assert (long.windows, long.truncated) == (4, True)
    assert stages == ["tokenize", "inference"]


def test_token_classifier_entities(
    tiny_token_dir: Path, tiny_labels: dict[str, dict[int, str]]
) -> None:
    runner = _load("token", tiny_token_dir, threshold=0.0)
    [score] = runner(["alice lives in london"], lambda stage, s: None)
    entity_types = {entity_type(x) for x in tiny_labels["token"].values()} - {None}
    # random weights: whatever it finds must be stripped entity types, best first
    assert set(score.entities) <= entity_types
    assert score.matched == bool(score.entities)
    strict = _load("token", tiny_token_dir, threshold=1.01)
    [none] = strict(["alice lives in london"], lambda stage, s: None)
    assert none.entities == () and not none.matched and none.label is None


def test_token_classifier_ignores_padding_and_special_tokens(tiny_token_dir: Path) -> None:
    runner = _load("token", tiny_token_dir)
    # force every token to the entity label with certainty; [CLS]/[SEP]/[PAD] must not count
    with torch.no_grad():
        classifier = runner.model.classifier  # type: ignore[union-attr]
        classifier.weight.zero_()
        classifier.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 50.0, 0.0]))
    empty, text = runner(["", "paris"], lambda stage, s: None)
    assert empty.entities == ()
    assert text.entities == ("LOC",)


async def test_engine_with_model_signals(
    tiny_sequence_dir: Path, tiny_token_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    specs = [
        LearnedSignalSpec(name="intent", kind="sequence", model=str(tiny_sequence_dir)),
        LearnedSignalSpec(name="pii", kind="token", model=str(tiny_token_dir), threshold=0.0),
    ]
    truncated: list[str] = []
    with caplog.at_level(logging.INFO, logger="classifiers.engine"):
        engine = SignalEngine.build(
            ClassifierSettings(device="cpu", max_windows=2), specs, on_truncated=truncated.append
        )
    lines = [json.loads(r.getMessage()) for r in caplog.records if "model_binding_ready" in
             r.getMessage()]
    assert {line["classifier"] for line in lines} == {"intent", "pii"}
    for line in lines:
        assert line["device"] == "cpu" and line["dtype"] == "float32"
        assert line["execution"] == "traced"
        assert line["load_seconds"] >= 0 and line["model"] in {str(tiny_sequence_dir),
                                                                str(tiny_token_dir)}
    await engine.start()
    try:
        result = await engine.evaluate("alice lives in paris")
        assert set(result) == {"intent", "pii"}
        assert all(isinstance(s, SignalScore) for s in result.values())
        only = await engine.evaluate(" ".join(["nice"] * 300), frozenset({"intent"}))
        assert set(only) == {"intent"} and only["intent"].truncated
        assert truncated == ["intent"]
    finally:
        await engine.close()


async def test_engine_timeout_surfaces_as_classifier_timeout(tiny_sequence_dir: Path) -> None:
    specs = [LearnedSignalSpec(name="intent", kind="sequence", model=str(tiny_sequence_dir))]
    settings = ClassifierSettings(device="cpu", batching=BatchingSettings(timeout_ms=1.0))
    engine = SignalEngine.build(settings, specs)
    queue = engine._model_queues["intent"]
    process = queue._process

    def slow(items: list[Any], report: StageReporter) -> Sequence[Any]:
        time.sleep(0.05)  # well past the 1 ms limit, whatever the machine's speed
        return process(items, report)

    queue._process = slow
    await engine.start()
    try:
        with pytest.raises(ClassifierTimeout):
            await engine.evaluate("alice")
    finally:
        await engine.close()
