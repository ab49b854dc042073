"""Router state shared by every stream: the config snapshot and what was built from it.

Built once at start-up (and again on a reload); streams take the current one when they open
and keep it, so a reload never changes a request half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from extproc.config import RouterConfig
from extproc.decision import (
    CompiledDecision,
    Outcome,
    SignalResult,
    decide,
    holds_on_failures_only,
    matched_on_failure,
    signals_of,
)
from extproc.envoy_adapter import BodyTemplate
from extproc.errors import PayloadTooLarge, TooManyRequests
from extproc.metrics import RouterMetrics
from extproc.openai_request import ENDPOINTS, Endpoint, TextSource
from extproc.security import backend_auth
from extproc.signals.evaluator import LearnedEngine, SignalEvaluator


@dataclass(frozen=True, slots=True)
class RouterState:
    config: RouterConfig
    evaluator: SignalEvaluator
    metrics: RouterMetrics
    text_source: TextSource
    endpoints: Mapping[str, Endpoint]
    models_body: bytes
    model_bodies: Mapping[str, bytes]
    # ``Bearer <key>`` by model name, from backend_refs' api_key_env (never logged)
    backend_auth: Mapping[str, str] = field(default_factory=dict, repr=False)
    body_answers: dict[tuple[object, ...], BodyTemplate] = field(
        default_factory=dict, repr=False, compare=False)
    """Routed body answers but for their bodies, by route (filled by the processor; they
    hold this config's clusters, decisions and credentials, so they live and go with it)."""

    large_bodies: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(1), repr=False, compare=False)
    """One body over ``LARGE_BODY_BYTES`` is read and classified at a time (``large_body_slot``)."""

    guard: SignalEvaluator | None = None
    """The signals of the blocking decisions, for requests naming a model
    (``router.guard_explicit_models``); None when off or nothing blocks."""
    guard_decisions: tuple[CompiledDecision, ...] = ()

    def decide(self, results: Mapping[str, SignalResult]) -> Outcome:
        return decide(self.config.decisions, results, self.config.default_model.name)

    def guard_decide(self, results: Mapping[str, SignalResult]) -> Outcome:
        """The blocking decisions alone (a request naming a model is routed to it otherwise)."""
        return decide(self.guard_decisions, results, self.config.default_model.name)

    def refuse_unchecked(self, outcome: Outcome, results: Mapping[str, SignalResult]) -> None:
        """A block that holds only because guards could not read the text in time (their
        ``on_error: match``) is a 413 saying so, not an accusation: nothing was found."""
        if outcome.plugins.block is not None and holds_on_failures_only(
                self.config.decisions, outcome, results):
            failed = sorted(r.name for r in results.values() if matched_on_failure(r))
            raise PayloadTooLarge(
                "The prompt is too long for the router to check within its time budget "
                f"({', '.join(failed)}); send a shorter text.", param="messages",
                code="prompt_too_long_to_check")


def needed_signals(config: RouterConfig) -> frozenset[str]:
    """Only signals some decision references are computed (plus the pii signal when a
    model restricts the PII it may receive)."""
    needed = frozenset().union(*(signals_of(d.rule) for d in config.decisions))
    return needed | {config.pii_signal} if config.pii_signal else needed


def guard_decisions(config: RouterConfig) -> tuple[CompiledDecision, ...]:
    """The enforcing decisions that block, in priority order: what a request naming a model
    still faces with ``router.guard_explicit_models``."""
    return tuple(d for d in config.decisions if d.plugins.block is not None and not d.shadow)


def _guard(config: RouterConfig, metrics: RouterMetrics, engine: LearnedEngine | None,
           guards: tuple[CompiledDecision, ...]) -> SignalEvaluator | None:
    if not guards or not config.router.guard_explicit_models:
        return None
    needed = frozenset().union(*(signals_of(d.rule) for d in guards))
    return SignalEvaluator(config.signals, needed, engine, on_signal_error=metrics.signal_error,
                           on_windows=metrics.classifier_windows,
                           scan_timeout_s=scan_timeout_s(config),
                           scan_wait_s=scan_wait_s(config))


def _model_object(name: str, created: int) -> dict[str, object]:
    return {"id": name, "object": "model", "created": created, "owned_by": "semantic-router"}


def scan_timeout_s(config: RouterConfig) -> float:
    """The CPU time a PII, language or keyword scan of a long text may take: the classifier
    timeout, but at most a fifth of Envoy's message timeout (1 s with the defaults), so a huge
    text gets its signal's ``on_error`` answer well before Envoy's 504, and the rest of that
    window absorbs the queueing such texts cause for other requests."""
    return min(config.classifiers.batching.timeout_ms,
               config.router.message_timeout_ms / 5) / 1000


def scan_wait_s(config: RouterConfig) -> float:
    """How long a request waits for such a scan in wall time (the scan's own budget is CPU
    time): half of Envoy's message timeout (2.5 s with the defaults), then the host is too
    busy and ``router.on_overload`` answers, well before Envoy's 504."""
    return config.router.message_timeout_ms / 2000  # always above scan_timeout_s (a fifth)


def build_state(
    config: RouterConfig, metrics: RouterMetrics, engine: LearnedEngine | None
) -> RouterState:
    evaluator = SignalEvaluator(
        config.signals, needed_signals(config), engine, on_signal_error=metrics.signal_error,
        on_windows=metrics.classifier_windows, scan_timeout_s=scan_timeout_s(config),
        scan_wait_s=scan_wait_s(config),
    )
    created = int(time.time())
    guards = guard_decisions(config)
    objects = {name: _model_object(name, created) for name in config.public_model_names}
    models_body = json.dumps({"object": "list", "data": list(objects.values())}).encode()
    # Chat also accepts a model's (unambiguous) provider id, so retrieving it finds it too;
    # the list names each model once, by its public name.
    retrievable = {
        name: _model_object(name, created) for name in config.by_provider_id if name not in objects
    } | objects
    return RouterState(
        config=config,
        evaluator=evaluator,
        guard=_guard(config, metrics, engine, guards),
        guard_decisions=guards,
        metrics=metrics,
        text_source=TextSource(config.router.text_source),
        endpoints=ENDPOINTS,
        models_body=models_body,
        backend_auth=backend_auth(config),
        model_bodies=MappingProxyType(
            {name: json.dumps(obj).encode() for name, obj in retrievable.items()}
        ),
    )


# Reading a body of several MiB (JSON, the signals' scans on threads) holds the interpreter for
# up to a second or two; several at once starved every other request into Envoy's 504. One at
# a time, the next waits up to LARGE_BODY_WAIT_S, then gets 429 with retry-after.
LARGE_BODY_BYTES = 1024 * 1024
LARGE_BODY_WAIT_S = 2.0


@contextlib.asynccontextmanager
async def large_body_slot(state: RouterState, size: int) -> AsyncIterator[None]:
    """Hold the router's one slot for large bodies while a body of ``size`` bytes is routed."""
    if size <= LARGE_BODY_BYTES:
        yield
        return
    try:
        async with asyncio.timeout(LARGE_BODY_WAIT_S):
            await state.large_bodies.acquire()
    except TimeoutError:
        raise TooManyRequests(
            "another request of several megabytes is being read; retry shortly") from None
    try:
        yield
    finally:
        state.large_bodies.release()
