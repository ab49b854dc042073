"""Backend readiness: ``GET /v1/models`` on every endpoint, on a schedule, with timeouts and
back-off (aiohttp client).

Contracts:

* One probe per distinct endpoint (scheme, host, port), shared by every model it serves.
* A model's endpoint is ready when its last probe listed the model's ``provider_model_id``;
  a model is ready when at least one endpoint is. Reasons are words an operator acts on:
  ``connection refused``, ``timeout after 2s``, ``HTTP 500``,
  ``lists [a, b] but not Qwen/Qwen3-0.6B``.
* A failing endpoint is probed again after ``interval_s * 2**(failures-1)``, capped at
  ``max_backoff_s``; a new endpoint (a registration) is probed at once.
* Each probe also resolves the host to an IP address, which EDS needs (Envoy does not resolve
  names in EDS endpoints).
* ``on_change`` runs on the event loop whenever a probe result differs from the previous one.
* Nothing here raises into the caller's loop: every probe failure becomes a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from extproc.config.schema import ProbeSettings

MAX_MODELS_BYTES = 1024 * 1024

EndpointKey = tuple[str, str, int]  # scheme, host, port


@dataclass(frozen=True, slots=True)
class EndpointRef:
    """One endpoint of one model: a config ``backend_ref`` or a registered worker."""

    model: str
    provider_model_id: str
    cluster: str
    name: str
    source: str  # "config" or "worker"
    scheme: str
    host: str
    port: int
    weight: int

    @property
    def key(self) -> EndpointKey:
        return (self.scheme, self.host, self.port)

    @property
    def models_url(self) -> str:
        return models_url(self.scheme, self.host, self.port)


def models_url(scheme: str, host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}/v1/models"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe: ``model_ids`` when the endpoint answered a model list, else ``error``."""

    model_ids: tuple[str, ...] | None
    error: str
    checked_at: float
    latency_ms: float
    address: str | None = None  # the resolved IP


@dataclass(frozen=True, slots=True)
class EndpointStatus:
    ref: EndpointRef
    result: ProbeResult | None

    @property
    def ready(self) -> bool:
        ids = self.result.model_ids if self.result else None
        return ids is not None and self.ref.provider_model_id in ids

    @property
    def reason(self) -> str:
        if self.result is None:
            return "not probed yet"
        ids = self.result.model_ids
        if ids is None:
            return self.result.error
        wanted = self.ref.provider_model_id
        if wanted in ids:
            return f"lists {wanted}"
        shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
        return f"lists [{shown}] but not {wanted}"

    def to_json(self, now: float | None = None) -> dict[str, object]:
        result = self.result
        now = time.time() if now is None else now
        return {
            "name": self.ref.name, "source": self.ref.source, "url": self.ref.models_url,
            "weight": self.ref.weight, "ready": self.ready, "reason": self.reason,
            "last_probe": None if result is None else {
                "ok": result.model_ids is not None,
                "models": list(result.model_ids or ()),
                "error": result.error or None,
                "age_s": round(max(0.0, now - result.checked_at), 1),
                "latency_ms": round(result.latency_ms, 1),
                "address": result.address,
            },
        }


def _connect_reason(err: aiohttp.ClientConnectorError) -> str:
    os_error = getattr(err, "os_error", None)
    if isinstance(err, getattr(aiohttp, "ClientConnectorDNSError", ())):
        return f"cannot resolve host '{err.host}'"
    if isinstance(os_error, ConnectionRefusedError) or getattr(os_error, "errno", None) == (
        errno.ECONNREFUSED
    ):
        return "connection refused"
    detail = getattr(os_error, "strerror", None) or str(os_error or err)
    return f"cannot connect: {detail}"


async def _read_capped(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The body up to ``limit`` bytes: ``read(n)`` returns only what is buffered (about
    128 KiB at a time), so read until EOF or the limit."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def fetch_models(session: aiohttp.ClientSession, url: str, timeout_s: float,
                       authorization: str | None = None) -> tuple[tuple[str, ...] | None, str]:
    """``GET url``: the listed model ids and "", or None and the reason in words."""
    headers = {"authorization": authorization} if authorization else None
    try:
        async with asyncio.timeout(timeout_s), session.get(
                url, allow_redirects=False, headers=headers) as resp:
            if resp.status != 200:
                return None, f"HTTP {resp.status} from {url}"
            raw = await _read_capped(resp.content, MAX_MODELS_BYTES + 1)
    except TimeoutError:
        return None, f"timeout after {timeout_s:g}s"
    except aiohttp.ClientConnectorError as err:
        return None, _connect_reason(err)
    except (aiohttp.ClientError, OSError) as err:
        return None, f"request failed: {type(err).__name__}: {err}"[:300]
    if len(raw) > MAX_MODELS_BYTES:
        return None, "model list larger than 1 MiB"
    try:
        body = json.loads(raw)
    except ValueError:
        return None, "response is not JSON (is this an OpenAI-compatible /v1/models?)"
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None, "response has no 'data' list (is this an OpenAI-compatible /v1/models?)"
    ids = tuple(d["id"] for d in data if isinstance(d, dict) and isinstance(d.get("id"), str))
    return ids, ""


