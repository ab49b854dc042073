"""PII and language scans are bounded and cancellable (extproc/signals/evaluator.py): a huge
text takes its signal's ``on_error`` path within the scan budget, counted and logged without
the prompt, and a cancelled request stops its worker thread's scan at the next chunk."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse
from prometheus_client.parser import text_string_to_metric_families

from classifiers.api import ClassifierTimeout
from classifiers.language import LanguageGuess
from classifiers.scan import ScanBudget, ScanCancelled
from extproc.config import load_config_text
from extproc.context import RouterState, build_state, scan_timeout_s, scan_wait_s
from extproc.metrics import RouterMetrics
from extproc.signals import evaluator as evaluator_module
from tests.processor_support import TWO_MODELS, routed_decision, send_chat
from tests.scan_support import Records, SlowScan, busy

CONFIG = TWO_MODELS + """
classifiers: {batching: {timeout_ms: 300}}
signals:
  - name: sensitive_ids
    type: pii
    entity_types: [CREDIT_CARD, US_SSN, IBAN_CODE, API_KEY]
    on_error: ON_ERROR
  - {name: code_kw, type: keyword, keywords: [python]}
decisions:
  - name: pii
    priority: 90
    rules: {signal: sensitive_ids}
    plugins: {block: {status: 403, code: pii_detected}}
  - {name: code, rules: {signal: code_kw}, model: coder}
