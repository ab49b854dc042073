"""Start-up as a prober sees it: the admin API answers from the start, ``/livez`` 200 and
``/readyz`` 503 ``starting`` while the classifiers load; with a bundled Envoy, ``/readyz``
says ready only once Envoy's listener is. In process, with the Envoy replaced by a fake
whose readiness the test controls."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from extproc import server as server_module
from extproc.config import load_config_text
from extproc.localnet import free_port
from extproc.server import Router, serve

CONFIG = """
router:
  grpc: "127.0.0.1:{grpc}"
  admin: "127.0.0.1:{admin}"
  shutdown_grace_s: 0
  probe: {{interval_s: 0.3, timeout_s: 0.5, startup_timeout_s: 1}}
listener: {{address: "127.0.0.1:{listener}", admin: "127.0.0.1:{envoy_admin}"}}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: g, endpoint: "127.0.0.1:{backend}"}}]
"""


def _config_text() -> str:
    return CONFIG.format(grpc=free_port(), admin=free_port(), listener=free_port(),
                         envoy_admin=free_port(), backend=free_port())


async def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def _probes(base: str) -> dict[str, tuple[int, str]]:
    async with httpx.AsyncClient(base_url=base) as client:
        answers = {p: await client.get(p) for p in ("/livez", "/readyz", "/health")}
    return {p: (r.status_code, r.json()["status"]) for p, r in answers.items()}


async def test_probes_answer_while_the_classifiers_load(monkeypatch: pytest.MonkeyPatch) -> None:
    release = asyncio.Event()
    real = server_module.build_engine

    async def slow_engine(*args: Any) -> Any:
        await release.wait()  # the classifiers are "loading" until the test says so
        return await real(*args)

    monkeypatch.setattr(server_module, "build_engine", slow_engine)
    router = Router(load_config_text(_config_text()), logger=logging.getLogger("test.startup"))
    starting = asyncio.create_task(router.start())
    try:
        await _until(lambda: router.admin_port != 0 or starting.done())
        base = f"http://127.0.0.1:{router.admin_port}"
        assert await _probes(base) == {"/livez": (200, "alive"), "/readyz": (503, "starting"),
                                       "/health": (503, "not_ready")}
        release.set()
        await starting
        assert (await _probes(base))["/readyz"] == (200, "ready")
    finally:
        release.set()
        await asyncio.gather(starting, return_exceptions=True)
        await router.stop(0)


class FakeEnvoy:
    """Stands in for the bundled Envoy: ready when ``ready`` is set."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()  # the router started and waits for Envoy
        self.ready = asyncio.Event()
        self.pid = 0
        self.log_path = Path("envoy.log")
        self.returncode: int | None = None

    def start(self) -> None:
        pass

    async def wait_ready(self) -> None:
        self.waiting.set()
        await self.ready.wait()

    async def wait_exit(self) -> None:
        await asyncio.Event().wait()

    async def drain(self, grace_s: float) -> int:
        return 0

    def stop(self, timeout_s: float) -> None:
        pass

    def logs(self, lines: int) -> str:
        return ""


async def test_with_envoy_ready_waits_for_envoys_listener(
        monkeypatch: pytest.MonkeyPatch) -> None:
    envoy = FakeEnvoy()
    monkeypatch.setattr(server_module, "envoy_for", lambda *args: envoy)
    config = load_config_text(_config_text())
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(config, with_envoy=True, stop=stop))
    base = f"http://{config.router.admin}"
    try:
        await _until(lambda: envoy.waiting.is_set() or serving.done(), 60.0)
        # the router is up, its Envoy is not: not ready yet
        assert (await _probes(base))["/readyz"] == (503, "starting")
        assert (await _probes(base))["/livez"] == (200, "alive")
        envoy.ready.set()
        for _ in range(100):
            if (await _probes(base))["/readyz"] == (200, "ready"):
                break
            await asyncio.sleep(0.01)
        assert (await _probes(base))["/readyz"] == (200, "ready")
    finally:
        stop.set()
        envoy.ready.set()
        await asyncio.wait_for(serving, 30)
