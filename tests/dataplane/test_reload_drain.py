"""Hot reload applies a valid edit atomically and keeps the old config on a bad one; a stop
drains: health turns not-ready first and a long SSE response in flight still finishes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from extproc.reload import ConfigReloader
from tests.dataplane.conftest import (
    CONFIG,
    Stack,
    stack_config,
    start_stack,
    stop_stack,
    stream_and_stop,
)

pytestmark = pytest.mark.dataplane


async def _decision(stack: Stack, prompt: str) -> str:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        response = await client.post("/v1/chat/completions", json={
            "model": "auto", "messages": [{"role": "user", "content": prompt}]})
    assert response.status_code == 200
    return response.headers["x-semantic-router-decision"]


async def test_hot_reload(tmp_path: Path) -> None:
    config, ports = stack_config()
    path = tmp_path / "router.yaml"
    text = CONFIG.format(failure_mode="closed", **ports)
    path.write_text(text)
    stack = await start_stack(config)
    assert stack.router is not None
    reloader = ConfigReloader(path, config, stack.router.apply_config, stack.router.metrics,
                              logging.getLogger("test.reload"))
    try:
        assert await _decision(stack, "tell me about rust") == "default"
        assert await reloader.check_once() == "unchanged"
        path.write_text(text.replace("keywords: [python, function, sql]",
                                     "keywords: [python, function, sql, rust]"))
        assert await reloader.check_once() == "applied"
        assert await _decision(stack, "tell me about rust") == "code"
        path.write_text(text.replace("model: code}", "model: nowhere}"))
        assert await reloader.check_once() == "failed"
        assert await _decision(stack, "tell me about rust") == "code"  # old config serves on
        path.unlink()  # a deploy that removes the file: counted once, old config serves on
        assert await reloader.check_once() == "failed"
        assert await reloader.check_once() == "unchanged"
        assert await _decision(stack, "tell me about rust") == "code"
        path.write_text(text)  # back (the original): read again
        assert await reloader.check_once() == "applied"
        assert await _decision(stack, "tell me about rust") == "default"
        metrics = stack.router.metrics.exposition().decode()
        assert 'semantic_router_config_reloads_total{result="ok"} 2.0' in metrics
        assert 'semantic_router_config_reloads_total{result="failed"} 2.0' in metrics
    finally:
        await stop_stack(stack)


async def test_stop_drains_a_long_stream() -> None:
    config, _ = stack_config()
    stack = await start_stack(config)
    router = stack.router
    assert router is not None

    async def not_ready_first() -> None:  # not-ready first, while the stream goes on
        await asyncio.sleep(0.1)
        assert not router.ready
        ready, _ = router.health()
        assert not ready

    try:
        chunks = await stream_and_stop(stack, 0.4, lambda: router.stop(grace_s=15),
                                       not_ready_first)
        assert chunks[-1] == "data: [DONE]"
        assert len(chunks) >= 8  # role, 6 content pieces, finish, [DONE]
    finally:
        stack.router = None
        await stop_stack(stack)
