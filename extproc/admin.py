"""The router's admin HTTP API (aiohttp): ``GET /livez``, ``GET /readyz``, ``GET /health``,
``GET /metrics`` and the worker registry (``POST/GET /v1/workers``,
``GET/DELETE /v1/workers/{id}``).

Binds to loopback by default. Probes:

* ``/livez``: 200 ``{"status": "alive"}`` whenever it answers at all (the process runs and
  its event loop turns): for liveness, never tied to backends.
* ``/readyz``: 200 ``{"status": "ready"}`` once every classifier is bound and warmed up and
  the gRPC server is serving; 503 ``starting`` or ``draining`` otherwise (so a load balancer
  or Kubernetes never sends streams to a router that would route blind). Not tied to the
  backends either: a backend outage must not take the router out of Envoy's cluster.
* ``/health``: the detailed report (classifiers, every model's endpoints and last probe);
  200 only when ready *and* the default model has a ready endpoint, 503 otherwise.

Worker writes need ``Authorization: Bearer <token>`` when ``router.admin_token_env`` names an
environment variable (its value stripped of surrounding whitespace, as a secret read from a
file ends in a newline); the token is compared in constant time and never logged. Errors are
OpenAI-style ``{"error": {"message", "type", "param", "code"}}`` with the right 4xx status.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from extproc.config.runtime import split_host_port
from extproc.workers import MAX_BODY_BYTES, WorkerError, WorkerRegistry

HealthSource = Callable[[], tuple[bool, dict[str, Any]]]
ReadinessSource = Callable[[], tuple[bool, str]]  # ready, and "ready"/"starting"/"draining"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str, param: str | None, code: str,
           headers: dict[str, str] | None = None, **extra: Any) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    error = {"message": message, "type": kind, "param": param, "code": code, **extra}
    if status == 401:
        headers = {**(headers or {}), "www-authenticate": "Bearer"}
    return web.json_response({"error": error}, status=status, headers=headers)


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own answers (unknown path, wrong method, ...) in the same OpenAI-style JSON
    as the handlers' errors, instead of its plain-text ``404: Not Found``."""
    try:
        return await handler(request)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        headers = {"allow": err.headers["allow"]} if "allow" in err.headers else None
        code = _HTTP_CODES.get(err.status, "invalid_request")
        message = f"{request.method} {request.path[:200]}: {err.reason.lower()}"
        return _error(err.status, message, None, code, headers)


class WorkerRoutes:
    """``/v1/workers`` over a :class:`WorkerRegistry`; writes checked against the token read
    from the environment variable ``token_env`` (when set)."""

    def __init__(self, registry: WorkerRegistry, token_env: str | None,
                 logger: logging.Logger) -> None:
        self._registry = registry
        self._token_env = token_env
        self._logger = logger
        # stripped like the header's value: a secret mounted from a file ends in a newline
        self._token = os.environ.get(token_env, "").strip() if token_env else ""
        if token_env and not self._token:
            logger.warning("admin token variable is empty or unset; worker writes are refused",
                           extra={"admin_token_env": token_env})

    @property
    def protected(self) -> bool:
        return bool(self._token_env)

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/workers", self._post)
        app.router.add_get("/v1/workers", self._list)
        app.router.add_get("/v1/workers/{worker_id}", self._get)
        app.router.add_delete("/v1/workers/{worker_id}", self._delete)

    def _denied(self, request: web.Request) -> web.Response | None:
        if not self._token_env:
            return None
        if not self._token:
            return _error(503, f"writes are disabled: {self._token_env} is not set",
                          None, "admin_token_unset")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self._token.encode()):
            # an audit trail for SREs: who tried, never what they sent
            self._logger.warning("worker write refused: missing or invalid bearer token",
                                 extra={"method": request.method, "path": request.path[:200],
                                        "peer": request.remote})
            return _error(401, "missing or invalid bearer token", None, "unauthorized")
        return None

    async def _post(self, request: web.Request) -> web.Response:
        if (denied := self._denied(request)) is not None:
            return denied
        media = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if media.lower() != "application/json" and not media.lower().endswith("+json"):
            return _error(415, f"content-type must be application/json, not {media[:100]!r}",
                          None, "unsupported_media_type")
        raw = await request.content.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            return _error(413, f"body larger than {MAX_BODY_BYTES} bytes", None,
                          "request_too_large")
        try:
            data = json.loads(raw, parse_int=_bounded_int)
        except _NumberTooLong as err:
            return _error(400, str(err), None, "invalid_json")
        except ValueError as err:
            return _error(400, f"body is not valid JSON: {err}", None, "invalid_json")
        try:
            worker, created = await self._registry.upsert(data)
        except WorkerError as err:
            return _worker_error(err)
        return web.json_response(worker.to_json(), status=201 if created else 200)

    async def _list(self, _: web.Request) -> web.Response:
        workers = [w.to_json() for w in self._registry.all()]
        return web.json_response({"object": "list", "data": workers})

    async def _get(self, request: web.Request) -> web.Response:
        worker = self._registry.get(request.match_info["worker_id"])
        if worker is None:
            return _error(404, "no such worker", "worker_id", "worker_not_found")
        return web.json_response(worker.to_json())

    async def _delete(self, request: web.Request) -> web.Response:
        if (denied := self._denied(request)) is not None:
            return denied
        try:
            worker = await self._registry.remove(request.match_info["worker_id"])
        except WorkerError as err:
            return _worker_error(err)
        if worker is None:
            return _error(404, "no such worker", "worker_id", "worker_not_found")
        return web.json_response({"id": worker.worker_id, "object": "worker", "deleted": True})


class _NumberTooLong(ValueError):
    pass


_MAX_INT_DIGITS = 32


def _bounded_int(text: str) -> int:
    """An integer of the body: a plain message for an absurdly long one (Python's own names
    ``sys.set_int_max_str_digits``, an interpreter setting no client should read about)."""
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise _NumberTooLong(f"body has an integer of more than {_MAX_INT_DIGITS} digits")
    return int(text)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _worker_error(err: WorkerError) -> web.Response:
    problems = [{"field": f, "reason": r} for f, r in err.problems]
    return _error(err.status, str(err)[:2000], err.field, err.code, errors=problems)


class AdminServer:
    def __init__(self, address: str, health: HealthSource, metrics: Callable[[], bytes],
                 workers: WorkerRoutes | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 readiness: ReadinessSource | None = None) -> None:
        self._address = address
        self._ssl = ssl_context
        self._health = health
        self._readiness = readiness or (lambda: (True, "ready"))
        self._metrics = metrics
        self._workers = workers
        self._runner: web.AppRunner | None = None
        self.port = 0

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024, middlewares=[_json_errors])
        app.router.add_get("/livez", self._get_livez)
        app.router.add_get("/readyz", self._get_readyz)
        app.router.add_get("/health", self._get_health)
        app.router.add_get("/metrics", self._get_metrics)
        if self._workers is not None:
            self._workers.add_to(app)
        return app

    async def _get_livez(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def _get_readyz(self, _: web.Request) -> web.Response:
        ready, status = self._readiness()
        return web.json_response({"status": status}, status=200 if ready else 503)

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
        site = web.TCPSite(self._runner, host, port, ssl_context=self._ssl)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        if self._workers is not None and not self._workers.protected and not _loopback(host):
            logging.getLogger("semantic_router").warning(
                "admin API listens beyond loopback without router.admin_token_env: anyone who "
                "reaches it can register workers", extra={"admin": self._address})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
