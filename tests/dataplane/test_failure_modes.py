"""Router down: fail-closed answers 5xx; fail-open sends requests to the default model and
never honours a client-sent cluster header. A backend silent past
``listener.stream_idle_timeout_s``: a 504 the SDKs do not retry."""

from __future__ import annotations

import dataclasses
import time

import httpx
import openai
import pytest

from tests.dataplane.conftest import CONFIG, stack_config, start_stack, stop_stack

pytestmark = pytest.mark.dataplane

BODY = {"model": "auto", "messages": [{"role": "user", "content": "python function please"}]}
SNEAKY = {"x-semantic-router-cluster": "code"}


@pytest.mark.parametrize("failure_mode", ["open", "closed"])
async def test_router_down(failure_mode: str) -> None:
    config, _ = stack_config(failure_mode)
    stack = await start_stack(config, with_router=False)
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
            response = await client.post("/v1/chat/completions", json=BODY, headers=SNEAKY)
        if failure_mode == "open":
            assert response.status_code == 200, response.text
            assert response.headers["x-backend-id"] == "general-1"
            # the fail-open Lua filter mapped the auto name to the default model's id
            assert stack.backends["general"].requests[-1].body["model"] == "Qwen/Qwen3-0.6B"  # type: ignore[index]
            assert not stack.backends["code"].requests
            explicit = {**BODY, "model": "reasoning"}
            async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
                named = await client.post("/v1/chat/completions", json=explicit)
            assert named.headers["x-backend-id"] == "reasoning-1"
            assert stack.backends["reasoning"].requests[-1].body["model"] == "Qwen/Qwen3-8B"  # type: ignore[index]
        else:
            assert 500 <= response.status_code < 600
            assert response.json()["error"]["code"] == "router_unavailable"
            assert not stack.backends["general"].requests
        assert not stack.backends["code"].requests
    finally:
        await stop_stack(stack)


async def test_a_silent_backend_gets_a_timeout_the_sdk_does_not_retry() -> None:
    """A generation that is not streamed sends nothing until it ends; past the configured
    idle limit Envoy answers 504 in the OpenAI shape, and ``x-should-retry: false`` keeps the
    SDK (two retries by default) from running the same generation three times."""
    template = CONFIG.replace('admin: "127.0.0.1:{envoy_admin}"}}',
                              'admin: "127.0.0.1:{envoy_admin}", stream_idle_timeout_s: 1}}')
    assert template != CONFIG
    config, _ = stack_config(template=template)
    stack = await start_stack(config)
    try:
        general = stack.backends["general"]
        general.spec = dataclasses.replace(general.spec, reply_delay_s=2.5)
        client = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="sk", timeout=20)
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "a long story, please"}])
        assert 0.9 < time.monotonic() - started < 2.4
        assert caught.value.status_code == 504 and caught.value.code == "timeout"
        assert caught.value.response.headers["x-should-retry"] == "false"
        assert "listener.stream_idle_timeout_s" in caught.value.message
        assert len(general.requests) == 1  # not retried
        general.spec = dataclasses.replace(general.spec, reply_delay_s=0.0)
        reply = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "a short story, please"}])
        assert reply.choices[0].message.content
        await client.close()
    finally:
        await stop_stack(stack)
