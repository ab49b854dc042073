"""Real Envoy + router: browser clients on another origin (`listener.cors`). Envoy answers an
allowed origin's preflight itself, before the API key check and the router, and marks every
answer to that origin, the router's errors included; other origins, and every origin when
CORS is off, get no allow headers (the router answers their `OPTIONS` with 405)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest

from extproc.config.schema import CorsSettings
from tests.dataplane.conftest import FAILED, Stack, stack_config, start_stack, stop_stack

pytestmark = pytest.mark.dataplane

APP = "https://app.example.com"
CHAT = "/v1/chat/completions"
PREFLIGHT = {"access-control-request-method": "POST",
             "access-control-request-headers": "authorization, content-type, x-stainless-os"}


@pytest.fixture
async def cors_stack(request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    config, _ = stack_config()
    listener = config.listener.model_copy(update={"cors": CorsSettings(allow_origins=[APP])})
    running = await start_stack(dataclasses.replace(config, listener=listener))
    yield running
    if request.node.stash.get(FAILED, False):
        print("---- envoy log ----\n" + running.envoy.logs(200))
    await stop_stack(running)


async def test_an_allowed_origin_gets_its_preflight_and_marked_answers(cors_stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=cors_stack.base_url, timeout=10) as client:
        preflight = await client.options(CHAT, headers={"origin": APP, **PREFLIGHT})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == APP
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "authorization" in preflight.headers["access-control-allow-headers"]
        assert preflight.headers["access-control-max-age"] == "600"
        routed = await client.post(CHAT, headers={"origin": APP}, json={
            "model": "auto", "messages": [{"role": "user", "content": "a python function"}]})
        assert routed.status_code == 200
        assert routed.headers["access-control-allow-origin"] == APP
        assert "x-semantic-router-model" in routed.headers["access-control-expose-headers"]
        assert routed.headers["x-semantic-router-decision"] == "code"
        error = await client.post(CHAT, headers={"origin": APP}, json={"model": "auto"})
        assert error.status_code == 400 and error.json()["error"]["param"] == "messages"
        assert error.headers["access-control-allow-origin"] == APP
        other = await client.options(CHAT, headers={"origin": "https://evil.example", **PREFLIGHT})
        assert other.status_code == 405
        assert "access-control-allow-origin" not in other.headers
        assert other.json()["error"]["code"] == "method_not_allowed"


async def test_without_cors_an_options_request_is_a_405(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        preflight = await client.options(CHAT, headers={"origin": APP, **PREFLIGHT})
    assert preflight.status_code == 405
    assert "access-control-allow-origin" not in preflight.headers
