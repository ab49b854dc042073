"""Real Envoy + router + fake vLLM backends: routing, rewriting, SSE, errors, SDK clients."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from tests.dataplane.conftest import Stack

pytestmark = pytest.mark.dataplane

CHAT = "/v1/chat/completions"


def chat_body(prompt: str, model: str = "auto", **extra: object) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], **extra}


async def post(stack: Stack, body: object, headers: dict[str, str] | None = None,
               path: str = CHAT) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await client.post(path, content=content,
                                 headers={"content-type": "application/json", **(headers or {})})


async def test_body_routes_to_backend_with_rewritten_model(stack: Stack) -> None:
    body = chat_body("Write a python function to merge two sorted lists", temperature=0.25,
                     top_p=1.0, user="tenant-7", metadata={"model": "keep-me"})
    response = await post(stack, body)
    assert response.status_code == 200, response.text
    assert response.headers["x-semantic-router-decision"] == "code"
    assert response.headers["x-semantic-router-model"] == "code"
    assert response.headers["x-backend-id"] == "code-1"
    received = stack.backends["code"].requests[-1]
    assert received.body is not None
    assert received.body["model"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    # every other field arrives as sent, including a nested "model" key
    assert {k: v for k, v in received.body.items() if k != "model"} == {
        k: v for k, v in body.items() if k != "model"}
    # the decision header feeds Envoy's per-decision stats but never reaches the backend
    assert "x-semantic-router-decision" not in received.headers
    assert not stack.backends["general"].requests


async def test_second_decision_and_default(stack: Stack) -> None:
    math = await post(stack, chat_body("What is the integral of x^2 from 0 to 3?"))
    plain = await post(stack, chat_body("Suggest a name for a bakery"))
    assert math.headers["x-backend-id"] == "reasoning-1"
    assert math.headers["x-semantic-router-decision"] == "math"
    assert plain.headers["x-backend-id"] == "general-1"
    assert plain.headers["x-semantic-router-decision"] == "default"
    assert stack.backends["general"].requests[-1].body["model"] == "Qwen/Qwen3-0.6B"  # type: ignore[index]


async def test_explicit_model_passthrough(stack: Stack) -> None:
    response = await post(stack, chat_body("write a python function", model="reasoning"))
    assert response.status_code == 200
    assert response.headers["x-backend-id"] == "reasoning-1"
    assert response.headers["x-semantic-router-decision"] == "explicit"
    assert stack.backends["reasoning"].requests[-1].body["model"] == "Qwen/Qwen3-8B"  # type: ignore[index]


async def test_client_sent_cluster_header_is_ignored(stack: Stack) -> None:
    sneaky = {"x-semantic-router-cluster": "reasoning",
              "x-semantic-router-decision": "math"}
    response = await post(stack, chat_body("hello there"), headers=sneaky)
    assert response.status_code == 200
    assert response.headers["x-backend-id"] == "general-1"
    assert not stack.backends["reasoning"].requests
    # also on a path the router passes through without looking at the body
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        passthrough = await client.get("/health", headers=sneaky)
    assert passthrough.status_code == 200
    assert not stack.backends["reasoning"].requests


async def test_models_list(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        response = await client.get("/v1/models")
        one = await client.get("/v1/models/code")
        missing = await client.get("/v1/models/nope")
    assert response.status_code == 200
    ids = [m["id"] for m in response.json()["data"]]
    assert ids == ["auto", "vllm-sr/auto", "general", "code", "reasoning"]
    assert response.json()["object"] == "list"
    assert one.json()["id"] == "code"
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (chat_body("hi", model="gpt-17"), 404, "model_not_found", "model"),
        (b'{"model": "auto", "messages": [', 400, None, None),
        (b"[1, 2]", 400, None, None),
        (b'{"model": "auto", "messages": "hi"}', 400, None, "messages"),
        (b'{"model": "auto\\r\\nx-evil: 1", "messages": [{"role": "user", "content": "x"}]}',
         404, "model_not_found", "model"),
    ],
)
async def test_bad_requests_get_openai_errors_and_router_survives(
    stack: Stack, body: object, status: int, code: str | None, param: str | None
) -> None:
    response = await post(stack, body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["param"] == param
    assert "x-evil" not in response.headers
    after = await post(stack, chat_body("define a python function"))
    assert after.status_code == 200
    assert after.headers["x-backend-id"] == "code-1"


async def test_sse_chunks_arrive_incrementally(stack: Stack) -> None:
    arrivals: list[float] = []
    body = chat_body("stream me a sql query", stream=True)
    async with (
        httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client,
        client.stream("POST", CHAT, json=body) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-semantic-router-decision"] == "code"
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                arrivals.append(time.monotonic())
    assert len(arrivals) >= 6
    # the backend waits 50 ms between chunks: Envoy must not buffer the stream
    assert arrivals[-1] - arrivals[0] >= 0.2
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(1 for gap in gaps if gap >= 0.025) >= 4


def _sync_sdk_calls(base_url: str) -> tuple[str, str, int]:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "prove this theorem"}])
    completion = raw.parse()
    chunks = list(client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "python please"}], stream=True))
    client.close()
    return completion.choices[0].message.content or "", raw.headers["x-backend-id"], len(chunks)


async def test_openai_sdk_sync(stack: Stack) -> None:
    content, backend, chunks = await asyncio.to_thread(_sync_sdk_calls, stack.base_url)
    assert backend == "reasoning-1"
    assert "model=Qwen/Qwen3-8B" in content
    assert chunks >= 6


async def test_openai_sdk_async_and_streaming(stack: Stack) -> None:
    client = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="sk", max_retries=0)
    models = await client.models.list()
    assert "auto" in [m.id for m in models.data]
    completion = await client.chat.completions.create(
        model="vllm-sr/auto", messages=[{"role": "user", "content": "a sql join question"}])
    assert "[code-1] model=Qwen/Qwen2.5-Coder-7B-Instruct" in (
        completion.choices[0].message.content or "")
    text = ""
    stream = await client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hello"}], stream=True,
        stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text.startswith("[general-1] model=Qwen/Qwen3-0.6B")
    legacy = await client.completions.create(model="auto", prompt="integral of sin x")
    assert legacy.choices[0].text.startswith("[reasoning-1]")
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}])
    await client.close()


async def _chunks(total_mib: int) -> AsyncIterator[bytes]:
    for _ in range(total_mib):
        yield b" " * (1024 * 1024)


async def test_oversized_bodies_get_413_in_json(stack: Stack) -> None:
    limit = stack.config.listener.max_request_bytes
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        # Envoy answers a declared oversized body at once and closes; a client still sending
        # (slow on a busy host) can get the reset before it reads the 413: try again
        for attempt in range(3):
            try:
                declared = await client.post(CHAT, content=b" " * (limit + 1),
                                             headers={"content-type": "application/json"})
                break
            except (httpx.ReadError, httpx.WriteError):
                if attempt == 2:
                    raise
        # chunked, no content-length: Envoy's own buffer limit answers, mapped to JSON
        chunked = await client.post(CHAT, content=_chunks(limit // (1024 * 1024) + 2),
                                    headers={"content-type": "application/json"})
    for response in (declared, chunked):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
    after = await post(stack, chat_body("python"))
    assert after.headers["x-backend-id"] == "code-1"


async def test_backend_down_is_an_openai_error(stack: Stack) -> None:
    await stack.backends["reasoning"].stop()
    response = await post(stack, chat_body("hi", model="reasoning"))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "upstream_unavailable"


@pytest.mark.parametrize(
    ("method", "path", "content", "headers", "status", "code"),
    [
        ("GET", CHAT, b"", {}, 405, "method_not_allowed"),
        ("PUT", "/v1/completions", b"{}", {}, 405, "method_not_allowed"),
        ("POST", "/v1/models", b"{}", {}, 405, "method_not_allowed"),
        ("POST", "/v1/nope", b"{}", {}, 404, "unknown_url"),
        ("GET", "/", b"", {}, 404, "unknown_url"),
        ("POST", CHAT, b"model=auto", {"content-type": "application/x-www-form-urlencoded"},
         415, "unsupported_media_type"),
        ("POST", CHAT, b"\x1f\x8b\x08\x00", {"content-encoding": "gzip"}, 415,
         "unsupported_media_type"),
        ("POST", CHAT, b'{"model": "auto", "messages": "\xff\xfe"}', {}, 400, None),
        ("POST", CHAT, b'{"model": "auto", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
         {}, 400, None),
        ("POST", CHAT, b"", {}, 400, None),
        ("POST", CHAT, b'{"model": "auto", "messages": [{"role": "user", "content": 5}]}', {},
         400, None),
        ("POST", CHAT, b'{"model": "auto", "messages": [], "stream": "yes"}', {}, 400, None),
    ],
)
async def test_hostile_requests_get_the_right_status(
    stack: Stack, method: str, path: str, content: bytes, headers: dict[str, str], status: int,
    code: str | None,
) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        response = await client.request(method, path, content=content, headers={
            "content-type": "application/json", **headers})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    after = await post(stack, chat_body("python again"))
    assert after.headers["x-backend-id"] == "code-1"


async def test_responses_api_through_the_sdk(stack: Stack) -> None:
    """The Responses API (`client.responses.create`) is routed like chat completions."""
    client = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="sk", max_retries=0)
    response = await client.responses.create(
        model="auto", input="Write a python function that parses a date",
        instructions="Be brief.")
    assert response.output_text.startswith("[code-1] model=Qwen/Qwen2.5-Coder-7B-Instruct")
    received = stack.backends["code"].requests[-1]
    assert received.path == "/v1/responses"
    assert received.body["instructions"] == "Be brief."  # type: ignore[index]
    text = ""
    stream = await client.responses.create(
        model="auto", stream=True,
        input=[{"role": "user", "content": [{"type": "input_text",
                                             "text": "integral of x squared"}]}])
    async for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
    assert text.startswith("[reasoning-1] model=Qwen/Qwen3-8B")
    async with client.responses.stream(model="auto", input="integral of x cubed") as helper:
        async for _ in helper:
            pass
        final = await helper.get_final_response()
    assert final.output_text.startswith("[reasoning-1] model=Qwen/Qwen3-8B")
    bad = await post(stack, {"model": "auto", "input": 7}, path="/v1/responses")
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "input"
    await client.close()