"""
HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r-huge"}
HUGE = "1234 5678 " * 800_000  # 8 MB of digit groups: ~7 s of pattern recognizers in one pass


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    logger = logging.getLogger("test.scan_budget")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _state(on_error: str = "ignore") -> RouterState:
    config = load_config_text(CONFIG.replace("ON_ERROR", on_error))
    return build_state(config, RouterMetrics(), engine=None)


async def _send(state: RouterState, text: str) -> ProcessingResponse:
    return await send_chat(state, "auto", text, HEADERS, "test.scan_budget")


def _signal_errors(metrics: RouterMetrics) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["signal"], s.labels["kind"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        if family.name == "semantic_router_signal_errors"
        for s in family.samples if s.name.endswith("_total")
    }


_decision = routed_decision


def test_scan_budget_is_the_classifier_timeout_within_a_fifth_of_the_message_timeout() -> None:
    assert scan_timeout_s(load_config_text(CONFIG.replace("ON_ERROR", "ignore"))) == 0.3
    defaults = load_config_text(CONFIG.replace("ON_ERROR", "ignore").replace(
        "classifiers: {batching: {timeout_ms: 300}}\n", ""))
    assert scan_timeout_s(defaults) == 1.0  # 2000 ms classifier timeout, 5000 ms message


async def test_huge_digit_text_takes_the_error_path_within_the_budget(
    records: Records,
) -> None:
    state = _state()
    started = time.perf_counter()
    response = await _send(state, HUGE)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.3 + 1.0, elapsed  # the budget, plus parsing 8 MB and some slack
    assert _decision(response) == "default"  # on_error: ignore, nothing else matched
    # the keyword signal scans the 8 MB too (in chunks, same budget): it may time out as well
    errors = _signal_errors(state.metrics)
    assert errors[("sensitive_ids", "timeout", "ignore")] == 1.0
    assert set(errors) <= {("sensitive_ids", "timeout", "ignore"), ("code_kw", "timeout", "ignore")}
    (routed,) = [r for r in records.records if r.getMessage() == "routed"]
    assert routed.outcome == "unclassified" and routed.reason == "timeout"  # type: ignore[attr-defined]
    assert routed.signal_errors["sensitive_ids"] == "timeout"  # type: ignore[attr-defined]
    assert set(routed.signal_errors) <= {"sensitive_ids", "code_kw"}  # type: ignore[attr-defined]
    cpu = time.process_time()  # the scan's thread stopped with the request: nothing runs on
    await asyncio.sleep(0.5)
    assert time.process_time() - cpu < 0.25
    for record in records.records:  # no prompt text in any record
        assert "1234 5678" not in json.dumps(vars(record), default=str)
    # the next requests are classified as usual
    blocked = await _send(state, "my card is 4111 1111 1111 1111")
    assert blocked.immediate_response is not None
    assert blocked.immediate_response.status.code == 403  # type: ignore[union-attr]
    assert _decision(await _send(state, "write a python function")) == "code"
    assert _signal_errors(state.metrics) == errors  # no new failure


async def test_failed_scan_is_logged_when_another_signal_decided(records: Records) -> None:
    state = _state()
    response = await _send(state, "write a python function for " + HUGE[:2_000_000])
    assert _decision(response) == "code"  # routed by the keyword; the scan timed out
    (routed,) = [r for r in records.records if r.getMessage() == "routed"]
    assert routed.outcome == "routed"  # type: ignore[attr-defined]
    assert routed.signal_errors == {"sensitive_ids": "timeout"}  # type: ignore[attr-defined]


async def test_cancelled_request_stops_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    scan = SlowScan()
    monkeypatch.setattr(evaluator_module, "_pii_detector", lambda spec: scan)
    long_budget = CONFIG.replace("timeout_ms: 300", "timeout_ms: 30000")  # a 30 s scan budget
    state = build_state(load_config_text(long_budget.replace("ON_ERROR", "ignore")
                                         + "router: {message_timeout_ms: 60000}\n"),
                        RouterMetrics(), engine=None)
    task = asyncio.create_task(_send(state, "x " * 1000))
    while scan.chunks < 3:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(scan.stopped.wait, 1.0)
    assert isinstance(scan.error, ScanCancelled)
    assert scan.chunks < 3 + 10  # stopped at its next chunk, not after 1000 of them
    assert _signal_errors(state.metrics) == {}  # a cancelled request is no signal failure


# on_error: match refuses the text it could not read, with a 413 saying so (nothing was found)
@pytest.mark.parametrize(("on_error", "status"), [("reject", 503), ("match", 413)])
async def test_slow_scan_takes_on_error(
    monkeypatch: pytest.MonkeyPatch, on_error: str, status: int
) -> None:
    scan = SlowScan()
    monkeypatch.setattr(evaluator_module, "_pii_detector", lambda spec: scan)
    state = _state(on_error)
    started = time.perf_counter()
    response = await _send(state, "x " * 1000)
    # cut at the 0.3 s budget, not after the scan's 10 s (slack for a loaded CI host)
    assert time.perf_counter() - started < 2.0
    assert response.immediate_response is not None
    assert response.immediate_response.status.code == status  # type: ignore[union-attr]
    assert await asyncio.to_thread(scan.stopped.wait, 1.0)
    assert isinstance(scan.error, (ClassifierTimeout, ScanCancelled))
    assert _signal_errors(state.metrics) == {("sensitive_ids", "timeout", on_error): 1.0}


async def test_language_scan_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    class SlowLanguage(SlowScan):
        def detect(self, text: str, budget: ScanBudget | None = None) -> Any:
            super().detect(text, budget)
            return LanguageGuess("de", 0.9)

    scan = SlowLanguage()
    monkeypatch.setattr(evaluator_module, "_language_detector", lambda spec: scan)
    config = load_config_text(CONFIG.replace("ON_ERROR", "ignore").replace(
        "  - {name: code_kw,", "  - {name: lang, type: language}\n  - {name: code_kw,").replace(
        "rules: {signal: code_kw}", "rules: {any: [{signal: code_kw}, {signal: lang}]}"))
    state = build_state(config, RouterMetrics(), engine=None)
    assert _decision(await _send(state, "x " * 1000)) == "default"
    assert await asyncio.to_thread(scan.stopped.wait, 1.0)
    assert ("lang", "timeout", "ignore") in _signal_errors(state.metrics)
    scan.total = 1  # a quick scan answers as before
    assert _decision(await _send(state, "Wie spät ist es? " * 40)) == "code"


def test_the_budget_is_the_scanning_threads_cpu_time() -> None:
    """Waiting (for the interpreter, for a core) costs a scan nothing; scanning does."""
    budget = ScanBudget(0.05)
    budget.check()
    time.sleep(0.15)  # three budgets of wall time, no CPU
    budget.check()
    busy(0.06)
    with pytest.raises(ClassifierTimeout):
        budget.check()


@pytest.mark.parametrize(("on_overload", "status"), [("reject", 429), ("default", None)])
async def test_a_scan_starved_of_cpu_is_an_overload_not_a_refusal(
    monkeypatch: pytest.MonkeyPatch, on_overload: str, status: int | None,
) -> None:
    """A phrase guard with `on_error: match` refuses a text too long to scan; a scan that
    cannot get the CPU in time (a busy host) is the router's overload instead: 429 with
    retry-after (the SDKs retry), or routed unclassified, never a 403 the client keeps."""
    scan = SlowScan(starved=True)
    monkeypatch.setattr(evaluator_module, "_pii_detector", lambda spec: scan)
    router = f"router: {{message_timeout_ms: 1000, on_overload: {on_overload}}}\n"
    config = load_config_text(CONFIG.replace("ON_ERROR", "match") + router)
    assert scan_timeout_s(config) == 0.2 and scan_wait_s(config) == 0.5
    state = build_state(config, RouterMetrics(), engine=None)
    started = time.perf_counter()
    response = await _send(state, "x " * 1000)
    assert time.perf_counter() - started < 0.5 + 0.3
    if status is None:
        assert _decision(response) == "default"
    else:
        assert response.immediate_response is not None
        assert response.immediate_response.status.code == status  # type: ignore[union-attr]
    assert await asyncio.to_thread(scan.stopped.wait, 1.0)
    assert isinstance(scan.error, ScanCancelled)  # stopped at its next chunk
    assert _signal_errors(state.metrics) == {}  # no signal failed: the host was busy
