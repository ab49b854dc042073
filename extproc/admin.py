"""The router's admin HTTP API (aiohttp): ``GET /health`` and ``GET /metrics``.

Binds to loopback by default. ``/health`` answers 200 only once every classifier is bound and
warmed up and the router is serving, 503 otherwise (so a load balancer or Kubernetes never
sends traffic to a router that would route blind).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from extproc.config.runtime import split_host_port

HealthSource = Callable[[], tuple[bool, dict[str, Any]]]


class AdminServer:
    def __init__(self, address: str, health: HealthSource, metrics: Callable[[], bytes]) -> None:
        self._address = address
        self._health = health
        self._metrics = metrics
        self._runner: web.AppRunner | None = None
        self.port = 0

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get("/health", self._get_health)
        app.router.add_get("/metrics", self._get_metrics)
        return app

    async def _get_health(self, _: web.Request) -> web.Response:
        ready, body = self._health()
        return web.json_response(body, status=200 if ready else 503)

    async def _get_metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics(),
            headers={"content-type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def start(self) -> None:
        host, port = split_host_port(self._address)
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
