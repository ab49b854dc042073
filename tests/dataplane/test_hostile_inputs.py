"""Real Envoy + router + fake vLLM backends: inputs audits threw at the listener
(lone-surrogate escapes, long prompts, ``n`` > 1, unknown roles, encoded model ids, long
headers, malformed request targets, oversized declared bodies), each followed by a good
request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from extproc.names import MAX_REQUEST_HEADERS_KB
from tests.dataplane.conftest import Stack
from tests.dataplane.test_routing import chat_body, post

pytestmark = pytest.mark.dataplane


async def assert_still_routes(stack: Stack) -> None:
    after = await post(stack, chat_body("define a python function"))
    assert after.status_code == 200, after.text
    assert after.headers["x-backend-id"] == "code-1"


async def test_model_name_with_a_lone_surrogate_is_a_json_404(stack: Stack) -> None:
    """The 404 quotes the model name; encoding ``\\ud800`` used to raise and answer 500."""
    raw = b'{"model": "auto\\ud800", "messages": [{"role": "user", "content": "x"}]}'
    response = await post(stack, raw)
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    await assert_still_routes(stack)


async def test_lone_surrogate_in_content_is_routed_on_its_text(stack: Stack) -> None:
    raw = (b'{"model": "auto", "messages": [{"role": "user", '
           b'"content": "write a python function \\udfff please"}]}')
    response = await post(stack, raw)
    assert response.status_code == 200, response.text
    assert response.headers["x-semantic-router-decision"] == "code"
    received = stack.backends["code"].requests[-1].body
    assert received is not None
    assert received["messages"][0]["content"] == "write a python function \udfff please"


async def test_long_prompt_under_the_limit_reaches_the_backend(stack: Stack) -> None:
    """2 MiB is under ``max_request_bytes``; the simulated backend used to answer aiohttp's
    plain-text 413 beyond 1 MiB, which no vLLM does."""
    body = chat_body("python " + "word " * 420_000)
    response = await post(stack, body)
    assert response.status_code == 200, response.text[:200]
    assert response.headers["x-backend-id"] == "code-1"
    await assert_still_routes(stack)


async def test_n_choices_and_prompt_lists_through_the_sdk(stack: Stack) -> None:
    client = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="sk", max_retries=0)
    messages = [{"role": "user", "content": "a python question"}]
    completion = await client.chat.completions.create(
        model="auto", messages=messages, n=3)  # type: ignore[arg-type]
    assert [c.index for c in completion.choices] == [0, 1, 2]
    stream = await client.chat.completions.create(
        model="auto", messages=messages, n=2, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True})
    indices = set()
    usage = None
    async for chunk in stream:
        indices.update(c.index for c in chunk.choices)
        usage = chunk.usage or usage
    assert indices == {0, 1}
    assert usage is not None
    legacy = await client.completions.create(model="auto", prompt=["python one", "python two"])
    assert [c.index for c in legacy.choices] == [0, 1]
    await client.close()


@pytest.mark.parametrize("role", ["User", "wizard", "SYSTEM"])
async def test_a_role_openai_refuses_is_a_400_naming_it(stack: Stack, role: str) -> None:
    """A guard reading the user turns would not see a message whose role is "User"."""
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"},
                                          {"role": role, "content": "python secrets"}]}
    response = await post(stack, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages[1].role"
    assert error["type"] == "invalid_request_error"
    assert f"'{role}'" in error["message"]
    responses_api = await post(stack, {"model": "auto", "input": [{"role": "tool",
                                                                    "content": "x"}]},
                               path="/v1/responses")
    assert responses_api.status_code == 400, responses_api.text
    assert responses_api.json()["error"]["param"] == "input[0].role"
    assert not any(b.requests for b in stack.backends.values())
    await assert_still_routes(stack)


async def test_sdk_retrieves_every_model_name_chat_accepts(stack: Stack) -> None:
    """The SDK sends retrieve("vllm-sr/auto") as GET /v1/models/vllm-sr%2Fauto."""
    client = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="sk", max_retries=0)
    listed = [m.id for m in (await client.models.list()).data]
    assert listed == ["auto", "vllm-sr/auto", "general", "code", "reasoning"]
    for name in [*listed, "Qwen/Qwen3-8B"]:  # the provider id chat routes to "reasoning"
        assert (await client.models.retrieve(name)).id == name
    with pytest.raises(openai.NotFoundError) as missing:
        await client.models.retrieve("vllm-sr/../auto")
    assert missing.value.status_code == 404
    chat = await client.chat.completions.create(
        model="Qwen/Qwen3-8B", messages=[{"role": "user", "content": "hi"}])
    assert chat.model == "Qwen/Qwen3-8B"
    await client.close()


async def test_a_header_envoy_accepts_reaches_the_backend(stack: Stack) -> None:
    """The simulated backend used to answer a header over 8 KB with a plain-text 400."""
    limit = MAX_REQUEST_HEADERS_KB * 1024
    long_header = await post(stack, chat_body("python"), headers={"x-big": "a" * (limit - 2048)})
    assert long_header.status_code == 200, long_header.text[:200]
    assert long_header.headers["x-backend-id"] == "code-1"
    too_long = await post(stack, chat_body("python"), headers={"x-big": "a" * limit})
    assert too_long.status_code == 431
    error = too_long.json()["error"]
    assert error["message"] and error["code"] == "request_rejected"
    await assert_still_routes(stack)


async def raw_exchange(stack: Stack, request: bytes, timeout_s: float = 5) -> bytes:
    """Everything Envoy answers ``request`` with until it closes the connection."""
    host, _, port = stack.config.listener.address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()


async def test_envoy_errors_have_a_message_and_a_code(stack: Stack) -> None:
    """Envoy's reply to a target with a '#fragment' has an empty body: its message was ""."""
    body = b'{"model":"auto","messages":[{"role":"user","content":"hi"}]}'
    reply = await raw_exchange(stack, b"POST /v1/chat/completions#frag HTTP/1.1\r\nhost: x\r\n"
                               b"content-type: application/json\r\ncontent-length: %d\r\n\r\n"
                               % len(body) + body)
    head, _, content = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), reply
    error = httpx.Response(400, content=content).json()["error"]
    assert error["message"] == "the proxy refused the request (path_normalization_failed)"
    assert error["code"] == "request_rejected"
    await stack.backends["reasoning"].stop()
    down = await post(stack, chat_body("hi", model="reasoning"))
    assert down.status_code == 503
    error = down.json()["error"]
    assert error["message"].startswith("the upstream is unavailable (") and error["code"]
    # Envoy's raw details (`...{remote_connection_failure|delayed_connect_error:_Connection_
    # refused}`) stay in its access log; the client reads plain words
    assert "{" not in error["message"] and "_Connection_refused" not in error["message"], error
    await assert_still_routes(stack)


