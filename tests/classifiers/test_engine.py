"""SignalEngine end to end with the real bundled MiniLM encoder and tiny heads."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import torch

from classifiers import (
    BatchingSettings,
    ClassifierError,
    ClassifierSettings,
    ClassifierTimeout,
    LearnedSignalSpec,
    Overloaded,
)
from classifiers import engine as engine_module
from classifiers.adapter import default_encoder_id
from classifiers.engine import SignalEngine
from classifiers.heads import load_head
from classifiers.signals import DomainSignal, JailbreakSignal
from classifiers.threads import MAX_AUTO_WORKERS, cpu_thread_budget

ROUTES = {
    "weather": ("what is the weather today", "will it rain tomorrow", "forecast for the weekend"),
    "billing": ("my invoice is wrong", "refund my payment", "update my credit card"),
}
MakeHead = Callable[..., Path]
EVENTS: dict[str, list[object]] = {"timing": [], "batch": [], "truncated": []}


def _specs(head_dirs: dict[str, Path]) -> list[LearnedSignalSpec]:
    return [
        LearnedSignalSpec(name="domain", kind="domain", model=str(head_dirs["domain"]),
                          threshold=0.0),
        LearnedSignalSpec(name="jailbreak", kind="jailbreak", model=str(head_dirs["jailbreak"])),
        LearnedSignalSpec(name="routes", kind="embedding", examples=ROUTES, threshold=0.5),
    ]


@pytest.fixture(scope="module")
def built(head_dirs: dict[str, Path]) -> tuple[SignalEngine, list[str]]:
    handler = _Collect()
    log = logging.getLogger("test.engine.bindings")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    engine = SignalEngine.build(
        ClassifierSettings(device="cpu", max_windows=3, batching=BatchingSettings(max_wait_ms=5)),
        _specs(head_dirs),
        on_timing=lambda name, stage, s: EVENTS["timing"].append((name, stage)),
        on_batch=lambda name, size: EVENTS["batch"].append((name, size)),
        on_truncated=lambda name: EVENTS["truncated"].append(name),
        logger=log,
    )
    log.removeHandler(handler)
    return engine, handler.messages


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
async def engine(built: tuple[SignalEngine, list[str]]) -> AsyncIterator[SignalEngine]:
    for events in EVENTS.values():
        events.clear()
    await built[0].start()
    yield built[0]
    await built[0].close()


def test_binding_lines_are_json(built: tuple[SignalEngine, list[str]]) -> None:
    engine, messages = built
    lines = [json.loads(m) for m in messages if '"model_binding_ready"' in m]
    assert [line["classifier"] for line in lines] == ["domain", "jailbreak", "routes"]
    for line in lines:
        assert line["event"] == "model_binding_ready"
        assert line["device"] == "cpu" and line["dtype"] == "float32"
        assert line["load_seconds"] > 0
        assert line["execution"] == "traced"  # a shared encoder on CPU runs its checked trace
    assert lines[2]["model"] == default_encoder_id()  # the embedding signal names the encoder
    assert [b.classifier for b in engine.bindings] == ["domain", "jailbreak", "routes"]
    queues = [json.loads(m) for m in messages if '"classifier_queue_ready"' in m]
    budget = cpu_thread_budget()
    assert queues == [{"event": "classifier_queue_ready", "queue": "encoder", "device": "cpu",
                       "workers": min(budget, MAX_AUTO_WORKERS), "threads": budget,
                       "tokenizer_parallel": False}]  # CPU (and the tests' own setting)
    assert not [m for m in messages if "encoder_trace_skipped" in m]


def test_a_trace_that_fails_its_check_is_said_and_the_eager_encoder_runs(
    head_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("tracer refused\nsecond line")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    handler = _Collect()
    log = logging.getLogger("test.engine.trace_skipped")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        engine = SignalEngine.build(ClassifierSettings(device="cpu"), _specs(head_dirs)[:1],
                                    logger=log)
    finally:
        log.removeHandler(handler)
    skipped = [json.loads(m) for m in handler.messages if "encoder_trace_skipped" in m]
    assert len(skipped) == 1
    assert skipped[0]["encoder"] == "encoder" and skipped[0]["model"]
    assert skipped[0]["reason"] == "RuntimeError: tracer refused"  # first line only
    assert engine.bindings[0].execution == "eager"


def test_trace_never_keeps_the_eager_encoder(head_dirs: dict[str, Path]) -> None:
    engine = SignalEngine.build(ClassifierSettings(device="cpu", trace="never"),
                                _specs(head_dirs)[:1])
    assert engine.bindings[0].execution == "eager"


async def test_one_encoder_pass_feeds_every_head(engine: SignalEngine) -> None:
    result = await engine.evaluate("will it rain in Paris this weekend?")
    assert set(result) == {"domain", "jailbreak", "routes"}
    assert EVENTS["batch"] == [("encoder", 1)]
    stages = {stage for _, stage in EVENTS["timing"]}  # type: ignore[misc]
    assert stages == {"tokenize", "queue", "inference"}
    routes = result["routes"]
    assert routes.label == "weather" and routes.matched
    assert dict(routes.labels)["weather"] > dict(routes.labels)["billing"]
    domain = result["domain"]
    assert domain.label in {"math", "code", "chat", "law"} and len(domain.labels) == 3
    assert result["jailbreak"].label in {"benign", "jailbreak"}


async def test_subset_of_names(engine: SignalEngine) -> None:
    result = await engine.evaluate("refund my last payment please", frozenset({"routes"}))
    assert set(result) == {"routes"}
    assert result["routes"].label == "billing"
    with pytest.raises(ValueError, match="unknown learned signals"):
        await engine.evaluate("x", frozenset({"nope"}))


@pytest.mark.parametrize(("raised", "expected"), [
    (Overloaded("encoder: queue full"), "encoder: queue full"),
    (RuntimeError("boom"), "classifier failed: RuntimeError: boom"),
])
async def test_a_failed_encoder_call_reaches_the_caller_as_a_classifier_error(
    engine: SignalEngine, monkeypatch: pytest.MonkeyPatch, raised: Exception, expected: str
) -> None:
    async def fail(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(engine._encoder_queue, "submit", fail)
    with pytest.raises(ClassifierError) as caught:
        await engine.evaluate("anything")
    assert str(caught.value) == expected
    assert type(caught.value) is (Overloaded if isinstance(raised, Overloaded) else ClassifierError)


async def test_no_time_left_fails_at_once_without_a_queue_slot(
    engine: SignalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose time is already spent (the router's wait before Envoy's timeout) is a
    timeout at once; it never takes a slot an overloaded queue needs for live requests."""
    submitted: list[object] = []

    async def record(*args: object, **kwargs: object) -> None:
        submitted.append(args)

    monkeypatch.setattr(engine._encoder_queue, "submit", record)
    for spent in (0.0, -0.5):
        with pytest.raises(ClassifierTimeout):
            await engine.evaluate("anything", None, spent)
    assert submitted == []


