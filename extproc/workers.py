"""Worker registrations: validation, the registry and its crash-safe state file.

A worker is one OpenAI-compatible runtime (vLLM, SGLang, ...) that serves some configured
models. It registers with the JSON shape::

    {"worker_id": "cuda-01", "worker_type": "nvidia-gpu", "runtime": "cuda",
     "runtime_endpoint": "http://cuda-worker:8000/v1", "supported_models": ["acme/model-1"],
     "runtime_config": {"transport": "openai"}, "gpu_metadata": {...}, "runtime_metadata": {...}}

Contracts:

* :func:`parse_worker` accepts a document or raises :class:`WorkerError` listing every problem
  as ``(field, reason)``; it never returns a worker with unknown models, a non-http(s)
  endpoint, oversized fields, or metadata that looks like a credential, a GPU serial number
  or a UUID (the router stores and serves metadata; it must never hold secrets). Identifiers
  must match whole (a trailing newline is refused); the endpoint's host is an IPv4 address,
  an IPv6 literal without a zone id, or a DNS name, and its port 1-65535.
* Envoy forwards ``/v1/...`` paths unchanged, so ``runtime_endpoint``'s path must be ``/v1``;
  an empty path or ``/`` (and a trailing ``/``) is read as ``/v1`` and the endpoint stored and
  shown as ``<scheme>://<host>[:<port>]/v1``. The prober reads
  ``<scheme>://<host>:<port>/v1/models``.
* :class:`WorkerRegistry` keeps config-defined workers (read-only) and API-registered ones;
  the latter are written to ``<state_dir>/workers.json`` (see :mod:`extproc.worker_state`:
  crash-safe, and an unreadable file is moved aside, not overwritten).
* Two workers, or a worker and a config ``backend_refs`` entry, never share an endpoint
  (host and port) for the same model: Envoy would see one endpoint twice. Such a registration
  is refused with 409 ``endpoint_in_use``; the same worker_id may re-register (update) at its
  own endpoint.
* Endpoints the router must never call are 400s (:mod:`extproc.worker_endpoint`): link-local,
  unspecified, multicast and cloud-metadata hosts, and the router's own ports
  (``own_endpoints``), which would make a loop.
* At most :data:`MAX_WORKERS` workers. Registrations never expire: a worker DELETEs itself
  (the prober only takes an unreachable one out of routing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from extproc.config.runtime import ModelTarget
from extproc.secretscan import key_reason, secret_reason
from extproc.worker_endpoint import OwnEndpoint, check_endpoint, self_loop
from extproc.worker_state import read_saved, write_atomically

MAX_BODY_BYTES = 16 * 1024
MAX_WORKERS = 256
MAX_MODELS = 32
MAX_METADATA_KEYS = 32
MAX_VALUE_CHARS = 256
STATE_FILE = "workers.json"

# Used with fullmatch: "$" would also accept a trailing newline.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_META_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_REQUIRED = ("worker_id", "worker_type", "runtime", "runtime_endpoint", "supported_models",
             "runtime_config")
_OPTIONAL = ("gpu_metadata", "runtime_metadata", "weight")
_METADATA = ("runtime_config", "gpu_metadata", "runtime_metadata")

class WorkerError(ValueError):
    """A rejected registration: ``problems`` lists ``(field, reason)``; ``status`` is the
    HTTP status the admin API answers with."""

    def __init__(self, problems: Sequence[tuple[str, str]], status: int = 400,
                 code: str = "invalid_worker") -> None:
        self.problems = tuple(problems)
        self.status = status
        self.code = code
        super().__init__("; ".join(f"{f}: {r}" for f, r in self.problems))

    @property
    def field(self) -> str | None:
        return self.problems[0][0] if self.problems else None


@dataclass(frozen=True, slots=True)
class Worker:
    """A validated registration; ``models`` are the configured model names it serves."""

    worker_id: str
    worker_type: str
    runtime: str
    runtime_endpoint: str
    scheme: str
    host: str
    port: int
    supported_models: tuple[str, ...]
    models: tuple[str, ...]
    runtime_config: Mapping[str, Any]
    gpu_metadata: Mapping[str, Any]
    runtime_metadata: Mapping[str, Any]
    weight: int = 1
    source: str = "api"
    registered_at: float = 0.0
    updated_at: float = 0.0

    def document(self) -> dict[str, Any]:
        """The registration as submitted (what is persisted and re-validated on load)."""
        return {
            "worker_id": self.worker_id, "worker_type": self.worker_type,
            "runtime": self.runtime, "runtime_endpoint": self.runtime_endpoint,
            "supported_models": list(self.supported_models),
            "runtime_config": dict(self.runtime_config), "gpu_metadata": dict(self.gpu_metadata),
            "runtime_metadata": dict(self.runtime_metadata), "weight": self.weight,
        }

    def to_json(self) -> dict[str, Any]:
        return {**self.document(), "models": list(self.models), "source": self.source,
                "registered_at": self.registered_at, "updated_at": self.updated_at}


def _check_metadata(name: str, value: Any, problems: list[tuple[str, str]]) -> None:
    if not isinstance(value, dict):
        problems.append((name, "must be a JSON object"))
        return
    if len(value) > MAX_METADATA_KEYS:
        problems.append((name, f"at most {MAX_METADATA_KEYS} keys"))
        return
    for key, item in value.items():
        path = f"{name}.{key}"
        if not _META_KEY.fullmatch(key):
            problems.append((path, "keys are 1-64 characters of letters, digits, '_', '.', '-'"))
        elif (reason := key_reason(key)) is not None:
            problems.append((path, reason))
        elif not isinstance(item, str | int | float | bool) and item is not None:
            problems.append((path, "values are strings, numbers, booleans or null"))
        elif isinstance(item, str):
            if len(item) > MAX_VALUE_CHARS:
                problems.append((path, f"at most {MAX_VALUE_CHARS} characters"))
            elif (reason := secret_reason(item)) is not None:
                problems.append((path, f"{reason}; metadata must not carry secrets or IDs"))


def _resolve_models(value: Any, models: Mapping[str, ModelTarget],
                    problems: list[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if (not isinstance(value, list) or not value or len(value) > MAX_MODELS
            or not all(isinstance(v, str) for v in value)):
        problems.append(("supported_models", f"must be a list of 1-{MAX_MODELS} model names"))
        return (), ()
    resolved: list[str] = []
    for i, name in enumerate(value):
        matches = [t.name for t in models.values() if name in (t.name, t.provider_model_id)]
        if not matches:
            known = ", ".join(sorted(models))
            problems.append((f"supported_models[{i}]",
                             f"unknown model '{name[:128]}' (configured: {known})"))
        resolved += [m for m in matches if m not in resolved]
    return tuple(value), tuple(resolved)


def _check_protocol(scheme: str, resolved: Sequence[str], models: Mapping[str, ModelTarget],
                    problems: list[tuple[str, str]]) -> None:
    # One Envoy cluster per model speaks one protocol (TLS is a cluster setting).
    for model in resolved:
        wanted = {e.protocol for e in models[model].endpoints}
        if scheme and wanted and scheme not in wanted:
            problems.append(("runtime_endpoint",
                             f"{scheme} endpoint, but model '{model}' is served over "
                             f"{'/'.join(sorted(wanted))}"))


def parse_worker(data: Any, models: Mapping[str, ModelTarget], *, source: str = "api",
                 now: float | None = None) -> Worker:
    """Validate one registration document against the configured ``models``."""
    if not isinstance(data, dict):
        raise WorkerError([("body", "expected a JSON object")])
    problems: list[tuple[str, str]] = []
    for key in data:
        if key not in _REQUIRED and key not in _OPTIONAL:
            problems.append((str(key)[:64], "unknown field"))
    problems += [(key, "required") for key in _REQUIRED if key not in data]
    if problems:
        raise WorkerError(problems)
    for key, pattern in (("worker_id", _ID), ("worker_type", _WORD), ("runtime", _WORD)):
        if not isinstance(data[key], str) or not pattern.fullmatch(data[key]):
            problems.append((key, f"must match ^{pattern.pattern}$"))
    endpoint, scheme, host, port = check_endpoint(data["runtime_endpoint"], problems)
    supported, resolved = _resolve_models(data["supported_models"], models, problems)
    for name in _METADATA:
        _check_metadata(name, data.get(name, {}), problems)
    config = data["runtime_config"]
    if isinstance(config, dict) and config.get("transport") != "openai":
        problems.append(("runtime_config.transport", "must be \"openai\""))
    weight = data.get("weight", 1)
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 128:
        problems.append(("weight", "must be an integer 1-128"))
    _check_protocol(scheme, resolved, models, problems)
    if problems:
        raise WorkerError(problems)
    stamp = time.time() if now is None else now
    return Worker(
        data["worker_id"], data["worker_type"], data["runtime"], endpoint, scheme, host, port,
        supported, resolved, dict(config), dict(data.get("gpu_metadata", {})),
        dict(data.get("runtime_metadata", {})), weight, source, stamp, stamp)


def static_workers(source: list[dict[str, Any]] | str,
                   models: Mapping[str, ModelTarget]) -> tuple[list[Worker], list[str]]:
    """Workers from the config's ``workers:`` list (or directory of ``*.json`` files), and
    every problem as ``workers[i].field: reason`` (``workers: dir/x.json: ...`` for files)."""
    documents: list[tuple[str, Any]] = []
    errors: list[str] = []
    if isinstance(source, str):
        try:
            files = sorted(Path(source).glob("*.json"))
        except OSError as err:
            return [], [f"workers: cannot read directory '{source}': {err}"]
        if not Path(source).is_dir():
            return [], [f"workers: '{source}' is not a directory"]
        for path in files:
            try:
                documents.append((f"workers: {path}: ", json.loads(path.read_text("utf-8"))))
            except (OSError, ValueError) as err:
                errors.append(f"workers: {path}: cannot read JSON: {err}")
    else:
        documents = [(f"workers[{i}].", doc) for i, doc in enumerate(source)]
    workers: list[Worker] = []
    seen: set[str] = set()
    for prefix, doc in documents:
        try:
            worker = parse_worker(doc, models, source="config", now=0.0)
        except WorkerError as err:
            errors += [f"{prefix}{f}: {r}" for f, r in err.problems]
            continue
        if worker.worker_id in seen:
            errors.append(f"{prefix}worker_id: duplicate '{worker.worker_id}'")
        seen.add(worker.worker_id)
        workers.append(worker)
    return workers, errors


@dataclass
class WorkerRegistry:
    """Registered workers by id; ``on_change`` runs after every change (the catalog re-targets
    the prober and EDS). API writes are serialised and persisted before they are answered."""

    models: Mapping[str, ModelTarget]
    state_dir: Path | None = None
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("semantic_router"))
    on_change: Callable[[], None] = lambda: None
    own_endpoints: Callable[[], Iterable[OwnEndpoint]] = lambda: ()
    """The router's own ports (read at each registration: some are bound after start-up)."""
    _workers: dict[str, Worker] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def state_path(self) -> Path | None:
        return self.state_dir / STATE_FILE if self.state_dir is not None else None

    def load(self, configured: Sequence[Worker] = ()) -> None:
        """Config workers, then the state file's (re-validated; invalid ones are logged with
        their worker_id and dropped, e.g. a model removed from the config; an unreadable
        file is moved aside)."""
        self._workers = {w.worker_id: w for w in configured}
        path = self.state_path
        for entry in read_saved(path, self.logger) if path is not None else []:
            try:
                worker = parse_worker(entry.get("worker"), self.models,
                                      now=float(entry.get("registered_at", 0.0)))
                if worker.worker_id not in self._workers:
                    self._check_not_self(worker)
                    self._check_endpoint_free(worker)
            except (WorkerError, AttributeError, TypeError, ValueError) as err:
                self.logger.warning("dropping saved worker", extra={
                    "worker_id": _saved_id(entry), "error": str(err)})
                continue
            if worker.worker_id not in self._workers:
                updated = float(entry.get("updated_at", worker.registered_at))
                self._workers[worker.worker_id] = _with_times(worker, worker.registered_at,
                                                              updated)

    def _check_not_self(self, worker: Worker) -> None:
        """Raise 400 when ``worker`` points at one of the router's own ports (a loop)."""
        if (loop := self_loop(worker.host, worker.port, self.own_endpoints())) is not None:
            raise WorkerError([("runtime_endpoint", loop)])

    def _check_endpoint_free(self, worker: Worker) -> None:
        """Raise 409 when a config backend or another worker serves one of ``worker``'s
        models at its host:port (Envoy would get that endpoint twice for one cluster)."""
        where = (worker.host.lower(), worker.port)
        for model in worker.models:
            for backend in self.models[model].endpoints:
                if (backend.host.lower(), backend.port) == where:
                    self._in_use(worker, model, f"config backend '{backend.name}'")
        for other in self._workers.values():
            if other.worker_id == worker.worker_id or (other.host, other.port) != (
                    worker.host, worker.port):
                continue
            shared = [m for m in worker.models if m in other.models]
            if shared:
                self._in_use(worker, shared[0], f"worker '{other.worker_id}'")

    @staticmethod
    def _in_use(worker: Worker, model: str, owner: str) -> None:
        host = f"[{worker.host}]" if ":" in worker.host else worker.host
        raise WorkerError([("runtime_endpoint", f"{host}:{worker.port} already serves model "
                            f"'{model}' as {owner}")], 409, "endpoint_in_use")

    def all(self) -> list[Worker]:
        return sorted(self._workers.values(), key=lambda w: w.worker_id)

    def get(self, worker_id: str) -> Worker | None:
        return self._workers.get(worker_id)

    async def upsert(self, data: Any) -> tuple[Worker, bool]:
        """Register or update; returns the worker and whether it is new."""
        worker = parse_worker(data, self.models)
        async with self._lock:
            previous = self._workers.get(worker.worker_id)
            if previous is not None and previous.source == "config":
                raise WorkerError([("worker_id", "defined in the config file; edit it there")],
                                  409, "worker_is_static")
            self._check_not_self(worker)
            self._check_endpoint_free(worker)
            if previous is None and len(self._workers) >= MAX_WORKERS:
                raise WorkerError([("worker_id", (
                    f"at most {MAX_WORKERS} workers (config and registered); registrations "
                    "never expire: DELETE /v1/workers/{worker_id} for workers that are gone "
                    "to free space"))], 409, "too_many_workers")
            if previous is not None:
                worker = _with_times(worker, previous.registered_at, worker.updated_at)
            self._workers[worker.worker_id] = worker
            await self._persist(worker.worker_id, previous)
        self.logger.info("worker registered" if previous is None else "worker updated",
                         extra={"worker_id": worker.worker_id, "models": list(worker.models),
                                "endpoint": worker.runtime_endpoint})
        self.on_change()
        return worker, previous is None

    async def remove(self, worker_id: str) -> Worker | None:
        async with self._lock:
            previous = self._workers.get(worker_id)
            if previous is None:
                return None
            if previous.source == "config":
                raise WorkerError([("worker_id", "defined in the config file; edit it there")],
                                  409, "worker_is_static")
            del self._workers[worker_id]
            await self._persist(worker_id, previous)
        self.logger.info("worker removed", extra={"worker_id": worker_id})
        self.on_change()
        return previous

    async def _persist(self, worker_id: str, previous: Worker | None) -> None:
        path = self.state_path
        if path is None:
            return
        entries = [{"worker": w.document(), "registered_at": w.registered_at,
                    "updated_at": w.updated_at} for w in self.all() if w.source == "api"]
        payload = json.dumps({"version": 1, "workers": entries}, indent=1).encode()
        try:
            await asyncio.to_thread(write_atomically, path, payload)
        except OSError as err:
            # Roll back so memory matches what a restart would load.
            if previous is None:
                self._workers.pop(worker_id, None)
            else:
                self._workers[worker_id] = previous
            raise WorkerError([("state_dir", f"cannot save registrations: {err.strerror}")],
                              503, "state_not_saved") from err


def _saved_id(entry: Any) -> str | None:
    """The worker_id of a saved entry, when it has a string one (for the log)."""
    doc = entry.get("worker") if isinstance(entry, dict) else None
    value = doc.get("worker_id") if isinstance(doc, dict) else None
    return value[:64] if isinstance(value, str) else None


def _with_times(worker: Worker, registered: float, updated: float) -> Worker:
    return replace(worker, registered_at=registered, updated_at=updated)
