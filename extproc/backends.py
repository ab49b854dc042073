"""The backend catalog: config endpoints plus registered workers, their readiness (prober) and
the endpoint table Envoy reads over EDS; also the ``/health`` report.

Contracts:

* The endpoints of a model are its config ``backend_refs`` plus every registered worker that
  serves it (one endpoint per worker and model, weight from the worker).
* The EDS table holds, per model cluster, only endpoints that are ready (their last probe
  listed the model's provider model id) at their resolved IP; weights carry over. An
  endpoint that becomes unready or is deregistered leaves it.
* An endpoint counts towards its model's readiness (``/health``, ``status``,
  ``semantic_router_model_ready``) only when Envoy can route to it: config ``backend_refs``
  and config-file workers (``workers:``, rendered into Envoy's static clusters) always;
  API-registered workers only with ``endpoint_discovery: eds``. With ``static`` those are
  listed as registered but ``not routable with static discovery``.
* ``/health`` is ready (HTTP 200) when the router is started, its classifiers are bound and
  the default model has a ready endpoint; the body says why not otherwise (``status`` is
  ``ready``, ``not_ready`` or, once the router stops, ``draining``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from extproc.config import RouterConfig
from extproc.eds import EdsService, EndpointTable, LbHost
from extproc.prober import EndpointRef, EndpointStatus, Prober
from extproc.security import backend_auth
from extproc.workers import WorkerRegistry, static_workers


def config_refs(config: RouterConfig) -> list[EndpointRef]:
    return [
        EndpointRef(t.name, t.provider_model_id, t.cluster, e.name, "config", e.protocol,
                    e.host, e.port, e.weight)
        for t in config.models.values() for e in t.endpoints
    ]


class BackendCatalog:
    def __init__(self, config: RouterConfig, *, state_dir: Path | None,
                 logger: logging.Logger) -> None:
        self.config = config
        self.logger = logger
        self.table = EndpointTable()
        self.eds = EdsService(self.table, logger)
        self.prober = Prober(config.router.probe, logger, self._on_probe)
        self.registry = WorkerRegistry(config.models, state_dir, logger, self._on_workers)

    def load_workers(self) -> None:
        """Load workers (config, then the state file): before the admin API opens, so a
        registration made while the classifiers load is not overwritten."""
        configured, errors = static_workers(self.config.source.workers, self.config.models)
        for error in errors:  # the loader reported these already; files may have changed
            self.logger.error("config worker skipped", extra={"error": error})
        self.registry.load(configured)
        if self.registry.state_dir is None:
            self.logger.info("worker registrations are kept in memory only "
                             "(set router.state_dir or --state-dir to persist them)")

    async def start(self) -> None:
        """Run the first probe round (after :meth:`load_workers`), then keep probing."""
        self.prober.credentials = backend_auth(self.config)
        self.prober.set_targets(self.refs())
        await self.prober.start()
        self._sync_table()

    async def stop(self) -> None:
        self.eds.close()
        await self.prober.stop()

    def refs(self) -> list[EndpointRef]:
        refs = config_refs(self.config)
        for worker in self.registry.all():
            for name in worker.models:
                target = self.config.models[name]
                refs.append(EndpointRef(name, target.provider_model_id, target.cluster,
                                        worker.worker_id, "worker", worker.scheme,
                                        worker.host, worker.port, worker.weight))
        return refs

    def _on_workers(self) -> None:
        self.prober.set_targets(self.refs())
        self._sync_table()

    def _on_probe(self) -> None:
        self._sync_table()

    def _sync_table(self) -> None:
        hosts: dict[str, set[LbHost]] = {t.cluster: set() for t in self.config.models.values()}
        for status in self.prober.statuses():
            result = status.result
            if status.ready and result is not None and result.address is not None:
                hosts[status.ref.cluster].add(
                    LbHost(result.address, status.ref.port, status.ref.weight))
        if self.table.update({c: tuple(h) for c, h in hosts.items()}):
            self.logger.info("endpoints changed", extra={
                "version": self.table.version,
                "endpoints": {c: len(h) for c, h in self.table.assignments.items()}})

    def routable(self, ref: EndpointRef) -> bool:
        """Whether Envoy can send this endpoint traffic: config endpoints and config-file
        workers are rendered into its clusters; API-registered workers reach it only over
        EDS."""
        if ref.source != "worker" or self.config.router.endpoint_discovery == "eds":
            return True
        worker = self.registry.get(ref.name)
        return worker is not None and worker.source == "config"

    def readiness(self) -> tuple[dict[str, bool], dict[str, int], int]:
        """Per model: ready, and how many routable endpoints are ready; plus the worker
        count (read at each metrics scrape)."""
        ready_endpoints = dict.fromkeys(self.config.models, 0)
        for status in self.prober.statuses():
            if status.ready and self.routable(status.ref) and status.ref.model in ready_endpoints:
                ready_endpoints[status.ref.model] += 1
        ready = {model: count > 0 for model, count in ready_endpoints.items()}
        return ready, ready_endpoints, len(self.registry.all())

    def _endpoint_json(self, status: EndpointStatus, now: float) -> dict[str, Any]:
        shown = status.to_json(now)
        shown["routable"] = self.routable(status.ref)
        if not shown["routable"]:
            probe = "probe ok" if status.ready else f"probe: {status.reason}"
            shown["ready"] = False
            shown["reason"] = (f"registered, but not routable with static discovery (set "
                               f"router.endpoint_discovery: eds); {probe}")
        return shown

    def report(self, *, started: bool, bindings: Sequence[Any],
               draining: bool = False) -> tuple[bool, dict[str, Any]]:
        """The ``/health`` body and whether it means ready."""
        now = time.time()
        statuses = self.prober.statuses()
        models: dict[str, Any] = {}
        for target in self.config.models.values():
            mine: list[EndpointStatus] = [s for s in statuses if s.ref.model == target.name]
            endpoints = [self._endpoint_json(s, now) for s in mine]
            models[target.name] = {
                "ready": any(e["ready"] for e in endpoints),
                "provider_model_id": target.provider_model_id,
                "cluster": target.cluster,
                "endpoints": endpoints,
            }
        default = self.config.default_model.name
        reasons = []
        if draining:
            reasons.append("draining: the router is shutting down")
        elif not started:
            reasons.append("router not started (classifiers loading, the bundled Envoy starting, "
                           "or stopping)")
        if not models[default]["ready"]:
            why = "; ".join(f"{e['name']}: {e['reason']}" for e in models[default]["endpoints"])
            reasons.append(f"default model '{default}' has no ready endpoint ({why})")
        ready = not reasons
        body = {
            "status": "ready" if ready else "draining" if draining else "not_ready",
            "reasons": reasons,
            "default_model": default,
            "classifiers": [
                {"classifier": b.classifier, "model": b.model, "device": b.device,
                 "dtype": b.dtype, "execution": b.execution} for b in bindings
            ],
            "models": models,
            "workers": len(self.registry.all()),
            "endpoint_discovery": self.config.router.endpoint_discovery,
        }
        return ready, body
