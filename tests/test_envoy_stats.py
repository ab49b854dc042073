"""Envoy admin stats to status rows, from a sample captured from Envoy 1.40: 3 streamed code
requests, 2 default ones, and one math request whose backend was down (Envoy's own 503)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from extproc.envoy_stats import DecisionShare, parse_stats
from extproc.status import format_traffic

SAMPLE = Path(__file__).parent / "data" / "envoy_1.40_stats.json"
CLUSTERS = {"general": "general", "code": "code", "reasoning": "reasoning"}


@pytest.fixture
def sample() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(SAMPLE.read_text())
    return body


def test_models_count_completed_requests_errors_and_cumulative_latency(
        sample: dict[str, Any]) -> None:
    traffic = parse_stats(sample, CLUSTERS)
    rows = {m.model: m for m in traffic.models}
    assert [m.model for m in traffic.models] == ["general", "code", "reasoning"]
    code = rows["code"]
    assert (code.requests, code.rq_4xx, code.rq_5xx, code.error_rate) == (3, 0, 0, 0.0)
    assert code.p50_ms == pytest.approx(356.667, abs=0.01)
    assert code.p99_ms == 375
    # the dead backend: no upstream_rq_total, but a completed request that was a 5xx
    reasoning = rows["reasoning"]
    assert (reasoning.requests, reasoning.rq_5xx, reasoning.error_rate) == (1, 1, 1.0)
    assert (reasoning.p50_ms, reasoning.p99_ms) == (None, None)


def test_decision_shares_list_idle_decisions_too(sample: dict[str, Any]) -> None:
    decisions = parse_stats(sample, CLUSTERS).decisions
    assert [(d.decision, d.requests, None if d.share is None else round(d.share, 3))
            for d in decisions] == [
        ("code", 3, 0.5), ("default", 2, 0.333), ("math", 1, 0.167), ("explicit", 0, 0.0),
        ("other", 0, 0.0)]
    assert parse_stats({"stats": []}, {}).decisions == ()
    idle = {"stats": [{"name": "vhost.semantic_router.vcluster.code.upstream_rq_total",
                       "value": 0}]}
    assert parse_stats(idle, {}).decisions == (DecisionShare("code", 0, None),)


def test_cluster_names_match_exactly_and_interval_values_are_ignored(
        sample: dict[str, Any]) -> None:
    changed = copy.deepcopy(sample)
    histograms = changed["stats"][-1]["histograms"]
    for h in histograms["computed_quantiles"]:
        for v in h["values"]:
            v["interval"] = 9999
    # "cluster.code.external.*" must not be read as a cluster named "code.external"'s rows
    traffic = parse_stats(changed, {"code": "code", "ext": "code.external", "gone": "gone"})
    code, ext, gone = traffic.models
    assert code.p99_ms == 375 and ext.requests == 3
    assert (gone.requests, gone.error_rate, gone.p50_ms) == (0, None, None)


def test_before_first_flush_and_on_odd_shapes() -> None:
    nulls = {"stats": [{"name": "cluster.code.upstream_rq_completed", "value": 2}, {
        "histograms": {"supported_quantiles": [50, 99], "computed_quantiles": [
            {"name": "cluster.code.upstream_rq_time",
             "values": [{"cumulative": None, "interval": None}] * 2}]}}]}
    (code,) = parse_stats(nulls, {"code": "code"}).models
    assert (code.requests, code.p50_ms, code.p99_ms) == (2, None, None)
    empty = parse_stats({"stats": [None, {"histograms": {}}, {"name": 1}]}, {"code": "code"})
    assert empty.models[0].requests == 0 and empty.decisions == ()
    assert parse_stats({}, {}).to_json() == {"models": {}, "decisions": {}}


def test_format_traffic_and_unavailable(sample: dict[str, Any]) -> None:
    body = {"models": {"general": {"ready": True}, "code": {"ready": True},
                       "reasoning": {"ready": False}}}
    text = format_traffic(body, parse_stats(sample, CLUSTERS))
    lines = text.splitlines()
    assert lines[2].split() == ["model", "ready", "requests", "4xx", "5xx", "error", "rate",
                                "p50", "ms", "p99", "ms"]
    assert lines[5].split() == ["code", "yes", "3", "0", "0", "0.0%", "356.7", "375.0"]
    assert lines[6].split() == ["reasoning", "NO", "1", "0", "1", "100.0%", "-", "-"]
    assert "code      3         50.0%" in text
    assert format_traffic(body, "Envoy stats unavailable: x") == "Envoy stats unavailable: x"
    assert "stats bucket" not in text
    known = [d.decision for d in parse_stats(sample, CLUSTERS).decisions]
    reloaded = format_traffic(body, parse_stats(sample, CLUSTERS), [*known, "fruit"])
    assert reloaded.splitlines()[-1].startswith("no Envoy stats bucket for fruit: added since")
