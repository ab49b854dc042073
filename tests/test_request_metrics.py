"""``semantic_router_requests_total`` counts every request exactly once, so an SRE can sum it
over outcomes: a blocked request is ``outcome="blocked"``, not also ``rejected``."""

from __future__ import annotations

import json
import logging

from prometheus_client.parser import text_string_to_metric_families

from extproc.config import load_config_text
from extproc.context import RouterState, build_state
from extproc.envoy_adapter import Phase, RequestMessage
from extproc.metrics import RouterMetrics
from extproc.processor import StreamProcessor

CONFIG = """
providers:
  defaults: {model: local}
  models:
    - {name: local, provider_model_id: m/local, backend_refs: [{name: a, endpoint: "h:1"}]}
    - name: hosted
      provider_model_id: m/hosted
      pii_allowed: []
      backend_refs: [{name: b, endpoint: "h:2"}]
signals:
  - {name: pii, type: pii}
  - {name: banned, type: keyword, keywords: [forbidden]}
decisions:
  - {name: banned, priority: 10, rules: {signal: banned}, plugins: {block: {}}}
"""
HEADERS = {":method": "POST", ":path": "/v1/chat/completions"}


async def _send(state: RouterState, body: bytes) -> None:
    processor = StreamProcessor(state, logging.getLogger("test"))
    await processor.handle(RequestMessage(Phase.REQUEST_HEADERS, HEADERS, b"", False))
    await processor.handle(RequestMessage(Phase.REQUEST_BODY, {}, body, True))


def _chat(model: str, text: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": text}]}).encode()


def _requests(metrics: RouterMetrics) -> dict[tuple[str, str], float]:
    text = metrics.exposition().decode()
    return {
        (s.labels["outcome"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == "semantic_router_requests"
        for s in family.samples if s.name == "semantic_router_requests_total"
    }


async def test_each_request_is_counted_once() -> None:
    metrics = RouterMetrics()
    state = build_state(load_config_text(CONFIG), metrics, engine=None)
    await _send(state, _chat("auto", "this is forbidden"))  # block decision
    await _send(state, _chat("hosted", "card 4111 1111 1111 1111"))  # pii_not_allowed
    await _send(state, _chat("auto", "hello"))  # default
    await _send(state, b"{broken")  # 400
    counts = _requests(metrics)
    assert sum(counts.values()) == 4, counts
    assert counts == {
        ("blocked", ""): 1.0,
        ("blocked", "pii_not_allowed"): 1.0,
        ("default", ""): 1.0,
        ("rejected", "BadRequest"): 1.0,
    }


def test_reload_results_are_exported_before_the_first_reload() -> None:
    """An alert on ``increase(semantic_router_config_reloads_total{result="failed"}[5m])``
    needs the series at 0 before the first failure, or that failure is never seen."""
    text = RouterMetrics().exposition().decode()
    values = {
        s.labels["result"]: s.value
        for family in text_string_to_metric_families(text)
        if family.name == "semantic_router_config_reloads"
        for s in family.samples if s.name.endswith("_total")
    }
    assert values == {"ok": 0.0, "failed": 0.0}
