"""A stream Envoy cancels (its message timeout, a client that went away) leaves a trace: it
is counted as ``cancelled``, not ``ok``, and logged once with its request id, phase and age,
and the scan it was waiting for stops. In-process gRPC, as tests/test_extproc_grpc.py."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from classifiers.scan import ScanCancelled
from extproc.config import load_config_text
from extproc.envoy_adapter import Phase
from extproc.loop_stalls import StallMonitor
from extproc.server import Router
from extproc.servicer import ExtProcServicer, StateHolder
from extproc.signals import evaluator as evaluator_module
from tests.adapter_support import core, ep
from tests.scan_support import Records, SlowScan

CONFIG = """
router: {message_timeout_ms: 60000}
classifiers: {batching: {timeout_ms: 30000}}
providers:
  defaults: {model: general}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{name: g1, endpoint: "127.0.0.1:8101"}]
    - name: local/coder
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{name: c1, endpoint: "127.0.0.1:8103"}]
signals:
  - {name: code_kw, type: keyword, keywords: [python, "c++"]}
  - {name: pii, type: pii}
decisions:
  - {name: pii, priority: 90, rules: {signal: pii}, plugins: {block: {}}}
  - {name: code, rules: {signal: code_kw}, model: local/coder}
"""
PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
SECRET = "Bearer sk-this-is-no-real-key-1234567890"


def _headers(request_id: str, **extra: str) -> bytes:
    pairs = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": request_id,
             "content-type": "application/json", **extra}
    headers = [core.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return bytes(ep.ProcessingRequest(request_headers=ep.HttpHeaders(
        headers=core.HeaderMap(headers=headers), end_of_stream=False)))


def _body(text: str) -> bytes:
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": text}]})
    return bytes(ep.ProcessingRequest(
        request_body=ep.HttpBody(body=body.encode(), end_of_stream=True)))


async def _decision(channel: grpc.aio.Channel, text: str) -> str:
    """A whole request on a new stream; the decision header of its body answer."""
    call = channel.stream_stream(PROCESS, request_serializer=None, response_deserializer=None)()
    await call.write(_headers("r-next"))
    await call.read()
    await call.write(_body(text))
    answer = ep.ProcessingResponse.parse(await call.read())
    assert await call.read() is grpc.aio.EOF  # the router ended the stream: the last answer
    assert answer.request_body is not None, answer
    mutation = answer.request_body.response.header_mutation  # type: ignore[union-attr]
    return {h.header.key: h.header.raw_value for h in mutation.set_headers}[  # type: ignore[union-attr]
        "x-semantic-router-decision"].decode()


@pytest.fixture
def scan(monkeypatch: pytest.MonkeyPatch) -> SlowScan:
    slow = SlowScan(short_texts_only=True)  # long texts are slow to scan, chat-sized ones not
    monkeypatch.setattr(evaluator_module, "_pii_detector", lambda spec: slow)
    return slow


@pytest.fixture
async def router(scan: SlowScan) -> AsyncIterator[tuple[Router, Records]]:
    records = Records()
    logger = logging.getLogger("test.stream_cancelled")
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    instance = Router(load_config_text(CONFIG), grpc_address="127.0.0.1:0",
                      admin_address="127.0.0.1:0", logger=logger)
    await instance.start()
    try:
        yield instance, records
    finally:
        await instance.stop(0.5)
        logger.removeHandler(records)


def _streams(router: Router) -> dict[str, float]:
    return {
        s.labels["status"]: s.value
        for family in text_string_to_metric_families(router.metrics.exposition().decode())
        if family.name == "semantic_router_extproc_streams"
        for s in family.samples if s.name.endswith("_total")
    }


async def _until(condition: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def test_cancelled_stream_is_counted_and_logged(
    router: tuple[Router, Records], scan: SlowScan
) -> None:
    instance, records = router
    assert _streams(instance) == {"ok": 0, "invalid_message": 0, "internal_error": 0,
                                  "cancelled": 0}  # exported before the first one
    async with grpc.aio.insecure_channel(f"127.0.0.1:{instance.grpc_port}") as channel:
        call = channel.stream_stream(PROCESS, request_serializer=None,
                                     response_deserializer=None)()
        await call.write(_headers("r-slow", authorization=SECRET))
        await call.read()
        await call.write(_body("a long prompt " * 100))
        await _until(lambda: scan.chunks >= 2)  # in the body phase, scanning
        call.cancel()  # what Envoy does when the client goes away mid-request
        await _until(lambda: _streams(instance)["cancelled"] == 1)
        assert await asyncio.to_thread(scan.stopped.wait, 1.0)
        assert isinstance(scan.error, ScanCancelled)

        cancelled = [r for r in records.records if r.getMessage() == "stream cancelled"]
        assert len(cancelled) == 1
        line = cancelled[0]
        # long before the message timeout (60 s): the client went away, not a slow router
        assert line.levelno == logging.INFO
        assert line.cause == "downstream_reset"  # type: ignore[attr-defined]
        assert line.request_id == "r-slow"  # type: ignore[attr-defined]
        assert line.phase == "request_body"  # type: ignore[attr-defined]
        assert line.elapsed_ms >= 10  # type: ignore[attr-defined]
        dumped = json.dumps([vars(r) for r in records.records], default=str)
        assert "a long prompt" not in dumped and "sk-this-is" not in dumped

        # the router serves the next request as usual
        assert await _decision(channel, "fix my python code") == "code"
    assert _streams(instance) == {"ok": 1, "invalid_message": 0, "internal_error": 0,
                                  "cancelled": 1}


async def test_stream_cancelled_between_messages_is_logged_at_info(
    router: tuple[Router, Records],
) -> None:
    instance, records = router
    async with grpc.aio.insecure_channel(f"127.0.0.1:{instance.grpc_port}") as channel:
        call = channel.stream_stream(PROCESS, request_serializer=None,
                                     response_deserializer=None)()
        await call.write(_headers("r-gone"))
        await call.read()
        call.cancel()  # the client went away before sending its body
        await _until(lambda: _streams(instance)["cancelled"] == 1)
    (line,) = [r for r in records.records if r.getMessage() == "stream cancelled"]
    assert line.levelno == logging.INFO
    assert line.request_id == "r-gone"  # type: ignore[attr-defined]
    assert line.phase == "between_messages"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("answering_s", "level", "cause"), [
    (4.9, logging.WARNING, "message_timeout"),  # Envoy's 5 s timer started before we read
    (5.3, logging.WARNING, "message_timeout"),
    (0.4, logging.INFO, "downstream_reset"),
])
def test_a_reset_at_the_message_timeout_is_a_warning(
    answering_s: float, level: int, cause: str
) -> None:
    """Only a reset about the message timeout into a message says the router was too slow."""
    records = Records()
    logger = logging.getLogger("test.stream_cancelled.level")
    logger.addHandler(records)
    try:
        servicer = ExtProcServicer(StateHolder(None), logger)  # type: ignore[arg-type]
        processor = SimpleNamespace(request_id="r-1")
        servicer._log_cancelled(processor, Phase.REQUEST_BODY,  # type: ignore[arg-type]
                                answering_s + 0.1, answering_s, 5.0)
    finally:
        logger.removeHandler(records)
    (line,) = records.records
    assert (line.levelno, line.cause) == (level, cause)  # type: ignore[attr-defined]


def _cancelled_line(phase: Phase | None, request_id: str, answering_s: float,
                    stalled_s: float) -> logging.LogRecord:
    records = Records()
    logger = logging.getLogger("test.stream_cancelled.stall")
    logger.addHandler(records)
    try:
        servicer = ExtProcServicer(StateHolder(None), logger)  # type: ignore[arg-type]
        processor = SimpleNamespace(request_id=request_id)
        servicer._log_cancelled(processor, phase,  # type: ignore[arg-type]
                                answering_s, answering_s, 5.0, stalled_s)
    finally:
        logger.removeHandler(records)
    (line,) = records.records
    return line


@pytest.mark.parametrize(("phase", "stalled_s", "level", "cause"), [
    (None, 7.0, logging.WARNING, "message_timeout"),  # SIGSTOP: no message read at all
    (None, 4.6, logging.WARNING, "message_timeout"),
    (Phase.REQUEST_HEADERS, 4.6, logging.WARNING, "message_timeout"),
    (None, 0.2, logging.INFO, "downstream_reset"),  # a hiccup is not Envoy's timeout
])
def test_a_stalled_router_is_a_message_timeout_whatever_the_phase(
        phase: Phase | None, stalled_s: float, level: int, cause: str) -> None:
    line = _cancelled_line(phase, "", 0.0001, stalled_s)
    assert (line.levelno, line.cause) == (level, cause)  # type: ignore[attr-defined]
    assert line.request_id is None  # type: ignore[attr-defined]  # unknown: null, not ""
    assert hasattr(line, "loop_stalled_ms") == (cause == "message_timeout")


async def test_a_cancel_after_the_loop_stalled_is_logged_as_a_timeout() -> None:
    """The event loop blocked past the message timeout (as a SIGSTOPped router's): Envoy
    reset the stream; the router, once it runs again, says so with the request's id."""
    records = Records()
    logger = logging.getLogger("test.stream_cancelled.blocked")
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    text = CONFIG.replace("message_timeout_ms: 60000", "message_timeout_ms: 200")
    instance = Router(load_config_text(text), grpc_address="127.0.0.1:0",
                      admin_address="127.0.0.1:0", logger=logger)
    await instance.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{instance.grpc_port}") as channel:
            call = channel.stream_stream(PROCESS, request_serializer=None,
                                         response_deserializer=None)()
            await call.write(_headers("r-stalled"))
            await call.read()
            await asyncio.sleep(0.1)  # the stall monitor ticks
            time.sleep(0.3)
            call.cancel()
            await _until(lambda: _streams(instance)["cancelled"] == 1)
    finally:
        await instance.stop(0.5)
        logger.removeHandler(records)
    (line,) = [r for r in records.records if r.getMessage() == "stream cancelled"]
    assert line.levelno == logging.WARNING
    assert line.cause == "message_timeout"  # type: ignore[attr-defined]
    assert line.request_id == "r-stalled"  # type: ignore[attr-defined]
    assert line.phase == "between_messages"  # type: ignore[attr-defined]
    assert line.loop_stalled_ms >= 0.9 * 200  # type: ignore[attr-defined]


def test_the_stall_monitor_keeps_stalls_and_sees_one_under_way() -> None:
    monitor = StallMonitor(tick_s=0.05, min_stall_s=0.05)
    monitor._timer = object()  # type: ignore[assignment]  # running, ticked by hand here
    monitor._last_tick = 100.0
    monitor.tick(100.05)  # on time
    monitor.tick(103.10)  # 3 s late: a stall that ended at 103.1
    assert monitor.stalled_s(since=103.0, now=103.2) == pytest.approx(3.0)
    assert monitor.stalled_s(since=103.2, now=103.2) == pytest.approx(0.05)  # the open gap
    assert monitor.stalled_s(since=103.2, now=110.0) == pytest.approx(6.85)  # under way
