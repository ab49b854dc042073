"""Router lifecycle: build everything slow first, then serve; drain on stop.

Order matters: the admin API starts first (``/livez`` answers, ``/readyz`` says ``starting``),
classifiers load and warm up, the gRPC server starts NOT_SERVING, and only then do health
checks turn ready (with ``--with-envoy``, once the bundled Envoy's listener is ready too).
On stop (:func:`drain_and_stop`) the router reports not ready first (``/readyz`` and
``/health`` 503 ``draining``, gRPC health NOT_SERVING) while it keeps serving; the bundled
Envoy drains and in-flight requests (SSE streams included) get ``router.shutdown_grace_s``
to finish; then the router's servers stop and Envoy last. A port already in use fails
start-up with a one-line :class:`StartupError`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from extproc.admin import AdminServer, WorkerRoutes
from extproc.backends import BackendCatalog
from extproc.classifier_binding import build_engine, classifier_settings, learned_specs
from extproc.config import RouterConfig
from extproc.config.runtime import split_host_port
from extproc.context import build_state
from extproc.envoy_process import EnvoyError, EnvoyProcess, describe_exit
from extproc.envoy_render import bootstrap, to_yaml
from extproc.loop_stalls import StallMonitor
from extproc.metrics import RouterMetrics
from extproc.reload import ConfigReloader, with_state_dir
from extproc.security import (
    Secrets,
    backend_auth,
    envoy_secrets,
    grpc_server_credentials,
    server_ssl_context,
)
from extproc.servicer import ExtProcServicer, StateHolder, mark_serving, start_grpc_server
from extproc.signals.evaluator import LearnedEngine
from extproc.worker_endpoint import OwnEndpoint


class StartupError(RuntimeError):
    """The router cannot start as configured (e.g. a port in use); the message is one line."""


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
        self.backends.registry.own_endpoints = self.own_endpoints
        self._holder: StateHolder | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.stalls = StallMonitor()
        self.grpc_port = 0
        self.ready = False
        self.draining = False
        self.envoy_pending = False
        """True while a bundled Envoy is starting: not ready until its listener is."""
        self.started_at = 0.0

    @property
    def admin_port(self) -> int:
        return self._admin.port if self._admin else 0

    @property
    def grpc_address(self) -> str:
        host = self._grpc_address.rpartition(":")[0]
        return f"{host}:{self.grpc_port}"

    async def start(self) -> None:
        # ports, secrets and TLS files first, so that they fail before classifiers load
        for key, address in (("router.grpc", self._grpc_address),
                             ("router.admin", self._admin_address)):
            if (problem := _bind_problem(address)) is not None:
                what = "gRPC server" if key == "router.grpc" else "admin API"
                raise StartupError(f"cannot bind the {what} ({key}) to {address}: {problem}")
        backend_auth(self.config)
        tls = self.config.router.tls
        credentials = grpc_server_credentials(tls) if tls else None
        ssl_context = server_ssl_context(tls) if tls else None
        # The admin API opens first: /livez answers and /readyz says "starting" while the
        # classifiers load (workers are loaded before it, so a registration sticks).
        self.backends.load_workers()
        await self._start_admin(ssl_context)
        if self._engine is None:
            self._engine = await build_engine(self.config, self.logger, self.metrics)
        state = build_state(self.config, self.metrics, self._engine)
        self._holder = StateHolder(state)
        servicer = ExtProcServicer(self._holder, self.logger, self.stalls)
        self.stalls.start()
        # Backends before serving: the first probe round (bounded) decides /health and EDS.
        await self.backends.start()
        await self._start_grpc(servicer, credentials)
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

    async def _start_admin(self, ssl_context: ssl.SSLContext | None) -> None:
        workers = WorkerRoutes(
            self.backends.registry, self.config.router.admin_token_env, self.logger
        )
        self._admin = AdminServer(
            self._admin_address, self.health, self.metrics.exposition, workers,
            ssl_context, readiness=self.readiness,
        )
        try:
            await self._admin.start()
        except OSError as err:
            self._admin = None
            raise StartupError(f"cannot bind the admin API (router.admin) to "
                               f"{self._admin_address}: {_why(err)}") from None

    def own_endpoints(self) -> list[OwnEndpoint]:
        """The ports this router and its Envoy listen on (bound ones once known): a worker
        registered there would make a loop."""
        admin_host, admin_port = split_host_port(self._admin_address)
        grpc_host, grpc_port = split_host_port(self._grpc_address)
        listener = self.config.listener
        return [
            OwnEndpoint("admin API (router.admin)", admin_host, self.admin_port or admin_port),
            OwnEndpoint("ext_proc gRPC server (router.grpc)", grpc_host,
                        self.grpc_port or grpc_port),
            OwnEndpoint("Envoy listener (listener.address)", *split_host_port(listener.address)),
            OwnEndpoint("Envoy admin (listener.admin)", *split_host_port(listener.admin)),
        ]

    async def _start_grpc(self, servicer: ExtProcServicer,
                          credentials: grpc.ServerCredentials | None) -> None:
        failure = None
        try:
            self._server, self._health, self.grpc_port = await start_grpc_server(
                self._grpc_address,
                servicer,
                self.config.listener.max_request_bytes,
                (self.backends.eds.handler(),),
                credentials,
            )
        except (RuntimeError, OSError):  # grpc says "Failed to bind to address ..."
            failure = f"cannot bind the gRPC server (router.grpc) to {self._grpc_address}"
        if failure is not None:  # taken since start() checked the port
            # Raised here, not from the except block: grpc's traceback (which holds the
            # half-made grpc.aio server) is gone, so the server is freed while its shutdown
            # can still run on this loop; carried out of asyncio.run it would print
            # "Exception ignored ... Event loop is closed" at exit.
            await asyncio.sleep(0)
            why = _bind_problem(self._grpc_address) or "address not available"
            raise StartupError(f"{failure}: {why}")

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
        return self.backends.report(started=self.ready and not self.envoy_pending,
                                    bindings=bindings, draining=self.draining)

    def readiness(self) -> tuple[bool, str]:
        """``/readyz``: whether this router takes streams (classifiers loaded, gRPC serving,
        a bundled Envoy's listener up, not draining), whatever its backends' health:
        ``ready``, ``starting`` or ``draining``."""
        if self.draining:
            return False, "draining"
        if self.ready and not self.envoy_pending:
            return True, "ready"
        return False, "starting"

    async def begin_drain(self) -> None:
        """Report not ready from now on (``/readyz`` and ``/health`` 503 ``draining``, gRPC
        health NOT_SERVING) while everything keeps serving."""
        self.ready = False
        self.draining = True
        if self._health is not None:
            await mark_serving(self._health, False)

    async def stop(self, grace_s: float = 5.0) -> None:
        await self.begin_drain()
        await self.stalls.stop()
        await self.backends.stop()  # ends EDS streams so the server need not wait for Envoy
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._admin is not None:
            await self._admin.stop()
        if self._owns_engine and self._engine is not None and hasattr(self._engine, "close"):
            await self._engine.close()


def envoy_for(router: Router, config: RouterConfig,
              secrets: Secrets | None = None) -> EnvoyProcess:
    """A bundled Envoy wired to this router's actual gRPC port (see :func:`bundled_envoy`)."""
    return bundled_envoy(config, router.grpc_address, secrets)


def bundled_envoy(config: RouterConfig, grpc_address: str,
                  secrets: Secrets | None = None) -> EnvoyProcess:
    """The rendered bootstrap as a child Envoy. Its config (client keys included) goes to a
    0600 file in a private temporary directory. Its listeners do not share their port
    (``enable_reuse_port: false``): with Envoy's default SO_REUSEPORT, an Envoy left over
    from a killed router would silently take half the connections; now the new one fails to
    start instead. Its drain time is ``router.shutdown_grace_s``."""
    document = bootstrap(config, grpc_address=grpc_address, secrets=secrets)
    for listener in document["static_resources"]["listeners"]:
        listener["enable_reuse_port"] = False
    return EnvoyProcess(to_yaml(document), config.listener.admin,
                        drain_time_s=config.router.shutdown_grace_s)


async def _close_later(engine: Any, delay_s: float) -> None:
    await asyncio.sleep(delay_s)
    await engine.close()


def _why(err: OSError) -> str:
    return (err.strerror or str(err)).lower()


def _bind_problem(address: str) -> str | None:
    """Why ``address`` cannot be listened on (``address already in use``), or None. Bound
    with SO_REUSEADDR, as the servers do, so a port with connections in TIME_WAIT passes."""
    try:
        host, port = split_host_port(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as err:
        return _why(err)
    except ValueError as err:
        return str(err)
    return None


async def drain_and_stop(router: Router, envoy: EnvoyProcess | None, grace_s: float) -> None:
    """Shut down in order, bounded by ``grace_s`` plus a few seconds: the router reports not
    ready; the bundled Envoy drains its listeners and its active downstream requests (long
    SSE responses included) get up to ``grace_s`` to finish; the router's servers stop
    (streams still open on them get what is left of the grace); Envoy stops last."""
    started = time.monotonic()
    router.logger.info("draining", extra={"grace_s": grace_s})
    await router.begin_drain()
    if envoy is not None:
        active = await envoy.drain(grace_s)
        if active is not None:  # None: Envoy is gone already
            router.logger.log(
                logging.INFO if active == 0 else logging.WARNING,
                "envoy drained" if active == 0 else "envoy drain incomplete",
                extra={"active_requests": active,
                       "seconds": round(time.monotonic() - started, 2)})
    remaining = max(0.0, grace_s - (time.monotonic() - started))
    await router.stop(grace_s=remaining)
    if envoy is not None:
        await asyncio.to_thread(envoy.stop, 5.0)


async def _reload_on_request(requests: asyncio.Event, reloader: ConfigReloader | None,
                             logger: logging.Logger) -> None:
    while True:
        await requests.wait()
        requests.clear()
        if reloader is None:
            logger.warning("reload requested (SIGHUP), but serve runs the embedded defaults: "
                           "nothing to reload (start it with --config FILE)")
            continue
        await reloader.reload_now("SIGHUP")


async def _until_stopped(stop: asyncio.Event, envoy: EnvoyProcess | None) -> int | None:
    """Wait for ``stop``, or for Envoy to exit on its own: its exit status then."""
    waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop.wait())}
    if envoy is not None:
        waits.add(asyncio.ensure_future(envoy.wait_exit()))
    _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if stop.is_set() or envoy is None:
        return None
    return envoy.returncode


