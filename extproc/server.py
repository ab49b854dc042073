"""Router lifecycle: build everything slow first, then serve; drain on stop.

Order matters: classifiers load and warm up, the gRPC server starts NOT_SERVING, the admin
API starts, and only then do health checks turn ready. On stop, health turns not-ready
first, in-flight streams get a grace period, then the servers close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from extproc.admin import AdminServer, WorkerRoutes
from extproc.backends import BackendCatalog
from extproc.classifier_binding import build_engine, classifier_settings, learned_specs
from extproc.config import RouterConfig
from extproc.context import build_state
from extproc.envoy_process import EnvoyProcess
from extproc.envoy_render import bootstrap, to_yaml
from extproc.metrics import RouterMetrics
from extproc.reload import ConfigReloader
from extproc.security import (
    Secrets,
    backend_auth,
    envoy_secrets,
    grpc_server_credentials,
    server_ssl_context,
)
from extproc.servicer import ExtProcServicer, StateHolder, mark_serving, start_grpc_server
from extproc.signals.evaluator import LearnedEngine


class Router:
    def __init__(
        self,
        config: RouterConfig,
        *,
        grpc_address: str | None = None,
        admin_address: str | None = None,
        engine: LearnedEngine | None = None,
        logger: logging.Logger | None = None,
        state_dir: str | Path | None = None,
    ) -> None:
        self.config = config
        self._grpc_address = grpc_address or config.router.grpc
        self._admin_address = admin_address or config.router.admin
        self._engine: Any = engine
        self._owns_engine = engine is None
        self.logger = logger or logging.getLogger("semantic_router")
        self.metrics = RouterMetrics()
        self._server: grpc.aio.Server | None = None
        self._health: Any = None
        self._admin: AdminServer | None = None
        state = state_dir if state_dir is not None else config.router.state_dir
        self.backends = BackendCatalog(
            config, state_dir=Path(state) if state else None, logger=self.logger
        )
        self.metrics.watch_backends(self.backends.readiness)
        self._holder: StateHolder | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.grpc_port = 0
        self.ready = False
        self.started_at = 0.0

    @property
    def admin_port(self) -> int:
        return self._admin.port if self._admin else 0

    @property
    def grpc_address(self) -> str:
        host = self._grpc_address.rpartition(":")[0]
        return f"{host}:{self.grpc_port}"

    async def start(self) -> None:
        # secrets and TLS files first, so a missing one fails before classifiers load
        backend_auth(self.config)
        tls = self.config.router.tls
        credentials = grpc_server_credentials(tls) if tls else None
        ssl_context = server_ssl_context(tls) if tls else None
        if self._engine is None:
            self._engine = await build_engine(self.config, self.logger, self.metrics)
        state = build_state(self.config, self.metrics, self._engine)
        self._holder = StateHolder(state)
        servicer = ExtProcServicer(self._holder, self.logger)
        # Backends before serving: the first probe round (bounded) decides /health and EDS.
        await self.backends.start()
        self._server, self._health, self.grpc_port = await start_grpc_server(
            self._grpc_address,
            servicer,
            self.config.listener.max_request_bytes,
            (self.backends.eds.handler(),),
            credentials,
        )
        workers = WorkerRoutes(
            self.backends.registry, self.config.router.admin_token_env, self.logger
        )
        self._admin = AdminServer(
            self._admin_address, self.health, self.metrics.exposition, workers,
            ssl_context,
        )
        await self._admin.start()
        await mark_serving(self._health, True)
        self.ready = True
        self.started_at = time.time()
        self.logger.info(
            "router ready",
            extra={
                "grpc": self.grpc_address,
                "admin_port": self.admin_port,
                "config": self.config.summary(),
            },
        )

    async def apply_config(self, config: RouterConfig) -> None:
        """Swap in a new config atomically. Classifiers are rebuilt (off the event loop,
        while the old ones keep serving) only when their settings changed; the old engine
        closes after a grace period so requests already classifying finish."""
        if self._holder is None:
            raise RuntimeError("the router is not started")
        engine = self._engine
        old_engine = None
        changed = (classifier_settings(config), learned_specs(config)) != (
            classifier_settings(self.config), learned_specs(self.config))
        if changed and self._owns_engine:
            engine = await build_engine(config, self.logger, self.metrics)
            old_engine = self._engine
        state = build_state(config, self.metrics, engine)
        self._holder.state = state
        self.config = config
        self._engine = engine
        if old_engine is not None and hasattr(old_engine, "close"):
            task = asyncio.create_task(_close_later(old_engine, 10.0))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Ready when started (classifiers bound) and the default model has a ready endpoint;
        the body lists classifiers and every model's endpoints with their last probe."""
        bindings = getattr(self._engine, "bindings", ()) or ()
        return self.backends.report(started=self.ready, bindings=bindings)

    async def stop(self, grace_s: float = 5.0) -> None:
        self.ready = False
        if self._health is not None:
            await mark_serving(self._health, False)
        await self.backends.stop()  # ends EDS streams so the server need not wait for Envoy
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._admin is not None:
            await self._admin.stop()
        if self._owns_engine and self._engine is not None and hasattr(self._engine, "close"):
            await self._engine.close()


def envoy_for(router: Router, config: RouterConfig,
              secrets: Secrets | None = None) -> EnvoyProcess:
    """A bundled Envoy wired to this router's actual gRPC port. Its config (client keys
    included) goes to a 0600 file in a private temporary directory."""
    document = bootstrap(config, grpc_address=router.grpc_address, secrets=secrets)
    return EnvoyProcess(to_yaml(document), config.listener.admin)


async def _close_later(engine: Any, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    await engine.close()


async def serve(config: RouterConfig, *, with_envoy: bool, stop: asyncio.Event,
                config_path: Path | None = None, state_dir: str | None = None) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGINT/SIGTERM), then drain: health
    turns not-ready first, in-flight streams (long SSE responses included) get
    ``router.shutdown_grace_s`` to finish, then everything stops."""
    secrets = envoy_secrets(config) if with_envoy else None  # a missing key fails here
    router = Router(config, state_dir=state_dir)
    await router.start()
    reloader = None
    if config_path is not None:
        reloader = ConfigReloader(config_path, config, router.apply_config, router.metrics,
                                  router.logger)
        reloader.start()
    envoy = None
    try:
        if with_envoy:
            envoy = envoy_for(router, config, secrets)
            envoy.start()
            await envoy.wait_ready()
            router.logger.info(
                "envoy ready",
                extra={
                    "listener": config.listener.address,
                    "admin": config.listener.admin,
                    "log": str(envoy.log_path),
                },
            )
        await stop.wait()
    finally:
        if reloader is not None:
            await reloader.stop()
        grace = router.config.router.shutdown_grace_s
        router.logger.info("draining", extra={"grace_s": grace})
        await router.stop(grace_s=grace)
        if envoy is not None:
            await asyncio.to_thread(envoy.stop)


def with_ports(config: RouterConfig, listener: str, admin: str) -> RouterConfig:
    """A copy of ``config`` with other listener/admin addresses (tests, demo)."""
    return replace(
        config, listener=config.listener.model_copy(update={"address": listener, "admin": admin})
    )
