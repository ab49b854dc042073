"""What SREs read: Envoy stats per model and decision, the router's Prometheus metrics, the
access log's decision fields, and logs that never carry credentials."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from extproc.logs import JsonFormatter
from tests.dataplane.conftest import Stack

pytestmark = pytest.mark.dataplane

MIX = [("python function", "code", 3), ("integral of x", "math", 2), ("hello", "default", 4)]
SECRET_KEY = "sk-live-0123456789abcdefSECRET"
SECRET_PROMPT_KEY = "AKIAZZZZSECRETINPROMPT"


async def _send_mix(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        for prompt, _, count in MIX:
            for _ in range(count):
                body = {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
                response = await client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200
        explicit = {"model": "general", "messages": [{"role": "user", "content": "x"}]}
        assert (await client.post("/v1/chat/completions", json=explicit)).status_code == 200
        bad = await client.post("/v1/chat/completions", json={"model": "nope", "messages": []})
        assert bad.status_code == 400


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_envoy_stats_per_model_and_decision(stack: Stack) -> None:
    await _send_mix(stack)
    async with httpx.AsyncClient(base_url=stack.admin_url, timeout=10) as admin:
        stats = (await admin.get("/stats", params={"filter": "upstream_rq_total"})).text
        prometheus = (await admin.get("/stats/prometheus")).text
    counters = dict(line.split(": ", 1) for line in stats.splitlines() if ": " in line)
    assert counters["cluster.code.upstream_rq_total"] == "3"
    assert counters["cluster.reasoning.upstream_rq_total"] == "2"
    assert counters["cluster.general.upstream_rq_total"] == "5"
    for _, decision, count in MIX:
        assert counters[f"vhost.semantic_router.vcluster.{decision}.upstream_rq_total"] == str(
            count)
    assert counters["vhost.semantic_router.vcluster.explicit.upstream_rq_total"] == "1"
    samples = _samples(prometheus)
    key = ("envoy_vhost_vcluster_upstream_rq_total",
           (("envoy_virtual_cluster", "code"), ("envoy_virtual_host", "semantic_router")))
    assert samples[key] == 3
    assert samples[("envoy_cluster_upstream_rq_total", (("envoy_cluster_name", "code"),))] == 3


async def test_router_metrics_move(stack: Stack) -> None:
    assert stack.router is not None
    async with httpx.AsyncClient(timeout=10) as client:
        url = f"http://127.0.0.1:{stack.router.admin_port}/metrics"
        before = _samples((await client.get(url)).text)
        await _send_mix(stack)
        after = _samples((await client.get(url)).text)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("semantic_router_requests_total", outcome="routed", reason="") == 5
    assert delta("semantic_router_requests_total", outcome="default", reason="") == 4
    assert delta("semantic_router_requests_total", outcome="explicit", reason="") == 1
    assert delta("semantic_router_requests_total", outcome="rejected", reason="BadRequest") == 1
    assert delta("semantic_router_decisions_total", decision="code", model="code") == 3
    assert delta("semantic_router_extproc_phase_seconds_count", phase="request_body") == 11
    # one message per request: the headers arrive as attributes with the body
    assert delta("semantic_router_extproc_phase_seconds_count", phase="request_headers") == 0
    for model in ("general", "code", "reasoning"):
        assert after[("semantic_router_model_ready", (("model", model),))] == 1.0
        assert after[("semantic_router_model_ready_endpoints", (("model", model),))] == 1.0
    assert after[("semantic_router_workers", ())] == 0.0


async def test_access_log_carries_the_decision(stack: Stack) -> None:
    await _send_mix(stack)
    wanted = {"code", "math", "default", "explicit"}
    routed: list[dict[str, object]] = []
    for _ in range(20):  # Envoy writes access logs asynchronously; poll, bounded
        await stack.envoy_flush()
        lines = [json.loads(line) for line in stack.envoy.logs(500).splitlines()
                 if line.startswith("{")]
        routed = [line for line in lines if line.get("decision")]
        if {line["decision"] for line in routed} >= wanted:
            break
    assert {line["decision"] for line in routed} >= wanted
    code = next(line for line in routed if line["decision"] == "code")
    assert code["model"] == "code"
    assert code["outcome"] == "routed"
    assert code["upstream_cluster"] == "code"


async def test_credentials_never_logged(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
        body = {"model": "auto", "messages": [
            {"role": "user", "content": f"my key is {SECRET_PROMPT_KEY}, write python"}]}
        response = await client.post("/v1/chat/completions", json=body,
                                     headers={"authorization": f"Bearer {SECRET_KEY}"})
        assert response.status_code == 200
        bad = await client.post("/v1/chat/completions", content=b'{"model": 1}',
                                headers={"authorization": f"Bearer {SECRET_KEY}"})
        assert bad.status_code == 400
        # a key in the query string (some clients' habit) stays out of the access log
        queried = await client.post(f"/v1/chat/completions?api_key={SECRET_KEY}",
                                    json={"model": "auto", "messages": [
                                        {"role": "user", "content": "hello"}]})
        assert queried.status_code == 200
    await stack.envoy_flush()
    formatter = JsonFormatter()
    lines = [formatter.format(record) for record in caplog.records
             if not record.name.startswith(("httpx", "httpcore"))]  # the test's own client
    routed = [json.loads(line) for line in lines if '"decision": "code"' in line]
    assert routed, "no decision line"
    assert {"request_id", "decision", "model", "outcome", "parse_ms", "route_ms"} <= set(
        routed[0])
    # every answer names its request, as the router's log line does (the SDKs' _request_id)
    assert routed[0]["request_id"] == response.headers["x-request-id"]
    assert bad.headers["x-request-id"] and bad.headers["x-request-id"] != response.headers[
        "x-request-id"]
    for text in [*lines, stack.envoy.logs(500)]:
        assert SECRET_KEY not in text, text[max(0, text.find(SECRET_KEY) - 400):][:600]
        assert SECRET_PROMPT_KEY not in text