async def test_concurrent_requests_match_single_requests(engine: SignalEngine) -> None:
    texts = [f"question number {i} about {'weather' if i % 2 else 'invoices'}" for i in range(24)]
    alone = [await engine.evaluate(t) for t in texts[:4]]
    EVENTS["batch"].clear()
    together = await asyncio.gather(*(engine.evaluate(t) for t in texts))
    for a, b in zip(alone, together[:4], strict=True):
        # Padding to a batch changes fp32 sums in the last bits; random heads sit near their
        # thresholds, so compare scores, and labels only where they are far from a tie.
        for name in a:
            assert a[name].score == pytest.approx(b[name].score, abs=1e-4)
        assert a["routes"].label == b["routes"].label
    assert max(size for _, size in EVENTS["batch"]) > 1  # type: ignore[misc]


async def test_long_text_is_windowed_and_truncated(engine: SignalEngine) -> None:
    long = "tell me about the weather. " * 200  # ~1200 tokens, > 3 windows of 256
    result = await engine.evaluate(long)
    for score in result.values():
        assert score.windows == 3 and score.truncated
    assert sorted(EVENTS["truncated"]) == ["domain", "jailbreak", "routes"]  # type: ignore[type-var]
    short = await engine.evaluate("hello")
    assert all(s.windows == 1 and not s.truncated for s in short.values())


