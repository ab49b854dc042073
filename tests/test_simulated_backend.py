"""The simulated vLLM backend, driven by the official openai SDK and plain httpx."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from extproc.names import MAX_REQUEST_HEADERS_KB
from extproc.simulated_backend import BackendSpec, SimulatedBackend, serve_backends

MODEL = "Qwen/Qwen3-0.6B"
DELAY = 0.03
CHUNKS = 5


@pytest.fixture
async def backend() -> AsyncIterator[SimulatedBackend]:
    spec = BackendSpec(
        "sim-reasoning-1", (MODEL, "other/model"), stream_delay_s=DELAY, stream_chunks=CHUNKS
    )
    async with SimulatedBackend(spec) as b:
        yield b


@pytest.fixture
async def client(backend: SimulatedBackend) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=backend.url + "/v1", api_key="x", max_retries=0) as c:
        yield c


async def test_port_and_url(backend: SimulatedBackend) -> None:
    assert backend.port > 0
    assert backend.url == f"http://127.0.0.1:{backend.port}"


async def test_models_list_and_health(
    backend: SimulatedBackend, client: openai.AsyncOpenAI
) -> None:
    models = await client.models.list()
    assert [m.id for m in models.data] == [MODEL, "other/model"]
    assert models.data[0].owned_by == "vllm"
    raw = (await client.models.with_raw_response.list()).http_response.json()
    assert raw["object"] == "list"
    assert raw["data"][0]["root"] == MODEL and raw["data"][0]["max_model_len"] > 0
    async with httpx.AsyncClient() as http:
        assert (await http.get(backend.url + "/health")).status_code == 200


async def test_chat_non_stream(backend: SimulatedBackend, client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello there"}],
        extra_headers={"x-test-marker": "1"},
    )
    assert raw.headers["x-backend-id"] == "sim-reasoning-1"
    assert raw.headers["x-received-model"] == MODEL
    resp = raw.parse()
    assert resp.object == "chat.completion" and resp.model == MODEL
    content = resp.choices[0].message.content
    assert content is not None and content.startswith(f"[sim-reasoning-1] model={MODEL}")
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.prompt_tokens == 2
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    seen = backend.requests[-1]
    assert seen.path == "/v1/chat/completions" and seen.method == "POST"
    assert seen.headers["x-test-marker"] == "1"
    assert seen.body is not None and seen.body["model"] == MODEL


async def test_chat_stream_arrives_incrementally(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    content_times: list[float] = []
    pieces: list[str] = []
    chunks = []
    async for chunk in stream:
        chunks.append(chunk)
        if chunk.choices and chunk.choices[0].delta.content:
            content_times.append(time.monotonic())
            pieces.append(chunk.choices[0].delta.content)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.model == MODEL for c in chunks)
    assert len(pieces) == CHUNKS
    assert "".join(pieces).startswith(f"[sim-reasoning-1] model={MODEL}")
    assert content_times[-1] - content_times[0] >= (CHUNKS - 2) * DELAY * 0.5
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


async def test_stream_without_usage_ends_with_done(backend: SimulatedBackend) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with httpx.AsyncClient() as http:
        resp = await http.post(backend.url + "/v1/chat/completions", json=body)
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = [e for e in resp.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert '"usage"' not in resp.text
    assert len(events) == 1 + CHUNKS + 1 + 1  # role, content, finish, [DONE]


async def test_completions(client: openai.AsyncOpenAI) -> None:
    resp = await client.completions.create(model="other/model", prompt="say something")
    assert resp.object == "text_completion" and resp.model == "other/model"
    assert resp.choices[0].text.startswith("[sim-reasoning-1] model=other/model")
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and resp.usage.prompt_tokens == 2

    stream = await client.completions.create(
        model=MODEL, prompt="x", stream=True, stream_options={"include_usage": True}
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text.startswith(f"[sim-reasoning-1] model={MODEL}")
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].choices == []


async def test_unknown_model_is_404(backend: SimulatedBackend, client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await client.chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.code == "model_not_found"
    assert info.value.response.headers["x-received-model"] == "nope"
    assert backend.requests[-1].body == {
        "model": "nope",
        "messages": [{"role": "user", "content": "hi"}],
    }


async def test_bad_requests_are_400(backend: SimulatedBackend) -> None:
    async with httpx.AsyncClient(base_url=backend.url) as http:
        resp = await http.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["type"] == "invalid_request_error"
        assert backend.requests[-1].body is None

        resp = await http.post("/v1/chat/completions", json={"model": MODEL})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"
        resp = await http.post("/v1/completions", json=[1, 2])
        assert resp.status_code == 400


async def test_headers_as_long_as_envoy_forwards_are_accepted(backend: SimulatedBackend) -> None:
    """aiohttp's 8190-byte default answered a long header with a plain-text 400."""
    long_value = "a" * (MAX_REQUEST_HEADERS_KB * 1024 - 100)
    async with httpx.AsyncClient() as http:
        response = await http.post(
            backend.url + "/v1/chat/completions", headers={"x-big": long_value},
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        assert response.status_code == 200, response.text[:200]
        assert backend.requests[-1].headers["x-big"] == long_value
        long_path = await http.get(backend.url + "/health?q=" + long_value)
        assert long_path.status_code == 200


async def test_requests_are_bounded(backend: SimulatedBackend) -> None:
    async with httpx.AsyncClient(base_url=backend.url) as http:
        await asyncio.gather(*(http.get("/health") for _ in range(20)))
    assert len(backend.requests) == 20
    backend.requests.extend(backend.requests[-1:] * 2000)
    async with httpx.AsyncClient(base_url=backend.url) as http:
        await http.get("/health")
    assert len(backend.requests) == 1000


async def test_serve_backends_starts_several() -> None:
    specs = [BackendSpec(f"sim-{i}", (f"m{i}",)) for i in range(2)]
    backends = await serve_backends(specs)
    try:
        assert len({b.port for b in backends}) == 2
        async with openai.AsyncOpenAI(base_url=backends[1].url + "/v1", api_key="x") as c:
            resp = await c.chat.completions.create(
                model="m1", messages=[{"role": "user", "content": "hi"}]
            )
        assert resp.choices[0].message.content is not None
        assert resp.choices[0].message.content.startswith("[sim-1] model=m1")
    finally:
        for b in backends:
            await b.stop()


async def test_main_runs_until_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "extproc.simulated_backend",
        "--id",
        "cli-1",
        "--model",
        "a",
        "--model",
        "b",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],  # `-m` finds extproc from the repo root
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 10))
        assert ready["event"] == "backend_ready" and ready["models"] == ["a", "b"]
        async with httpx.AsyncClient() as http:
            models = (await http.get(ready["url"] + "/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["a", "b"]
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 10) == 0


async def test_client_leaving_mid_stream_is_harmless(backend: SimulatedBackend) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with (
        httpx.AsyncClient() as http,
        http.stream("POST", backend.url + "/v1/chat/completions", json=body) as resp,
    ):
        async for _ in resp.aiter_lines():
            break  # leave after the first event
    # The backend keeps serving after the abandoned stream.
    async with httpx.AsyncClient() as http:
        assert (await http.get(backend.url + "/health")).status_code == 200
