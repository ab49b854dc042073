"""One ext_proc message per request: OpenAI POSTs that announce their body length skip the
headers phase (the headers the router reads arrive as attributes with the body) and are
routed from the router's dynamic metadata. Everything else keeps the headers phase."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.dataplane.conftest import Stack
from tests.dataplane.test_routing import CHAT, chat_body, post

pytestmark = pytest.mark.dataplane

MESSAGES_SENT = "http.semantic_router.ext_proc.stream_msgs_sent"


async def messages_sent(stack: Stack) -> int:
    async with httpx.AsyncClient(timeout=5) as client:
        stats = (await client.get(f"{stack.admin_url}/stats?filter=ext_proc")).text
    for line in stats.splitlines():
        name, _, value = line.partition(": ")
        if name == MESSAGES_SENT:
            return int(value)
    return 0


async def test_a_routed_post_is_one_message_and_keeps_its_decision(stack: Stack) -> None:
    before = await messages_sent(stack)
    response = await post(stack, chat_body("Write a python function to reverse a list"),
                          headers={"x-request-id": "one-message-1"})
    assert response.status_code == 200, response.text
    assert await messages_sent(stack) - before == 1
    assert response.headers["x-semantic-router-decision"] == "code"
    assert response.headers["x-backend-id"] == "code-1"
    received = stack.backends["code"].requests[-1]
    assert received.body is not None and received.body["model"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert "x-semantic-router-decision" not in received.headers
    # explicit names route the same way
    explicit = await post(stack, chat_body("hello", model="reasoning"))
    assert explicit.headers["x-backend-id"] == "reasoning-1"
    assert explicit.headers["x-semantic-router-decision"] == "explicit"


async def test_headers_the_router_checks_still_apply_without_a_headers_phase(
    stack: Stack,
) -> None:
    before = await messages_sent(stack)
    wrong_type = await post(stack, b'{"model": "auto", "messages": []}',
                            headers={"content-type": "text/plain"})
    assert wrong_type.status_code == 415, wrong_type.text
    assert wrong_type.json()["error"]["type"] == "invalid_request_error"
    gzip = await post(stack, chat_body("hi"), headers={"content-encoding": "gzip"})
    assert gzip.status_code == 415
    assert await messages_sent(stack) - before == 2
    ok = await post(stack, chat_body("Write a python function to sort a dict"))
    assert ok.headers["x-backend-id"] == "code-1"


async def test_a_chunked_upload_takes_the_headers_phase_and_routes_the_same(
    stack: Stack,
) -> None:
    payload = json.dumps(chat_body("Write a python function to merge two sorted lists")).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 16):
            yield payload[start:start + 16]

    before = await messages_sent(stack)
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        response = await client.post(CHAT, content=chunks(),
                                     headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert response.headers["x-backend-id"] == "code-1"
    assert await messages_sent(stack) - before == 2  # headers, then the buffered body


async def test_other_methods_and_paths_keep_the_headers_phase(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        wrong_method = await client.get(CHAT)
        models = await client.get("/v1/models")
        empty = await client.post(CHAT, content=b"", headers={"content-type": "application/json"})
    assert wrong_method.status_code == 405
    assert models.status_code == 200 and models.json()["object"] == "list"
    assert empty.status_code == 400
    assert empty.json()["error"]["message"] == "request body is required"
