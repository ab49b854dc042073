"""Config hot reload: poll the config file; apply a valid edit atomically, keep serving the
old config on an invalid one (its YAML-path errors logged, the failure counted) or when the
file disappears (logged and counted once; the file is read again when it comes back).
:meth:`ConfigReloader.reload_now` (SIGHUP) reads the file at once through the same path, even
when it looks unchanged; checks never overlap.

Streams already open keep the config snapshot they started with; only new streams see the
new one. What Envoy itself was rendered with (listener, clusters) does not change here: a
reload that adds models or moves addresses also needs ``envoy render`` and an Envoy reload
(or EDS), and the reloader says so in its log line. Settings read once at start-up (ports,
TLS, the state directory, the config file's ``workers:``) are named in a warning when they
change. ``serve --state-dir`` overrides ``router.state_dir`` in every config read, so the
comparison is between effective values.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from extproc.config import ConfigError, RouterConfig, load_config
from extproc.metrics import RouterMetrics
from extproc.workers import static_workers

Apply = Callable[[RouterConfig], Awaitable[None]]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class ConfigReloader:
    def __init__(self, path: str | Path, current: RouterConfig, apply: Apply,
                 metrics: RouterMetrics, logger: logging.Logger,
                 interval_s: float = 1.0, state_dir: str | None = None) -> None:
        self._path = Path(path)
        self._state_dir = state_dir  # serve --state-dir, applied to every config read
        self._started = with_state_dir(current, state_dir)  # what Envoy and servers run
        self._started_envoy: str | None = None
        # now, not at the first reload: a workers directory may change before then
        self._started_restart = _restart_only(self._started)
        self._apply = apply
        self._metrics = metrics
        self._logger = logger
        self._interval = interval_s
        self._seen = _digest(self._path)
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # the poll and a SIGHUP must not apply at the same time

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="config-reloader")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.check_once()

    async def reload_now(self, trigger: str) -> str:
        """Read and apply the file now, whatever its digest (``applied`` or ``failed``): an
        operator's explicit reload (``trigger``, e.g. ``SIGHUP``), logged."""
        async with self._lock:
            self._logger.info("config reload requested",
                              extra={"config": str(self._path), "trigger": trigger})
            if _digest(self._path) is None:
                self._seen = None  # asked explicitly: say so again, however often
                return self._missing()
            self._seen = ""  # matches no digest: the file is applied
            return await self._check(trigger)

    def _missing(self) -> str:
        self._metrics.config_reload("failed")
        self._logger.error("config file is missing or unreadable; still serving the "
                           "previous config", extra={"config": str(self._path)})
        return "failed"

    async def check_once(self) -> str:
        """``unchanged``, ``applied`` or ``failed``."""
        async with self._lock:
            return await self._check("file watcher")

    async def _check(self, trigger: str) -> str:
        digest = _digest(self._path)
        if digest is None and self._seen is not None:
            # deleted or unreadable (a half-done deploy): say so once, keep serving
            self._seen = None
            return self._missing()
        if digest is None or digest == self._seen:
            return "unchanged"
        self._seen = digest
        try:
            config = with_state_dir(await asyncio.to_thread(load_config, self._path),
                                    self._state_dir)
            await self._apply(config)
        except ConfigError as err:
            self._metrics.config_reload("failed")
            self._logger.error("config reload failed; still serving the previous config",
                               extra={"config": str(self._path), "errors": list(err.errors)})
            return "failed"
        except Exception as err:  # e.g. a classifier that fails to load: keep serving
            self._metrics.config_reload("failed")
            self._logger.exception("config reload failed; still serving the previous config",
                                   extra={"config": str(self._path), "error": str(err)})
            return "failed"
        self._metrics.config_reload("ok")
        # against what the running Envoy and servers were started with, rendered once
        if self._started_envoy is None:
            self._started_envoy = _envoy_facing(self._started)
        envoy_changed = _envoy_facing(config) != self._started_envoy
        started = self._started_restart
        restart = [key for key, value in _restart_only(config).items() if value != started[key]]
        self._logger.info("config reloaded", extra={
            "config": str(self._path), "trigger": trigger, "summary": config.summary(),
            "envoy_config_changed": envoy_changed})
        if envoy_changed:
            self._logger.warning(
                "the rendered Envoy config changed: re-render it and reload Envoy "
                "(`semantic-router envoy render`; serve --with-envoy: restart)",
                extra={"config": str(self._path)})
        if restart:
            self._logger.warning("these settings take effect only after a restart",
                                 extra={"config": str(self._path), "settings": restart})
        return "applied"


def _envoy_facing(config: RouterConfig) -> str:
    """The Envoy config this router config renders to (client keys aside: they live in files
    and variables, not in the config): a change needs Envoy re-rendered and reloaded."""
    from extproc.envoy_render import bootstrap, to_yaml
    from extproc.security import Secrets

    return to_yaml(bootstrap(config, secrets=Secrets()))


def with_state_dir(config: RouterConfig, state_dir: str | None) -> RouterConfig:
    """``config`` with ``router.state_dir`` overridden (``serve --state-dir``) when given."""
    if not state_dir:
        return config
    router = config.router.model_copy(update={"state_dir": state_dir})
    return dataclasses.replace(config, router=router)


def _restart_only(config: RouterConfig) -> dict[str, object]:
    """Settings read once at start-up: a reload cannot apply them. ``workers`` is the config
    file's worker documents (a directory's files read now): the worker registry and its
    probes keep the ones it started with."""
    router = config.router
    documents = [w.document() for w in static_workers(config.source.workers, config.models)[0]]
    return {"router.grpc": router.grpc, "router.admin": router.admin,
            "router.admin_token_env": router.admin_token_env, "router.probe": router.probe,
            "router.tls": router.tls, "router.state_dir": router.state_dir,
            "workers": json.dumps(documents, sort_keys=True)}
