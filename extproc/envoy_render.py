"""Render Envoy v3 config from a router config: a whole bootstrap, or the fragment an existing
Envoy needs (filters, clusters, route).

The shape encodes the verified Envoy facts in ARCHITECTURE.md: ext_proc sends request headers
and the buffered body, the body response re-routes via ``cluster_header`` + clear_route_cache,
the ext_proc cluster speaks HTTP/2, SSE routes have no timeout, a Lua filter before ext_proc
sets the default cluster and overwrites any client-sent cluster header (so fail-open cannot
let clients pick a backend), and per-decision stats come from virtual clusters keyed on the
decision header, which is stripped before requests reach a backend.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

import yaml

from extproc.config import RouterConfig
from extproc.config.runtime import Endpoint, ModelTarget, split_host_port
from extproc.names import (
    CLUSTER_HEADER,
    DECISION_HEADER,
    EXPLICIT_DECISION,
    IMMEDIATE_DETAILS,
)

EXTPROC_CLUSTER = "semantic_router_extproc"
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
LISTENER_NAME = "semantic_router"
VIRTUAL_HOST = "semantic_router"
_HTTP2_OPTIONS = {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}},
    }
}
# The whole request must fit Envoy's buffer, plus headroom so our 413 (JSON) answers
# before Envoy's own plain-text one.
_BUFFER_HEADROOM = 64 * 1024
_STDOUT_LOG_TYPE = (
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
)
_ACCESS_LOG_FORMAT = {
    "time": "%START_TIME%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(:PATH)%",
    "status": "%RESPONSE_CODE%",
    "flags": "%RESPONSE_FLAGS%",
    "details": "%RESPONSE_CODE_DETAILS%",
    "duration_ms": "%DURATION%",
    "upstream_cluster": "%UPSTREAM_CLUSTER%",
    "upstream_host": "%UPSTREAM_HOST%",
    "decision": "%DYNAMIC_METADATA(envoy.filters.http.ext_proc:decision)%",
    "model": "%DYNAMIC_METADATA(envoy.filters.http.ext_proc:model)%",
    "outcome": "%DYNAMIC_METADATA(envoy.filters.http.ext_proc:outcome)%",
}


def _socket(address: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": address, "port_value": port}}


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def lua_filter(default_cluster: str) -> dict[str, Any]:
    code = (
        "function envoy_on_request(handle)\n"
        f'  handle:headers():replace("{CLUSTER_HEADER}", "{default_cluster}")\n'
        f'  handle:headers():remove("{DECISION_HEADER}")\n'
        "  handle:clearRouteCache()\n"
        "end\n"
    )
    return {
        "name": "envoy.filters.http.lua",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": code},
        },
    }


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fail_open_lua_filter(config: RouterConfig) -> dict[str, Any]:
    """After ext_proc, only with fail-open: when the router did not handle a request (no
    decision header), map its ``model`` the way the router would for explicit names, and
    send auto names to the default model, so the backend gets a model id it serves.

    A Lua pattern finds the first ``"model": "..."`` in the body: a degraded path that keeps
    clients working while the router is down, not a JSON parser."""
    routes = {name: config.default_model for name in config.auto_names}
    routes.update(config.models)
    table = ",\n".join(
        f"  [{_lua_string(name)}] = {{{_lua_string(t.cluster)}, "
        f"{_lua_string(t.provider_model_id)}}}"
        for name, t in sorted(routes.items())
    )
    code = (
        f"local routes = {{\n{table}\n}}\n"
        "function envoy_on_request(handle)\n"
        "  local headers = handle:headers()\n"
        f'  if headers:get("{DECISION_HEADER}") ~= nil then return end\n'
        '  if headers:get(":method") ~= "POST" then return end\n'
        "  local body = handle:body()  -- buffers; header objects taken before it go stale\n"
        "  if body == nil then return end\n"
        "  local text = body:getBytes(0, body:length())\n"
        "  local first, last, model = string.find(text, '\"model\"%s*:%s*\"([^\"\\\\]*)\"')\n"
        "  if model == nil then return end\n"
        "  local route = routes[model]\n"
        "  if route == nil then return end\n"
        f'  handle:headers():replace("{CLUSTER_HEADER}", route[1])\n'
        f'  handle:headers():replace("{DECISION_HEADER}", "fail_open")\n'
        "  local rewritten = string.sub(text, 1, first - 1) .. '\"model\": \"' .. route[2]"
        " .. '\"' .. string.sub(text, last + 1)\n"
        "  body:setBytes(rewritten)\n"
        "  handle:clearRouteCache()\n"
        "end\n"
    )
    return {
        "name": "envoy.filters.http.lua",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": code},
        },
    }


def ext_proc_filter(config: RouterConfig) -> dict[str, Any]:
    timeout_s = config.router.message_timeout_ms / 1000
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3."
            "ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": EXTPROC_CLUSTER}},
            "failure_mode_allow": config.router.failure_mode == "open",
            "message_timeout": f"{timeout_s:g}s",
            "allow_mode_override": True,
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "BUFFERED",
                "response_body_mode": "NONE",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
            "metadata_options": {
                "receiving_namespaces": {"untyped": ["envoy.filters.http.ext_proc"]},
            },
        },
    }


def http_filters(config: RouterConfig) -> list[dict[str, Any]]:
    fail_open = [fail_open_lua_filter(config)] if config.router.failure_mode == "open" else []
    return [
        lua_filter(config.default_model.cluster),
        ext_proc_filter(config),
        *fail_open,
        {
            "name": "envoy.filters.http.router",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
            },
        },
    ]


def virtual_host(config: RouterConfig) -> dict[str, Any]:
    decisions = sorted({d.name for d in config.decisions} | {"default", EXPLICIT_DECISION})
    return {
        "name": VIRTUAL_HOST,
        "domains": ["*"],
        "routes": [
            {
                "match": {"prefix": "/"},
                "route": {
                    "cluster_header": CLUSTER_HEADER,
                    "timeout": "0s",  # SSE streams must not be cut by the 15 s default
                    "retry_policy": {
                        "retry_on": "connect-failure,refused-stream,reset-before-request",
                        "num_retries": 2,
                    },
                },
            }
        ],
        "virtual_clusters": [
            {
                "name": name,
                "headers": [{"name": DECISION_HEADER, "string_match": {"exact": name}}],
            }
            for name in decisions
        ],
        "request_headers_to_remove": [DECISION_HEADER],
    }


def model_cluster(target: ModelTarget) -> dict[str, Any]:
    all_ips = all(_is_ip(e.host) for e in target.endpoints)
    cluster: dict[str, Any] = {
        "name": target.cluster,
        "type": "STATIC" if all_ips else "STRICT_DNS",
        "connect_timeout": "5s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": target.cluster,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {"address": _socket(e.host, e.port)},
                            "load_balancing_weight": e.weight,
                        }
                        for e in target.endpoints
                    ]
                }
            ],
        },
        "outlier_detection": {
            "consecutive_5xx": 5,
            "consecutive_gateway_failure": 3,
            "interval": "5s",
            "base_ejection_time": "15s",
            "max_ejection_percent": 50,
        },
        "common_lb_config": {"healthy_panic_threshold": {"value": 0}},
    }
    if any(e.protocol == "https" for e in target.endpoints):
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
                "UpstreamTlsContext",
                "sni": target.endpoints[0].host,
                # verify backends against the system trust store, by name
                "common_tls_context": {"validation_context": {
                    "trusted_ca": {"filename": SYSTEM_CA_BUNDLE},
                    "match_typed_subject_alt_names": [{
                        "san_type": "DNS",
                        "matcher": {"exact": target.endpoints[0].host}}],
                }},
            },
        }
    return cluster


def extproc_cluster(config: RouterConfig, grpc_address: str | None = None) -> dict[str, Any]:
    host, port = split_host_port(grpc_address or config.router.grpc)
    return {
        "name": EXTPROC_CLUSTER,
        "type": "STATIC" if _is_ip(host) else "STRICT_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": _HTTP2_OPTIONS,
        "load_assignment": {
            "cluster_name": EXTPROC_CLUSTER,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(host, port)}}]}],
        },
    }


def health_checks(path: str) -> list[dict[str, Any]]:
    """Active HTTP checks (vLLM serves ``GET /health``): a new host takes traffic after one
    pass, a dead one leaves after two failures; outlier detection catches faster failures."""
    return [{
        "timeout": "2s",
        "interval": "5s",
        "interval_jitter": "1s",
        "no_traffic_interval": "10s",
        "unhealthy_threshold": 2,
        "healthy_threshold": 1,
        "http_health_check": {"path": path},
    }]


def eds_config(initial_fetch_timeout_s: float = 5.0) -> dict[str, Any]:
    """Endpoints from the router's EDS (same gRPC cluster as ext_proc). The short retry
    back-off reconnects within seconds after a router restart (Envoy's default waited ~24 s)."""
    return {
        "resource_api_version": "V3",
        "initial_fetch_timeout": f"{initial_fetch_timeout_s:g}s",
        "api_config_source": {
            "api_type": "GRPC",
            "transport_api_version": "V3",
            "set_node_on_first_message_only": True,
            "grpc_services": [{"envoy_grpc": {
                "cluster_name": EXTPROC_CLUSTER,
                "retry_policy": {"retry_back_off": {"base_interval": "0.25s",
                                                    "max_interval": "2s"}},
            }}],
        },
    }


def model_clusters(config: RouterConfig) -> list[dict[str, Any]]:
    """One cluster per model: static endpoints (config workers included), or EDS
    (``router.endpoint_discovery: eds``) where the router serves only ready endpoints,
    registered workers included."""
    from extproc.workers import static_workers  # lazy: only rendering needs it

    extra: dict[str, list[Endpoint]] = {}
    for worker in static_workers(config.source.workers, config.models)[0]:
        for name in worker.models:
            extra.setdefault(name, []).append(Endpoint(
                worker.worker_id, worker.host, worker.port, worker.scheme, worker.weight))
    out = []
    for target in config.models.values():
        cluster = model_cluster(
            replace(target, endpoints=(*target.endpoints, *extra.get(target.name, ()))))
        if config.router.health_check_path:
            cluster["health_checks"] = health_checks(config.router.health_check_path)
        if config.router.endpoint_discovery == "eds":
            del cluster["load_assignment"]
            cluster["type"] = "EDS"
            cluster["eds_cluster_config"] = {"service_name": target.cluster,
                                             "eds_config": eds_config()}
            # a host gone from EDS leaves at once, even while it passes health checks
            cluster["ignore_health_on_host_removal"] = True
        out.append(cluster)
    return out


def clusters(config: RouterConfig, grpc_address: str | None = None) -> list[dict[str, Any]]:
    return [extproc_cluster(config, grpc_address), *model_clusters(config)]


def _cel(expression: str) -> dict[str, Any]:
    return {"extension_filter": {
        "name": "envoy.access_loggers.extension_filters.cel",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3."
                     "ExpressionFilter",
            "expression": expression,
        },
    }}


