"""The long-prompt path: long texts on the bundled two-layer student, short ones on the full
encoder, and student-flagged jailbreaks confirmed by the full encoder (real encoders, tiny heads).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from classifiers import ClassifierError, ClassifierSettings, LearnedSignalSpec
from classifiers.api import LongPromptSettings, SignalScore
from classifiers.encoder import Encoder, bundled_encoder_dir, bundled_student_dir
from classifiers.engine import LONG_HEADS, SignalEngine
from classifiers.heads import load_head
from classifiers.runners import EncoderPath, EncoderRequest, LongPrompts, SharedEncoderRunner
from classifiers.signals import DomainSignal, JailbreakSignal

MakeHead = Callable[..., Path]
SHORT = "what is the derivative of x squared"
LONG = " ".join(["the court ruled on the contract dispute and the appeal"] * 8)  # ~90 tokens
MIN_TOKENS = 40


@pytest.fixture(scope="module")
def student() -> Encoder:
    return Encoder.load(adapter=str(bundled_student_dir()), quantize=True)


@pytest.fixture(scope="module")
def full() -> Encoder:
    return Encoder.load()


@pytest.fixture(scope="module")
def heads(tmp_path_factory: pytest.TempPathFactory, head_factory: MakeHead,
          student: Encoder) -> Path:
    """`<root>/domain` and `<root>/jailbreak`, each with a `long/` head for the student."""
    root = tmp_path_factory.mktemp("long-heads")
    kinds = (("domain", ("math", "law"), 1), ("jailbreak", ("benign", "attack"), 2))
    for kind, labels, seed in kinds:
        head_factory(root / kind, labels, seed=seed)
        head_factory(root / kind / LONG_HEADS, labels, seed=seed + 10)
        card = json.loads((root / kind / LONG_HEADS / "head.json").read_text())
        card["encoder"] = student.model_id
        (root / kind / LONG_HEADS / "head.json").write_text(json.dumps(card))
    return root


def _signals(root: Path, threshold: float) -> dict[str, DomainSignal | JailbreakSignal]:
    return {
        "domain": DomainSignal("domain", load_head(root / "domain").eval(), 0.0),
        "jailbreak": JailbreakSignal("jailbreak", load_head(root / "jailbreak").eval(), threshold),
    }


def _runner(full: Encoder, student: Encoder, heads: Path, escalate_at: float | None,
            outcomes: list[tuple[str, str]]) -> SharedEncoderRunner:
    long = None
    if escalate_at is not None:
        path = EncoderPath.of(student, {
            "domain": DomainSignal("domain", load_head(heads / "domain" / LONG_HEADS).eval(), 0.0),
            "jailbreak": JailbreakSignal(
                "jailbreak", load_head(heads / "jailbreak" / LONG_HEADS).eval(), 0.5),
        })
        long = LongPrompts(path, MIN_TOKENS, {"jailbreak": escalate_at})
    return SharedEncoderRunner(
        full, _signals(heads, 0.5), max_windows=4, chunk_size=8, long=long,
        on_long=lambda name, outcome: outcomes.append((name, outcome)),
    )


def _cascade_and_plain(
    full: Encoder, student: Encoder, heads: Path, escalate_at: float
) -> tuple[SharedEncoderRunner, SharedEncoderRunner, list[tuple[str, str]]]:
    """A runner with the long path, one without it, and the cascade's `on_long` record."""
    outcomes: list[tuple[str, str]] = []
    cascade = _runner(full, student, heads, escalate_at=escalate_at, outcomes=outcomes)
    return cascade, _runner(full, student, heads, escalate_at=None, outcomes=[]), outcomes


def _run(runner: SharedEncoderRunner, texts: list[str]) -> list[dict[str, SignalScore]]:
    wanted = frozenset({"domain", "jailbreak"})
    return runner([EncoderRequest(t, wanted) for t in texts], lambda stage, seconds: None)


def _same(a: SignalScore, b: SignalScore) -> bool:
    return a.label == b.label and abs(a.score - b.score) < 1e-5


