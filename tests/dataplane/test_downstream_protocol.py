"""Real Envoy + router + fake vLLM backends: what the listener takes from clients that are not
modern HTTP/1.1 or HTTP/2 SDKs. HTTP/1.0 (nginx's default upstream protocol) is routed like
any request; an ``Expect`` other than ``100-continue`` never reaches the backend (its 417 was
plain text); a client too slow to send its request is cut with a JSON 408 (a client sending
only a request line held a stream for ``stream_idle_timeout``), while a long answer is not."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from extproc.envoy_render import HTTP10_DEFAULT_HOST
from tests.dataplane.conftest import FAILED, Stack, stack_config, start_stack, stop_stack
from tests.dataplane.test_hostile_inputs import assert_still_routes

pytestmark = pytest.mark.dataplane

BODY = b'{"model": "auto", "messages": [{"role": "user", "content": "a python function"}]}'
STREAM_BODY = (b'{"model": "auto", "stream": true, '
               b'"messages": [{"role": "user", "content": "a python function"}]}')
# Short enough for a bounded test, long enough that a loaded CI host still routes in time
HEADERS_S, REQUEST_S = 1.0, 2.0


def request_head(version: bytes, length: int | None, *extra: bytes) -> bytes:
    lines = [b"POST /v1/chat/completions " + version, b"content-type: application/json",
             *extra]
    if length is not None:
        lines.append(b"content-length: %d" % length)
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def exchange(stack: Stack, *parts: bytes, pause_s: float = 0.0,
                   timeout_s: float = 10) -> tuple[float, bytes]:
    """Sends ``parts`` ``pause_s`` apart, then reads until Envoy closes the connection;
    returns the seconds that took and every byte answered."""
    host, _, port = stack.config.listener.address.rpartition(":")
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for i, part in enumerate(parts):
            if i and pause_s:
                await asyncio.sleep(pause_s)
            writer.write(part)
            await writer.drain()
        reply = await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()
    return time.monotonic() - started, reply


def split_reply(reply: bytes) -> tuple[bytes, dict[str, str], bytes]:
    head, _, content = reply.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in
               (line.partition(":") for line in lines)}
    return status.encode(), headers, content


async def test_http10_requests_are_routed(stack: Stack) -> None:
    """A plain HTTP/1.0 POST (no Host, as nginx sends by default) was answered 426."""
    _, reply = await exchange(stack, request_head(b"HTTP/1.0", len(BODY)) + BODY)
    status, headers, content = split_reply(reply)
    assert status.startswith(b"HTTP/1.0 200 "), reply
    assert headers["x-semantic-router-decision"] == "code"
    assert headers["x-semantic-router-model"] == "code"
    assert headers["x-backend-id"] == "code-1"
    assert json.loads(content)["model"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    received = stack.backends["code"].requests[-1]
    assert received.headers["host"] == HTTP10_DEFAULT_HOST
    # SSE over HTTP/1.0: no chunked coding, the stream ends with the connection
    _, reply = await exchange(stack, request_head(b"HTTP/1.0", len(STREAM_BODY),
                                                  b"host: gateway.example") + STREAM_BODY)
    status, headers, content = split_reply(reply)
    assert status.startswith(b"HTTP/1.0 200 "), reply
    assert headers["content-type"] == "text/event-stream"
    assert "transfer-encoding" not in headers
    assert content.rstrip().endswith(b"data: [DONE]")
    assert stack.backends["code"].requests[-1].headers["host"] == "gateway.example"
    _, reply = await exchange(stack, b"GET /v1/models HTTP/1.0\r\n\r\n")
    status, _, content = split_reply(reply)
    assert status.startswith(b"HTTP/1.0 200 "), reply
    assert json.loads(content)["data"][0]["id"] == "auto"
    # HTTP/1.0 without a length has no body: the router's JSON 400, not a hang
    _, reply = await exchange(stack, request_head(b"HTTP/1.0", None) + BODY)
    status, _, content = split_reply(reply)
    assert status.startswith(b"HTTP/1.0 400 "), reply
    assert json.loads(content)["error"]["type"] == "invalid_request_error"
    await assert_still_routes(stack)


@pytest.mark.parametrize("expectation", [b"200-ok", b"nothing", b"100-continue-please"])
async def test_an_expectation_other_than_100_continue_is_not_forwarded(
    stack: Stack, expectation: bytes
) -> None:
    _, reply = await exchange(stack, request_head(
        b"HTTP/1.1", len(BODY), b"host: x", b"connection: close",
        b"expect: " + expectation) + BODY)
    status, headers, _ = split_reply(reply)
    assert status.startswith(b"HTTP/1.1 200 "), reply
    assert headers["x-backend-id"] == "code-1"
    assert "expect" not in stack.backends["code"].requests[-1].headers


async def test_100_continue_uploads_still_work(stack: Stack) -> None:
    """Envoy answers ``100 Continue`` itself; the body follows it."""
    head = request_head(b"HTTP/1.1", len(BODY), b"host: x", b"connection: close",
                        b"expect: 100-continue")
    _, reply = await exchange(stack, head, BODY, pause_s=0.3)
    assert reply.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 "), reply
    _, headers, _ = split_reply(reply.partition(b"\r\n\r\n")[2])
    assert headers["x-semantic-router-decision"] == "code"
    assert "expect" not in stack.backends["code"].requests[-1].headers


@pytest.fixture
async def slow_client_stack(request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    config, _ = stack_config()
    listener = config.listener.model_copy(
        update={"request_headers_timeout_s": HEADERS_S, "request_timeout_s": REQUEST_S})
    running = await start_stack(dataclasses.replace(config, listener=listener))
    yield running
    if request.node.stash.get(FAILED, False):
        print("---- envoy log ----\n" + running.envoy.logs(200))
    await stop_stack(running)


def assert_request_timeout(reply: bytes, details: str) -> None:
    status, headers, content = split_reply(reply)
    assert status.startswith(b"HTTP/1.1 408 "), reply
    assert headers["content-type"] == "application/json"
    error = json.loads(content)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "request_timeout"
    assert details in error["message"]
    assert f"its headers within {HEADERS_S:g} s" in error["message"]


async def test_a_client_slow_to_send_its_request_is_cut(slow_client_stack: Stack) -> None:
    stack = slow_client_stack
    # Envoy closes about a second after its 408 (delayed_close_timeout)
    elapsed, reply = await exchange(stack, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
    assert elapsed < HEADERS_S + 2.5, elapsed
    assert_request_timeout(reply, "request_header_timeout")
    elapsed, reply = await exchange(stack, request_head(b"HTTP/1.1", len(BODY), b"host: x")
                                    + BODY[:20])
    assert REQUEST_S - 0.2 < elapsed < REQUEST_S + 2.5, elapsed
    assert_request_timeout(reply, "request_overall_timeout")
    assert not any(b.requests for b in stack.backends.values())
    await assert_still_routes(stack)


async def test_a_long_answer_outlives_the_request_timeouts(slow_client_stack: Stack) -> None:
    """``request_timeout`` stops once the request has reached the backend: neither a long
    wait for the first byte nor a long SSE stream is cut."""
    stack = slow_client_stack
    code = stack.backends["code"]
    code.spec = type(code.spec)(**{**code.spec.__dict__, "reply_delay_s": REQUEST_S + 1})
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=15) as client:
        response = await client.post("/v1/chat/completions", content=BODY,
                                     headers={"content-type": "application/json"})
        assert response.status_code == 200, response.text
        assert response.headers["x-backend-id"] == "code-1"
        code.spec = type(code.spec)(**{**code.spec.__dict__, "reply_delay_s": 0.0,
                                       "stream_delay_s": 0.6, "stream_chunks": 6})
        started = time.monotonic()
        async with client.stream("POST", "/v1/chat/completions", content=STREAM_BODY,
                                 headers={"content-type": "application/json"}) as stream:
            assert stream.status_code == 200
            lines = [line async for line in stream.aiter_lines() if line.startswith("data: ")]
    assert time.monotonic() - started > REQUEST_S + 1
    assert lines[-1] == "data: [DONE]"