def _openai_error(message: str, error_type: str, code: str | None) -> dict[str, Any]:
    return {"content_type": "application/json",
            "json_format": {"error": {"message": message, "type": error_type, "param": None,
                                      "code": code}}}


def local_reply_config(config: RouterConfig) -> dict[str, Any]:
    """Envoy's own local replies (413 from its buffer, 5xx when a backend or the router is
    unreachable) get the OpenAI error shape too. The router's replies carry the details
    ``IMMEDIATE_DETAILS`` and are left as they are."""
    ours = f"response.code_details != '{IMMEDIATE_DETAILS}'"
    limit = config.listener.max_request_bytes
    return {"mappers": [
        {"filter": _cel("response.code_details == 'request_payload_too_large'"),
         "body_format_override": _openai_error(
             f"request body is larger than the limit of {limit} bytes",
             "invalid_request_error", "request_too_large")},
        {"filter": _cel(f"{ours} && response.code_details.startsWith('ext_proc')"),
         "body_format_override": _openai_error(
             "the semantic router is unavailable; retry shortly", "server_error",
             "router_unavailable")},
        {"filter": _cel(f"{ours} && response.code >= 500"),
         "body_format_override": _openai_error("%LOCAL_REPLY_BODY%", "server_error",
                                               "upstream_unavailable")},
        {"filter": _cel(f"{ours} && response.code >= 400"),
         "body_format_override": _openai_error("%LOCAL_REPLY_BODY%", "invalid_request_error",
                                               None)},
    ]}


