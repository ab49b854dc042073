"""Readiness for operators: ``semantic-router status`` (the router's ``/health`` as a table,
plus per-model traffic and per-decision shares from Envoy's admin stats) and
``semantic-router config validate --probe`` (each provider model id checked against the
live ``/v1/models`` of its endpoints, problems named by YAML path).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import aiohttp

from extproc.config import RouterConfig
from extproc.config.runtime import cluster_name_for
from extproc.envoy_stats import EnvoyTraffic, fetch_stats, parse_stats
from extproc.prober import fetch_models, models_url
from extproc.workers import static_workers


def fetch_health(admin_url: str, timeout_s: float = 5.0) -> tuple[int, dict[str, Any]]:
    """``GET <admin>/health``: the status and JSON body (a 503 carries a body too)."""
    url = admin_url.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _probe_cell(endpoint: dict[str, Any]) -> str:
    probe = endpoint.get("last_probe")
    if not probe:
        return endpoint.get("reason", "")
    return f"{endpoint.get('reason', '')} ({probe['latency_ms']:.0f} ms, {probe['age_s']:.0f}s ago)"


def format_health(body: dict[str, Any]) -> str:
    """The ``/health`` body as text: a summary line, classifiers, one row per endpoint."""
    lines = [
        f"router: {body.get('status', '?')}   default model: {body.get('default_model', '?')}"
        f"   endpoint discovery: {body.get('endpoint_discovery', '?')}"
        f"   workers: {body.get('workers', 0)}"
    ]
    for c in body.get("classifiers", []):
        lines.append(f"classifier: {c.get('classifier')} ({c.get('model')}) on {c.get('device')}")
    rows = [("model", "ready", "endpoint", "source", "url", "last probe")]
    for name, model in body.get("models", {}).items():
        endpoints = model.get("endpoints") or [{}]
        for i, e in enumerate(endpoints):
            rows.append((
                name if i == 0 else "", ("yes" if model.get("ready") else "NO") if i == 0 else "",
                e.get("name", "-"), e.get("source", ""), e.get("url", ""),
                ("ok: " if e.get("ready") else "") + _probe_cell(e) if e else "no endpoints",
            ))
    lines += ["", *_table(rows)]
    for reason in body.get("reasons", []):
        lines.append(f"not ready: {reason}")
    return "\n".join(lines)


def model_clusters(body: dict[str, Any]) -> dict[str, str]:
    """Model name to Envoy cluster, as ``/health`` reports them (in its order)."""
    return {name: str(model.get("cluster") or cluster_name_for(name))
            for name, model in body.get("models", {}).items()}


def read_traffic(body: dict[str, Any], envoy_admin: str,
                 timeout_s: float = 5.0) -> EnvoyTraffic | str:
    """Envoy's traffic for the models in ``/health``, or why it is unavailable."""
    try:
        return parse_stats(fetch_stats(envoy_admin, timeout_s), model_clusters(body))
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", err)  # URLError wraps the socket error
        return f"Envoy stats unavailable: cannot read {envoy_admin}/stats: {reason}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_traffic(
    body: dict[str, Any], traffic: EnvoyTraffic | str, decisions: Sequence[str] = ()
) -> str:
    """Per-model requests, 4xx/5xx, error rate (5xx share) and p50/p99 upstream latency, then
    each decision's share of traffic; or the one line saying Envoy stats are unavailable.
    `decisions`: the config's; one Envoy has no stats bucket for (added by a hot reload since
    Envoy started) is named, since its traffic counts as `other`."""
    if isinstance(traffic, str):
        return traffic
    models = body.get("models", {})
    rows = [("model", "ready", "requests", "4xx", "5xx", "error rate", "p50 ms", "p99 ms")]
    for m in traffic.models:
        ready = "yes" if models.get(m.model, {}).get("ready") else "NO"
        rows.append((m.model, ready, str(m.requests), str(m.rq_4xx), str(m.rq_5xx),
                     _pct(m.error_rate), _ms(m.p50_ms), _ms(m.p99_ms)))
    lines = ["Envoy traffic (since Envoy started; latency as of its last stats flush):", "",
             *_table(rows)]
    shares = [("decision", "requests", "share")]
    shares += [(d.decision, str(d.requests), _pct(d.share)) for d in traffic.decisions]
    lines += ["", *_table(shares)]
    known = {d.decision for d in traffic.decisions}
    unknown = [name for name in decisions if name not in known]
    if traffic.decisions and unknown:
        lines.append(f"no Envoy stats bucket for {', '.join(unknown)}: added since Envoy "
                     "started (a hot reload), so counted as `other` until Envoy restarts with "
                     "a re-rendered config")
    return "\n".join(lines)


async def probe_config(config: RouterConfig, timeout_s: float = 3.0) -> tuple[list[str], int]:
    """Check every endpoint's ``/v1/models`` for its model's provider model id: the problems
    (``providers.models[0].provider_model_id: ...``) and how many endpoints were probed."""
    checks: list[tuple[str, str, str, str, str]] = []  # model path, endpoint path, name, url, id
    for i, model in enumerate(config.source.providers.models):
        target = config.models[model.name]
        for j, endpoint in enumerate(target.endpoints):
            url = models_url(endpoint.protocol, endpoint.host, endpoint.port)
            checks.append((f"providers.models[{i}].provider_model_id",
                           f"providers.models[{i}].backend_refs[{j}].endpoint",
                           endpoint.name, url, target.provider_model_id))
    workers, _ = static_workers(config.source.workers, config.models)
    in_list = isinstance(config.source.workers, list)
    for k, worker in enumerate(workers):
        where = f"workers[{k}]" if in_list else f"workers/{worker.worker_id}"
        url = models_url(worker.scheme, worker.host, worker.port)
        for m, name in enumerate(worker.models):
            checks.append((f"{where}.supported_models[{m}]", f"{where}.runtime_endpoint",
                           worker.worker_id, url, config.models[name].provider_model_id))
    async with aiohttp.ClientSession() as session:
        urls = sorted({c[3] for c in checks})
        answers = dict(zip(urls, await asyncio.gather(
            *(fetch_models(session, u, timeout_s) for u in urls)), strict=True))
    problems = []
    for model_path, endpoint_path, name, url, wanted in checks:
        ids, error = answers[url]
        if ids is None:
            problems.append(f"{endpoint_path}: {name}: {error} ({url})")
        elif wanted not in ids:
            problems.append(f"{model_path}: '{wanted}' is not served by {name}: {url} "
                            f"lists [{', '.join(ids[:10])}]")
    return problems, len(urls)
