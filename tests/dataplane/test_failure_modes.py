"""Router down: fail-closed answers 5xx; fail-open sends requests to the default model and
never honours a client-sent cluster header."""

from __future__ import annotations

import httpx
import pytest

from tests.dataplane.conftest import stack_config, start_stack, stop_stack

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