def listener(config: RouterConfig) -> dict[str, Any]:
    host, port = split_host_port(config.listener.address)
    return {
        "name": LISTENER_NAME,
        "address": _socket(host, port),
        "per_connection_buffer_limit_bytes": config.listener.max_request_bytes + _BUFFER_HEADROOM,
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.network."
                            "http_connection_manager.v3.HttpConnectionManager",
                            "stat_prefix": LISTENER_NAME,
                            "codec_type": "AUTO",
                            "access_log": [
                                {
                                    "name": "envoy.access_loggers.stdout",
                                    "typed_config": {
                                        "@type": _STDOUT_LOG_TYPE,
                                        "log_format": {"json_format": _ACCESS_LOG_FORMAT},
                                    },
                                }
                            ],
                            "local_reply_config": local_reply_config(config),
                            "route_config": {
                                "name": LISTENER_NAME,
                                "virtual_hosts": [virtual_host(config)],
                            },
                            "http_filters": http_filters(config),
                        },
                    }
                ]
            }
        ],
    }


def bootstrap(config: RouterConfig, grpc_address: str | None = None) -> dict[str, Any]:
    """A complete Envoy bootstrap; ``grpc_address`` overrides where the router listens."""
    admin_host, admin_port = split_host_port(config.listener.admin)
    return {
        "node": {"id": "semantic-router-envoy", "cluster": "semantic-router"},
        "admin": {"address": _socket(admin_host, admin_port)},
        "static_resources": {
            "listeners": [listener(config)],
            "clusters": clusters(config, grpc_address),
        },
    }


def fragment(config: RouterConfig, grpc_address: str | None = None) -> dict[str, Any]:
    """What an existing Envoy needs: add the filters before its router filter, the clusters
    to its clusters and the virtual host (or its route) to its route config."""
    return {
        "http_filters": http_filters(config)[:-1],
        "clusters": clusters(config, grpc_address),
        "virtual_host": virtual_host(config),
    }


def to_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, width=100)