def test_long_texts_go_to_the_student_and_short_ones_stay(
    full: Encoder, student: Encoder, heads: Path
) -> None:
    cascade, plain, outcomes = _cascade_and_plain(full, student, heads, escalate_at=1.01)
    mixed = _run(cascade, [LONG, SHORT, LONG + " again"])
    alone = _run(plain, [LONG, SHORT, LONG + " again"])
    # the short text is untouched by its long neighbours; the long ones are the student's
    assert all(_same(mixed[1][n], alone[1][n]) for n in ("domain", "jailbreak"))
    assert not _same(mixed[0]["jailbreak"], alone[0]["jailbreak"])
    assert sorted(outcomes) == sorted([("domain", "student"), ("jailbreak", "student")] * 2)
    outcomes.clear()
    # what the student path says is the long heads on the student's embedding (one text per
    # batch on both sides: dynamic int8 scales activations over the whole batch)
    alone_long = _run(cascade, [LONG])[0]
    emb = student.embed([LONG])
    head = load_head(heads / "jailbreak" / LONG_HEADS).eval()
    with torch.inference_mode():
        attack = 1.0 - float(torch.softmax(head(emb), dim=-1)[0, 0])
    assert alone_long["jailbreak"].score == pytest.approx(attack, abs=1e-5)


def test_a_student_flag_is_confirmed_by_the_full_encoder(
    full: Encoder, student: Encoder, heads: Path
) -> None:
    cascade, plain, outcomes = _cascade_and_plain(full, student, heads, escalate_at=0.0)
    got, want = _run(cascade, [SHORT, LONG]), _run(plain, [SHORT, LONG])
    # every long text crosses 0.0, so its scores are the full encoder's, for every signal
    assert all(_same(got[i][n], want[i][n]) for i in (0, 1) for n in ("domain", "jailbreak"))
    assert sorted(outcomes) == [("domain", "escalated"), ("jailbreak", "escalated")]


def _settings(**long: object) -> ClassifierSettings:
    return ClassifierSettings(device="cpu", long_prompts=LongPromptSettings(**long))  # type: ignore[arg-type]


def test_engine_binds_the_long_heads(heads: Path) -> None:
    records: list[str] = []
    log = logging.getLogger("test.long.bindings")
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    specs = [
        LearnedSignalSpec(name="topic", kind="domain", model=str(heads / "domain")),
        LearnedSignalSpec(name="attack", kind="jailbreak", model=str(heads / "jailbreak")),
        LearnedSignalSpec(name="routes", kind="embedding", threshold=0.0,
                          examples={"law": ("a court ruling on a contract",), "math": ("x + 1",)}),
    ]
    outcomes: list[tuple[str, str]] = []
    try:
        engine = SignalEngine.build(
            _settings(min_tokens=MIN_TOKENS), specs, logger=log,
            on_long=lambda name, path: outcomes.append((name, path)),
        )
    finally:
        log.removeHandler(handler)
    lines = [json.loads(m) for m in records if '"model_binding_ready"' in m]
    long_lines = {line["classifier"]: line for line in lines if "/" in line["classifier"]}
    assert set(long_lines) == {"topic/long", "attack/long", "routes/long"}
    assert long_lines["attack/long"]["model"] == str(heads / "jailbreak" / LONG_HEADS)
    assert long_lines["attack/long"]["dtype"] == "int8"
    assert long_lines["routes/long"]["model"].endswith("+sr-student-l2")
    assert engine.names == frozenset({"topic", "attack", "routes"})
    scores = asyncio.run(_evaluate(engine, LONG))
    assert scores["routes"].label == "law"  # the examples were embedded by the student too
    assert [name for name, _ in outcomes].count("routes") == 1


async def _evaluate(engine: SignalEngine, text: str) -> dict[str, SignalScore]:
    await engine.start()
    try:
        return await engine.evaluate(text)
    finally:
        await engine.close()


def test_a_head_without_a_long_head_fails_the_build(
    tmp_path: Path, head_factory: MakeHead
) -> None:
    head_factory(tmp_path / "domain", ("math", "law"))
    with pytest.raises(ClassifierError, match=r"long_prompts needs a head .*domain/long"):
        SignalEngine.build(
            _settings(),
            [LearnedSignalSpec(name="d", kind="domain", model=str(tmp_path / "domain"))],
        )


def test_bundled_student_needs_the_bundled_encoder() -> None:
    # the same MiniLM named by its directory is "another encoder": the student is refused
    with pytest.raises(ClassifierError, match="student of the bundled encoder"):
        SignalEngine.build(
            ClassifierSettings(device="cpu", encoder=str(bundled_encoder_dir()),
                               encoder_adapter=None, long_prompts=LongPromptSettings()),
            [LearnedSignalSpec(name="r", kind="embedding", examples={"a": ("x",)})],
        )