async def serve(config: RouterConfig, *, with_envoy: bool, stop: asyncio.Event,
                config_path: Path | None = None, state_dir: str | None = None,
                reload: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGINT/SIGTERM), re-reading the config
    file whenever ``reload`` is set (SIGHUP), then :func:`drain_and_stop`. ``state_dir``
    (``--state-dir``) overrides ``router.state_dir`` in this config and every reloaded one. Raises
    :class:`StartupError` (a port in use) or :class:`EnvoyError` (the bundled Envoy could
    not start, or exited on its own: the router stops, the caller exits non-zero)."""
    secrets = envoy_secrets(config) if with_envoy else None  # a missing key fails here
    config = with_state_dir(config, state_dir)  # --state-dir: also on every reload
    router = Router(config)
    router.envoy_pending = with_envoy  # /readyz is "starting" until Envoy's listener is up
    try:
        await router.start()
    except BaseException:
        await router.stop(grace_s=0)
        raise
    reloader = None
    if config_path is not None:
        reloader = ConfigReloader(config_path, config, router.apply_config, router.metrics,
                                  router.logger, state_dir=state_dir)
        reloader.start()
    reloads = (asyncio.create_task(_reload_on_request(reload, reloader, router.logger))
               if reload is not None else None)
    envoy = None
    try:
        if with_envoy:
            envoy = envoy_for(router, config, secrets)
            envoy.start()
            try:
                await envoy.wait_ready()
            except EnvoyError:
                router.logger.error("envoy failed to start",
                                    extra={"envoy_log_tail": envoy.logs(20)})
                raise
            router.envoy_pending = False
            router.logger.info("envoy ready", extra={
                "listener": config.listener.address, "admin": config.listener.admin,
                "pid": envoy.pid, "log": str(envoy.log_path)})
        code = await _until_stopped(stop, envoy)
        if envoy is not None and code is not None:
            router.logger.error("envoy exited unexpectedly; stopping the router", extra={
                "exit_code": code, "envoy_log_tail": envoy.logs(20)})
            raise EnvoyError(f"the bundled Envoy {describe_exit(code)} unexpectedly; "
                             "the router stopped too")
    finally:
        if reloads is not None:
            reloads.cancel()
            await asyncio.gather(reloads, return_exceptions=True)
        if reloader is not None:
            await reloader.stop()
        await drain_and_stop(router, envoy, router.config.router.shutdown_grace_s)


def with_ports(config: RouterConfig, listener: str, admin: str) -> RouterConfig:
    """A copy of ``config`` with other listener/admin addresses (tests, demo)."""
    return replace(
        config, listener=config.listener.model_copy(update={"address": listener, "admin": admin})
    )