async def resolve(host: str, port: int) -> str:
    """An IP address for ``host`` (itself when it is one); raises OSError."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return host
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first
    return str(infos[0][4][0])


@dataclass
class _State:
    result: ProbeResult | None = None
    failures: int = 0
    next_due: float = 0.0
    task: asyncio.Task[None] | None = None


@dataclass
class Prober:
    """Probes the endpoints given to :meth:`set_targets` until :meth:`stop`."""

    settings: ProbeSettings
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("semantic_router"))
    on_change: Callable[[], None] = lambda: None
    # ``Bearer <key>`` by model name (backend_refs' api_key_env): sent with each probe
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    _refs: tuple[EndpointRef, ...] = ()
    _states: dict[EndpointKey, _State] = field(default_factory=dict)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _session: aiohttp.ClientSession | None = None
    _loop_task: asyncio.Task[None] | None = None

    def set_targets(self, refs: Iterable[EndpointRef]) -> None:
        """Probe exactly these endpoints from now on; new ones are probed at once."""
        self._refs = tuple(refs)
        keys = {r.key for r in self._refs}
        for key in list(self._states):
            if key not in keys:
                state = self._states.pop(key)
                if state.task is not None:
                    state.task.cancel()
        for key in keys:
            self._states.setdefault(key, _State())
        self._wake.set()

    def statuses(self) -> list[EndpointStatus]:
        return [EndpointStatus(r, self._states[r.key].result if r.key in self._states else None)
                for r in self._refs]

    async def start(self) -> None:
        """Run the first round (bounded by ``startup_timeout_s``), then keep probing."""
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            connector=aiohttp.TCPConnector(limit=64, force_close=True),
            headers={"user-agent": "semantic-router-prober"},
        )
        first = self._schedule_due()
        if first and self.settings.startup_timeout_s > 0:
            await asyncio.wait(first, timeout=self.settings.startup_timeout_s)
        self._loop_task = asyncio.create_task(self._run(), name="backend-prober")

    async def stop(self) -> None:
        tasks = [s.task for s in self._states.values() if s.task is not None]
        if self._loop_task is not None:
            tasks.append(self._loop_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _schedule_due(self) -> Sequence[asyncio.Task[None]]:
        now = time.monotonic()
        started = []
        for key, state in self._states.items():
            if state.task is None and state.next_due <= now:
                state.task = asyncio.create_task(self._probe(key, state))
                started.append(state.task)
        return started

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            self._schedule_due()
            idle = [s.next_due for s in self._states.values() if s.task is None]
            delay = min(idle, default=time.monotonic() + 60) - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.05, delay))

    async def _probe(self, key: EndpointKey, state: _State) -> None:
        assert self._session is not None
        scheme, host, port = key
        started = time.perf_counter()
        try:
            try:
                address: str | None = await asyncio.wait_for(
                    resolve(host, port), self.settings.timeout_s)
            except (OSError, TimeoutError):
                address, ids, error = None, None, f"cannot resolve host '{host}'"
            else:
                auth = next((self.credentials[r.model] for r in self._refs
                             if r.key == key and r.model in self.credentials), None)
                ids, error = await fetch_models(
                    self._session, models_url(scheme, host, port), self.settings.timeout_s,
                    auth)
            result = ProbeResult(ids, error, time.time(),
                                 (time.perf_counter() - started) * 1000, address)
            self._record(key, state, result)
        finally:
            state.task = None
            self._wake.set()

    def _record(self, key: EndpointKey, state: _State, result: ProbeResult) -> None:
        if self._states.get(key) is not state:
            return  # removed while in flight
        previous, state.result = state.result, result
        interval = self.settings.interval_s
        if result.model_ids is None:
            state.failures += 1
            interval = min(self.settings.max_backoff_s, interval * 2 ** (state.failures - 1))
        else:
            state.failures = 0
        state.next_due = time.monotonic() + interval
        if previous is None or (previous.model_ids, previous.error, previous.address) != (
            result.model_ids, result.error, result.address
        ):
            self._log_change(key, result)
            self.on_change()

    def _log_change(self, key: EndpointKey, result: ProbeResult) -> None:
        for status in self.statuses():
            if status.ref.key == key:
                self.logger.log(
                    logging.INFO if status.ready else logging.WARNING,
                    "backend ready" if status.ready else "backend not ready",
                    extra={"model": status.ref.model, "endpoint": status.ref.name,
                           "url": status.ref.models_url, "reason": status.reason},
                )