def test_jailbreak_uses_attack_probability(head_dirs: dict[str, Path]) -> None:
    import torch

    head = load_head(head_dirs["jailbreak"])
    signal = JailbreakSignal("jb", head, threshold=0.5)
    rows = torch.tensor([[0.2, 0.8, 0.2], [0.9, 0.1, 0.9]])  # [attack, benign, jailbreak]
    score = signal.aggregate(rows, windows=2, truncated=False)
    assert score.score == pytest.approx(0.9) and score.matched and score.label == "jailbreak"


def test_domain_windows_vote_by_their_token_count(head_dirs: dict[str, Path]) -> None:
    """A long prompt's short tail window (20 tokens) must not outvote its 256-token body."""
    import torch

    head = load_head(head_dirs["domain"])
    signal = DomainSignal("domain", head, threshold=0.0)
    body, tail = [0.7, 0.2, 0.1], [0.0, 0.9, 0.1]
    rows = torch.tensor([body, tail])
    assert signal.aggregate(rows, 2, False).label == head.labels[1]  # equal votes: the tail wins
    weighted = signal.aggregate(rows, 2, False, torch.tensor([256.0, 20.0]))
    assert weighted.label == head.labels[0]
    assert weighted.score == pytest.approx((0.7 * 256) / 276)


def test_jailbreak_head_needs_a_benign_label(tmp_path: Path, head_factory: MakeHead) -> None:
    head = load_head(head_factory(tmp_path / "h", ("a", "b")))
    with pytest.raises(ClassifierError, match="benign label"):
        JailbreakSignal("jb", head, threshold=0.5)


def test_missing_default_head_fails_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "MODELS_DIR", tmp_path / "models")
    with pytest.raises(ClassifierError, match="bundled default head is missing"):
        SignalEngine.build(
            ClassifierSettings(device="cpu"), [LearnedSignalSpec(name="jb", kind="jailbreak")]
        )


def test_bundled_names_a_head_shipped_in_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "MODELS_DIR", tmp_path / "models")
    assert engine_module.head_dir_of("bundled:harm", "jailbreak") == tmp_path / "models/harm"
    assert engine_module.head_dir_of(None, "jailbreak") == tmp_path / "models/jailbreak"
    assert engine_module.head_dir_of("heads/harm", "jailbreak") == Path("heads/harm")
    for bad in ("bundled:../secrets", "bundled:", "bundled:a/b"):
        with pytest.raises(ClassifierError, match="bundled head"):
            engine_module.head_dir_of(bad, "jailbreak")
    spec = LearnedSignalSpec(name="harm", kind="jailbreak", model="bundled:harm")
    with pytest.raises(ClassifierError, match=r"no head at .*models/harm"):
        SignalEngine.build(ClassifierSettings(device="cpu"), [spec])


def test_head_of_other_width_fails_build(tmp_path: Path, head_factory: MakeHead) -> None:
    head_dir = head_factory(tmp_path / "h", ("x", "y"), dim=128)
    spec = LearnedSignalSpec(name="d", kind="domain", model=str(head_dir))
    with pytest.raises(ClassifierError, match="128-d"):
        SignalEngine.build(ClassifierSettings(device="cpu"), [spec])


def test_bundled_heads_need_the_bundled_adapter() -> None:
    # the shipped heads were trained on the adapted encoder; without the adapter every
    # embedding moves, so loading them must fail loudly rather than answer wrongly
    with pytest.raises(ClassifierError, match="encoder_adapter"):
        SignalEngine.build(
            ClassifierSettings(device="cpu", encoder_adapter=None),
            [LearnedSignalSpec(name="d", kind="domain")],
        )
