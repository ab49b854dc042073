"""Run requests through the router's own signal and decision code, without Envoy: what
``semantic-router classify``, ``eval`` and ``calibrate`` use, so what they report is what
the router does."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extproc.classifier_binding import build_engine
from extproc.config import RouterConfig
from extproc.context import RouterState, build_state
from extproc.decision import Outcome, SignalResult, rule_matches
from extproc.metrics import RouterMetrics
from extproc.openai_request import Endpoint, parse_request
from extproc.signals.evaluator import TextFor
from extproc.signals.specs import estimate_tokens


@dataclass(frozen=True)
class Explanation:
    signals: Mapping[str, SignalResult]
    outcome: Outcome
    matched: tuple[str, ...]
    """Every decision whose rule holds, in priority order (the first enforcing one wins)."""
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "decision": self.outcome.decision,
            "model": self.outcome.model,
            "blocked": self.outcome.plugins.block is not None,
            "matched_decisions": list(self.matched),
            "shadowed": list(self.outcome.shadowed),
            "signals": {
                name: {"matched": r.matched, "score": round(r.score, 4), "label": r.label,
                       "labels": sorted(r.labels), "error": r.error}
                for name, r in sorted(self.signals.items())
            },
            "latency_ms": round(self.seconds * 1000, 3),
        }


OFFLINE_TIMEOUT_MS = 600_000.0


class Explainer:
    """Builds the router state once (classifiers load here), then explains many requests."""

    def __init__(self, state: RouterState, engine: Any) -> None:
        self._state = state
        self._engine = engine

    @classmethod
    async def start(cls, config: RouterConfig, logger: logging.Logger | None = None,
                    *, classifier_timeout_ms: float | None = OFFLINE_TIMEOUT_MS) -> Explainer:
        """``classifier_timeout_ms`` replaces the serving timeout: offline tools wait for
        every answer (a timeout there would be scored as a wrong label); None keeps it."""
        if classifier_timeout_ms is not None:
            batching = config.classifiers.batching.model_copy(
                update={"timeout_ms": classifier_timeout_ms})
            config = replace(config, classifiers=config.classifiers.model_copy(
                update={"batching": batching}))
        metrics = RouterMetrics()
        engine = await build_engine(config, logger or logging.getLogger("semantic_router"),
                                    metrics)
        return cls(build_state(config, metrics, engine), engine)

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.close()

    async def explain_messages(self, messages: Sequence[Mapping[str, Any]]) -> Explanation:
        body = json.dumps({"model": "auto", "messages": list(messages)}).encode()
        request = parse_request(body, Endpoint.CHAT)
        text = request.classifier_text(self._state.text_source)
        return await self._explain(text, estimate_tokens(request.total_text_length()),
                                   request.classifier_text_for)

    async def explain_text(self, text: str) -> Explanation:
        return await self.explain_messages([{"role": "user", "content": text}])

    async def _explain(self, text: str, tokens: int, text_for: TextFor) -> Explanation:
        started = time.perf_counter()
        results = await self._state.evaluator.evaluate(text, tokens, text_for)
        outcome = self._state.decide(results)
        seconds = time.perf_counter() - started
        matched = tuple(d.name for d in self._state.config.decisions
                        if rule_matches(d.rule, results))
        return Explanation(results, outcome, matched, seconds)


def format_explanation(explanation: Explanation) -> str:
    rows = [("signal", "matched", "score", "label")]
    for name, result in sorted(explanation.signals.items()):
        label = result.label or ""
        if len(result.labels) > 1:
            label = ",".join(sorted(result.labels))
        if result.error:
            label = f"{label} (error: {result.error})".strip()
        rows.append((name, "yes" if result.matched else "no", f"{result.score:.4f}", label))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    outcome = explanation.outcome
    target = "blocked" if outcome.plugins.block is not None else outcome.model
    lines += [
        "",
        f"matched decisions: {', '.join(explanation.matched) or '(none)'}",
        f"decision: {outcome.decision}  ->  model: {target}"
        + (f"  (shadow: {', '.join(outcome.shadowed)})" if outcome.shadowed else ""),
        f"latency: {explanation.seconds * 1000:.2f} ms",
    ]
    return "\n".join(lines)
