"""Failures Envoy and the router must ride out: a backend endpoint dying under load, a
classifier slower than Envoy's message timeout (the router gives up first and routes to the
default model), and a router that answers too slowly anyway (fail-closed answers an
OpenAI-style 5xx, fail-open routes to the default model)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import httpx
import pytest

from classifiers.api import ClassifierTimeout, SignalScore
from extproc.localnet import free_port
from extproc.server import Router
from extproc.simulated_backend import BackendSpec, SimulatedBackend
from tests.dataplane.conftest import CONFIG, stack_config, start_stack, stop_stack

pytestmark = pytest.mark.dataplane

BODY = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}


async def test_endpoint_dies_under_load_and_requests_keep_succeeding() -> None:
    spare = free_port()
    template = CONFIG.replace(
        'backend_refs: [{{name: general-1, endpoint: "127.0.0.1:{general}"}}]',
        'backend_refs: [{{name: general-1, endpoint: "127.0.0.1:{general}"}}, '
        f'{{{{name: general-2, endpoint: "127.0.0.1:{spare}"}}}}]')
    assert template != CONFIG
    config, _ = stack_config(template=template)
    second = SimulatedBackend(BackendSpec("general-2", ("Qwen/Qwen3-0.6B",), port=spare))
    await second.start()
    stack = await start_stack(config)
    statuses: list[int] = []
    served_by: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=15) as client:

            async def one() -> None:
                response = await client.post("/v1/chat/completions", json=BODY)
                statuses.append(response.status_code)
                served_by.append(response.headers.get("x-backend-id", ""))

            await asyncio.gather(*(one() for _ in range(20)))
            assert {"general-1", "general-2"} <= set(served_by)  # both took traffic
            await stack.backends["general"].stop()  # one endpoint dies
            for _ in range(4):
                await asyncio.gather(*(one() for _ in range(10)))
        assert statuses == [200] * 60
        assert set(served_by[20:]) == {"general-2"}
    finally:
        await stop_stack(stack)
        await second.stop()


class SlowEngine:
    async def evaluate(self, text: str, names: frozenset[str] | None = None,
                       timeout_s: float | None = None) -> Mapping[str, SignalScore]:
        await asyncio.sleep(1.0)
        return {"domain": SignalScore("domain", "math", 0.9, True)}


class BusyEngine:
    """A classifier that would need a second, honouring the wait the router allows it."""

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    async def evaluate(self, text: str, names: frozenset[str] | None = None,
                       timeout_s: float | None = None) -> Mapping[str, SignalScore]:
        self.waits.append(timeout_s)
        await asyncio.sleep(min(1.0, timeout_s if timeout_s is not None else 1.0))
        raise ClassifierTimeout("no result in time")


async def test_a_classifier_slower_than_envoys_timeout_routes_to_the_default_model() -> None:
    """Classifiers' own timeout 2 s, Envoy's message timeout 200 ms: the router stops waiting
    before Envoy does, and the request is routed (unclassified), not answered 504."""
    config, _ = stack_config("closed", template=SLOW)
    stack = await start_stack(config, with_router=False)
    engine = BusyEngine()
    router = Router(config, engine=engine, logger=logging.getLogger("test.busy"))
    await router.start()
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=15) as client:
            response = await client.post("/v1/chat/completions", json=BODY)
            again = await client.post("/v1/chat/completions", json=BODY)
        for answer in (response, again):
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-backend-id"] == "general-1"
            assert answer.headers["x-semantic-router-decision"] == "default"
        assert config.classifiers.batching.timeout_ms == 2000
        assert all(wait is not None and 0 < wait <= 0.2 * 0.9 for wait in engine.waits)
    finally:
        await router.stop(grace_s=0.5)
        await stop_stack(stack)


SLOW = CONFIG.replace("  failure_mode: {failure_mode}",
                      "  failure_mode: {failure_mode}\n  message_timeout_ms: 200").replace(
    "  - {{name: math_kw, type: keyword, keywords: [integral, derivative, theorem]}}",
    "  - {{name: math_kw, type: domain}}")


@pytest.mark.parametrize("failure_mode", ["closed", "open"])
async def test_router_timing_out(failure_mode: str) -> None:
    config, _ = stack_config(failure_mode, template=SLOW)
    stack = await start_stack(config, with_router=False)
    router = Router(config, engine=SlowEngine(), logger=logging.getLogger("test.slow"))
    await router.start()
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=15) as client:
            response = await client.post("/v1/chat/completions", json=BODY)
            explicit = await client.post("/v1/chat/completions",
                                         json={**BODY, "model": "code"})
        if failure_mode == "closed":
            assert 500 <= response.status_code < 600
            assert response.json()["error"]["code"] == "router_unavailable"
        else:
            assert response.status_code == 200
            assert response.headers["x-backend-id"] == "general-1"
        # requests that need no classifier are not held up by the slow one
        assert explicit.status_code == 200
        assert explicit.headers["x-backend-id"] == "code-1"
    finally:
        await router.stop(grace_s=0.5)
        await stop_stack(stack)
