"""Router metrics in Prometheus conventions, one registry per router (no globals).

Labels are bounded: outcomes, reasons and error types are fixed sets; decision and model
names come from config, never from clients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)


STREAM_STATUSES = ("ok", "invalid_message", "internal_error", "cancelled")


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # bounded by config (decisions x models) and the fixed outcome/phase sets
        self._routed_children: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}
        self._phase_children: dict[str, Any] = {}
        self._stream_children: dict[str, Any] = {}
        self._requests = Counter(
            "semantic_router_requests",
            "Requests by outcome (routed, explicit, default, unclassified, blocked, shadow, "
            "rejected) and reason; each request counted once",
            ["outcome", "reason"],
            registry=self.registry,
        )
        self._decisions = Counter(
            "semantic_router_decisions",
            "Routed requests by decision and target model",
            ["decision", "model"],
            registry=self.registry,
        )
        self._phase = Histogram(
            "semantic_router_extproc_phase_seconds",
            "Time to answer one ext_proc message",
            ["phase"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._signal_errors = Counter(
            "semantic_router_signal_errors",
            "Signals that failed (a classifier or a PII/language scan timed out or broke), "
            "by kind and the on_error outcome applied",
            ["signal", "kind", "outcome"],
            registry=self.registry,
        )
        self._reloads = Counter(
            "semantic_router_config_reloads", "Config reloads by result (ok, failed)",
            ["result"], registry=self.registry)
        for result in ("ok", "failed"):  # exported at 0, so increase() sees the first failure
            self._reloads.labels(result)
        self._shadowed = Counter(
            "semantic_router_shadow_decisions", "Shadow decisions that matched (not applied)",
            ["decision"], registry=self.registry)
        self._streams = Counter(
            "semantic_router_extproc_streams",
            "ext_proc streams by how they ended (ok, invalid_message, internal_error, "
            "cancelled: Envoy reset the stream, e.g. at its message timeout)",
            ["status"],
            registry=self.registry,
        )
        for status in STREAM_STATUSES:  # exported at 0, so increase() sees the first one
            self._stream_children[status] = self._streams.labels(status)

        self._classifier_seconds = Histogram(
            "semantic_router_classifier_seconds",
            "Classifier time per request by stage (tokenize, queue, inference)",
            ["classifier", "stage"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self._batch_size = Histogram(
            "semantic_router_classifier_batch_size", "Texts per classifier forward pass",
            ["classifier"], buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=self.registry)
        self._windows = Histogram(
            "semantic_router_classifier_windows",
            "Encoder windows scored per request (long prompts are split, not truncated)",
            ["signal"], buckets=(1, 2, 3, 4, 6, 8, 16, 32, 64), registry=self.registry)
        self._truncations = Counter(
            "semantic_router_classifier_truncations",
            "Texts longer than the classifier's window bound (the rest was not scored)",
            ["classifier"], registry=self.registry)
        self._long_prompts = Counter(
            "semantic_router_classifier_long_prompts",
            "Long texts by path: scored by the student encoder alone, or escalated to the full "
            "encoder after the student flagged them", ["classifier", "path"],
            registry=self.registry)

    def classifier_timing(self, classifier: str, stage: str, seconds: float) -> None:
        self._classifier_seconds.labels(classifier, stage).observe(seconds)

    def classifier_batch(self, classifier: str, size: int) -> None:
        self._batch_size.labels(classifier).observe(size)

    def classifier_windows(self, signal: str, windows: int) -> None:
        self._windows.labels(signal).observe(windows)

    def classifier_truncated(self, classifier: str) -> None:
        self._truncations.labels(classifier).inc()

    def classifier_long_prompt(self, classifier: str, path: str) -> None:
        self._long_prompts.labels(classifier, path).inc()

    def routed(self, outcome: str, reason: str, decision: str, model: str) -> None:
        # label children are cached: labels() costs a lock and a tuple build per call
        key = (outcome, reason, decision, model)
        children = self._routed_children.get(key)
        if children is None:
            children = (self._requests.labels(outcome, reason),
                        self._decisions.labels(decision, model))
            self._routed_children[key] = children
        children[0].inc()
        children[1].inc()

    def config_reload(self, result: str) -> None:
        self._reloads.labels(result).inc()

    def shadowed(self, decision: str) -> None:
        self._shadowed.labels(decision).inc()

    def rejected(self, error_type: str) -> None:
        self._requests.labels("rejected", error_type).inc()

    def phase_seconds(self, phase: str, seconds: float) -> None:
        child = self._phase_children.get(phase)
        if child is None:
            child = self._phase_children[phase] = self._phase.labels(phase)
        child.observe(seconds)

    def signal_error(self, signal: str, kind: str, outcome: str) -> None:
        self._signal_errors.labels(signal, kind, outcome).inc()

    def stream_ended(self, status: str) -> None:
        child = self._stream_children.get(status)
        if child is None:  # a fixed set (STREAM_STATUSES)
            child = self._stream_children[status] = self._streams.labels(status)
        child.inc()

    def watch_backends(self, source: BackendSource) -> None:
        """Backend readiness and worker counts, read from ``source`` at each scrape."""
        self.registry.register(_BackendCollector(source))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


BackendSource = Callable[[], tuple[dict[str, bool], dict[str, int], int]]


class _BackendCollector(Collector):
    def __init__(self, source: BackendSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        ready, endpoints, workers = self._source()
        model_ready = GaugeMetricFamily(
            "semantic_router_model_ready", "1 when at least one endpoint of the model lists "
            "its provider model id in /v1/models", labels=["model"])
        ready_endpoints = GaugeMetricFamily(
            "semantic_router_model_ready_endpoints", "Endpoints of the model that are ready",
            labels=["model"])
        for model, is_ready in sorted(ready.items()):
            model_ready.add_metric([model], 1.0 if is_ready else 0.0)
            ready_endpoints.add_metric([model], float(endpoints.get(model, 0)))
        yield model_ready
        yield ready_endpoints
        yield GaugeMetricFamily("semantic_router_workers", "Registered workers", value=workers)