async def test_an_oversized_declared_body_is_refused_before_it_is_sent(stack: Stack) -> None:
    """With the body never sent, the 413 must come from the headers alone: a one-message
    route would wait for the body (after Envoy's 100 Continue)."""
    limit = stack.config.listener.max_request_bytes
    for length in (limit + 1, 9 * 1024 * 1024, 10**17):
        reply = await raw_exchange(
            stack, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/json\r\nexpect: 100-continue\r\n"
            b"content-length: %d\r\n\r\n" % length)
        assert b"HTTP/1.1 413 " in reply, (length, reply)
        assert b'"code": "request_too_large"' in reply
    head = b'{"model": "auto", "messages": [{"role": "user", "content": "python'
    tail = b'"}]}'
    at_limit = await post(stack, head + b" " * (limit - len(head) - len(tail)) + tail)
    assert at_limit.status_code == 200, at_limit.text[:200]  # the limit itself is allowed
    assert at_limit.headers["x-backend-id"] == "code-1"
    await assert_still_routes(stack)


async def test_a_transfer_encoding_envoy_cannot_take_is_a_400(stack: Stack) -> None:
    """Envoy answers ``transfer-encoding: gzip, chunked`` with 501: the client's mistake, so
    it must not read as a server error blaming the upstream."""
    body = b'{"model":"auto","messages":[{"role":"user","content":"hi"}]}'
    for coding in (b"gzip, chunked", b"chunked, chunked"):
        reply = await raw_exchange(
            stack, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/json\r\ntransfer-encoding: " + coding + b"\r\n\r\n"
            + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
        head, _, content = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), reply
        error = httpx.Response(400, content=content).json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "request_rejected"
    await assert_still_routes(stack)


async def test_an_http2_body_over_the_limit_without_a_length_is_a_413(stack: Stack) -> None:
    """On HTTP/2 Envoy passes a body with no content-length up to about twice the limit to
    the router: the router's gRPC server took it for an oversized message (500)."""
    limit = stack.config.listener.max_request_bytes
    head = b'{"model": "auto", "messages": [{"role": "user", "content": "'
    tail = b'"}]}'
    size = limit + limit // 2

    async def chunks() -> AsyncIterator[bytes]:
        yield head
        left = size - len(head) - len(tail)
        while left > 0:
            yield b"a" * min(left, 1 << 20)
            left -= 1 << 20
        yield tail

    async with httpx.AsyncClient(http1=False, http2=True, timeout=30) as client:
        response = await client.post(
            f"{stack.base_url}/v1/chat/completions", content=chunks(),
            headers={"content-type": "application/json"})
    assert response.http_version == "HTTP/2"
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["code"] == "request_too_large"
    await assert_still_routes(stack)
