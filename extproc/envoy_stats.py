"""Traffic as Envoy saw it, for ``semantic-router status``: per model (Envoy cluster) the
request count, 4xx/5xx and p50/p99 upstream latency, and per decision (virtual cluster) its
share of routed requests, read from Envoy's admin ``GET /stats?format=json``.

A request counts once it completes (``upstream_rq_completed``): that includes Envoy's own 503
when a backend cannot be reached, which ``upstream_rq_total`` (attempts that got a connection,
retries included) misses, so a dead backend reads as 100% errors rather than 0 requests. In-flight
streams count when they end.

Constraints: counters are cumulative since Envoy started; latency quantiles are Envoy's
cumulative histogram quantiles, which Envoy recomputes only at its stats flush (every 5 s by
default), so they lag fresh traffic by up to one flush and read ``None`` until the first one.
``upstream_rq_time`` is milliseconds, recorded when the upstream response completes (for SSE,
the end of the stream). Stats are looked up by exact name: a cluster name may contain dots.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extproc.envoy_render import VIRTUAL_HOST

# Only what status shows; Envoy matches ``filter`` with RE2 against each stat name.
STATS_FILTER = (
    r"^(cluster\..+\.upstream_rq_(completed|4xx|5xx|time)"
    rf"|vhost\.{re.escape(VIRTUAL_HOST)}\.vcluster\..+\.upstream_rq_(total|completed))$"
)
# ``upstream_rq_total`` exists for every decision from the start (so idle ones are listed);
# ``upstream_rq_completed`` only once used.
_VCLUSTER = re.compile(
    rf"^vhost\.{re.escape(VIRTUAL_HOST)}\.vcluster\.(.+)\.upstream_rq_(total|completed)$")

P50P99 = tuple[float | None, float | None]


@dataclass(frozen=True, slots=True)
class ModelTraffic:
    """One model's upstream traffic; latencies in ms, ``None`` before Envoy's first flush."""

    model: str
    cluster: str
    requests: int
    rq_4xx: int
    rq_5xx: int
    p50_ms: float | None
    p99_ms: float | None

    @property
    def error_rate(self) -> float | None:
        """5xx over completed requests; ``None`` when there were none."""
        return self.rq_5xx / self.requests if self.requests else None


@dataclass(frozen=True, slots=True)
class DecisionShare:
    decision: str
    requests: int
    share: float | None  # of all decisions' completed requests; None when there were none


@dataclass(frozen=True, slots=True)
class EnvoyTraffic:
    models: tuple[ModelTraffic, ...]
    decisions: tuple[DecisionShare, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "models": {
                m.model: {"cluster": m.cluster, "requests": m.requests, "rq_4xx": m.rq_4xx,
                          "rq_5xx": m.rq_5xx, "error_rate": m.error_rate,
                          "p50_ms": m.p50_ms, "p99_ms": m.p99_ms}
                for m in self.models
            },
            "decisions": {d.decision: {"requests": d.requests, "share": d.share}
                          for d in self.decisions},
        }


def fetch_stats(admin_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """``GET <envoy admin>/stats?format=json`` limited to ``STATS_FILTER``; raises ``OSError``
    when Envoy is unreachable or answers an error, ``ValueError`` on a body that is not JSON."""
    query = urllib.parse.urlencode({"format": "json", "filter": STATS_FILTER})
    url = f"{admin_url.rstrip('/')}/stats?{query}"
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        body = json.loads(response.read())
    if not isinstance(body, dict):
        raise ValueError(f"{url}: expected a JSON object")
    return body


def _split(stats: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, P50P99]]:
    """Counters by name, and (p50, p99) cumulative quantiles by histogram name."""
    counters: dict[str, int] = {}
    quantiles: dict[str, P50P99] = {}
    for entry in stats.get("stats") or []:
        if not isinstance(entry, dict):
            continue
        if isinstance(entry.get("name"), str) and isinstance(entry.get("value"), int):
            counters[entry["name"]] = entry["value"]
        histograms = entry.get("histograms")
        if isinstance(histograms, dict):
            quantiles.update(_quantiles(histograms))
    return counters, quantiles


def _cumulative(values: list[Any], index: int | None) -> float | None:
    if index is None or index >= len(values) or not isinstance(values[index], dict):
        return None
    value = values[index].get("cumulative")  # null until Envoy's first flush with data
    return float(value) if isinstance(value, int | float) else None


def _quantiles(histograms: Mapping[str, Any]) -> dict[str, P50P99]:
    """``computed_quantiles[].values[i]`` lines up with ``supported_quantiles[i]``."""
    supported = [float(q) for q in histograms.get("supported_quantiles") or []]
    p50, p99 = (supported.index(q) if q in supported else None for q in (50.0, 99.0))
    out = {}
    for h in histograms.get("computed_quantiles") or []:
        if isinstance(h, dict) and isinstance(h.get("name"), str):
            values = h.get("values") or []
            out[h["name"]] = (_cumulative(values, p50), _cumulative(values, p99))
    return out


def parse_stats(stats: Mapping[str, Any], clusters: Mapping[str, str]) -> EnvoyTraffic:
    """Turn Envoy's stats JSON into rows: one per model in ``clusters`` (model name to Envoy
    cluster name, in that order), one per decision virtual cluster (most requests first).
    Missing counters read 0 (Envoy creates ``upstream_rq_4xx``/``5xx`` on first use)."""
    counters, quantiles = _split(stats)
    models = []
    for model, cluster in clusters.items():
        prefix = f"cluster.{cluster}."
        p50, p99 = quantiles.get(prefix + "upstream_rq_time", (None, None))
        models.append(ModelTraffic(
            model=model, cluster=cluster,
            requests=counters.get(prefix + "upstream_rq_completed", 0),
            rq_4xx=counters.get(prefix + "upstream_rq_4xx", 0),
            rq_5xx=counters.get(prefix + "upstream_rq_5xx", 0), p50_ms=p50, p99_ms=p99))
    per_decision: dict[str, int] = {}
    for name, value in counters.items():
        match = _VCLUSTER.match(name)
        if match:
            done = value if match.group(2) == "completed" else 0
            per_decision[match.group(1)] = per_decision.get(match.group(1), 0) + done
    total = sum(per_decision.values())
    decisions = tuple(
        DecisionShare(name, count, count / total if total else None)
        for name, count in sorted(per_decision.items(), key=lambda item: (-item[1], item[0])))
    return EnvoyTraffic(tuple(models), decisions)
