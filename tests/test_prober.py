"""The readiness prober against fake backends: ready, wrong model id, down, slow, HTTP error,
back-off and recovery; model lists of any size up to 1 MiB."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from extproc.config.schema import ProbeSettings
from extproc.localnet import free_port
from extproc.prober import MAX_MODELS_BYTES, EndpointRef, Prober, fetch_models, models_url
from extproc.simulated_backend import BackendSpec, SimulatedBackend

WANTED = "Qwen/Qwen3-0.6B"
FAST = ProbeSettings(interval_s=0.2, timeout_s=0.3, max_backoff_s=0.8, startup_timeout_s=2)


def ref(port: int, name: str = "b", wanted: str = WANTED) -> EndpointRef:
    return EndpointRef("general", wanted, "general", name, "config", "http", "127.0.0.1",
                       port, 1)


async def _error(_: web.Request) -> web.Response:
    return web.Response(status=500)


async def _app(handler: Callable[[web.Request], Awaitable[web.Response]] = _error
               ) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_get("/v1/models", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


@pytest.fixture
async def prober() -> AsyncIterator[Prober]:
    instance = Prober(FAST)
    yield instance
    await instance.stop()


async def test_outcomes_in_words(prober: Prober) -> None:
    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({"data": []})

    good = SimulatedBackend(BackendSpec("good", (WANTED, "other/model")))
    wrong = SimulatedBackend(BackendSpec("wrong", ("a", "b")))
    await good.start()
    await wrong.start()
    slow_runner, slow_port = await _app(slow)
    error_runner, error_port = await _app()
    down = free_port()
    try:
        prober.set_targets([ref(good.port, "good"), ref(wrong.port, "wrong"), ref(down, "down"),
                            ref(slow_port, "slow"), ref(error_port, "error")])
        await prober.start()
        statuses = {s.ref.name: s for s in prober.statuses()}
        assert statuses["good"].ready and statuses["good"].reason == f"lists {WANTED}"
        assert statuses["good"].result is not None
        assert statuses["good"].result.address == "127.0.0.1"
        assert not statuses["wrong"].ready
        assert statuses["wrong"].reason == f"lists [a, b] but not {WANTED}"
        assert statuses["down"].reason == "connection refused"
        assert statuses["slow"].reason == "timeout after 0.3s"
        assert statuses["error"].reason.startswith("HTTP 500")
        body = statuses["wrong"].to_json()
        assert body["url"] == f"http://127.0.0.1:{wrong.port}/v1/models"
        assert body["last_probe"]["models"] == ["a", "b"]  # type: ignore[index]
    finally:
        await good.stop()
        await wrong.stop()
        await slow_runner.cleanup()
        await error_runner.cleanup()


async def test_one_probe_per_endpoint_shared_by_models(prober: Prober) -> None:
    async with SimulatedBackend(BackendSpec("multi", (WANTED, "other"))) as backend:
        prober.set_targets([ref(backend.port, "x"), ref(backend.port, "y", wanted="other")])
        await prober.start()
        assert all(s.ready for s in prober.statuses())
        assert backend.probes == 1


async def test_backoff_then_recovery(prober: Prober) -> None:
    port = free_port()
    prober.set_targets([ref(port)])
    await prober.start()
    await asyncio.sleep(1.0)
    state = next(iter(prober._states.values()))
    assert state.failures >= 2  # retried, with growing gaps (0.2, 0.4, 0.8 capped)
    assert state.failures <= 4
    changes: list[bool] = []
    prober.on_change = lambda: changes.append(prober.statuses()[0].ready)
    async with SimulatedBackend(BackendSpec("late", (WANTED,), port=port)):
        for _ in range(30):
            if prober.statuses()[0].ready:
                break
            await asyncio.sleep(0.1)
        assert prober.statuses()[0].ready
        assert changes[-1] is True


async def test_new_target_is_probed_at_once(prober: Prober) -> None:
    await prober.start()
    async with SimulatedBackend(BackendSpec("new", (WANTED,))) as backend:
        prober.set_targets([ref(backend.port)])
        for _ in range(20):
            if prober.statuses()[0].ready:
                break
            await asyncio.sleep(0.05)
        assert prober.statuses()[0].ready
        prober.set_targets([])
        assert prober.statuses() == []


@pytest.mark.parametrize(("count", "wanted_error"), [
    (6_000, ""),  # ~300 KB: more than aiohttp buffers at once, still a valid list
    (25_000, "model list larger than 1 MiB"),
])
async def test_large_model_lists_are_read_whole_up_to_1_mib(count: int,
                                                             wanted_error: str) -> None:
    listed = [{"id": WANTED, "object": "model"}] + [
        {"id": f"lora-adapter-{i:05d}", "object": "model", "owned_by": "vllm", "root": WANTED}
        for i in range(count)]
    body = json.dumps({"object": "list", "data": listed}).encode()

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    runner, port = await _app(big)
    try:
        async with aiohttp.ClientSession() as session:
            ids, error = await fetch_models(session, models_url("http", "127.0.0.1", port), 5)
    finally:
        await runner.cleanup()
    assert error == wanted_error
    if not wanted_error:
        assert 250_000 < len(body) < MAX_MODELS_BYTES
        assert ids is not None and len(ids) == count + 1 and ids[0] == WANTED
    else:
        assert len(body) > MAX_MODELS_BYTES and ids is None
