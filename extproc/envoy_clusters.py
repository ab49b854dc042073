"""Envoy clusters: the router's ext_proc cluster (HTTP/2) and one cluster per model named
after it, static or EDS-fed, with health checks, outlier detection and TLS verification."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

from extproc.config import RouterConfig
from extproc.config.runtime import Endpoint, ModelTarget, split_host_port
from extproc.config.schema import TlsSettings

EXTPROC_CLUSTER = "semantic_router_extproc"
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
_HTTP2_OPTIONS = {
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http2_protocol_options": {}},
    }
}


def socket_address(address: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": address, "port_value": port}}


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


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
                            "endpoint": {"address": socket_address(e.host, e.port)},
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
        # LLM requests are long: Envoy's defaults (1024 requests, 3 concurrent retries) would
        # turn a burst into 503s; retries are bounded by a budget instead of a fixed count
        "circuit_breakers": {"thresholds": [{
            "priority": "DEFAULT",
            "max_connections": 100_000,
            "max_pending_requests": 100_000,
            "max_requests": 100_000,
            "retry_budget": {"budget_percent": {"value": 25.0}, "min_retry_concurrency": 32},
        }]},
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


def router_tls_socket(tls: TlsSettings, host: str) -> dict[str, Any]:
    """Envoy verifies the router's certificate: chain against ``ca_file`` (default: the system
    trust store), name against ``server_name`` (default: the gRPC host; an IP is matched as an
    IP SAN and not sent as SNI), and offers ALPN h2 as gRPC expects."""
    name = tls.server_name or host
    context: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
                 "UpstreamTlsContext",
        "common_tls_context": {
            "alpn_protocols": ["h2"],
            "validation_context": {
                "trusted_ca": {"filename": tls.ca_file or SYSTEM_CA_BUNDLE},
                "match_typed_subject_alt_names": [{
                    "san_type": "IP_ADDRESS" if _is_ip(name) else "DNS",
                    "matcher": {"exact": name}}],
            },
        },
    }
    if not _is_ip(name):
        context["sni"] = name
    return {"name": "envoy.transport_sockets.tls", "typed_config": context}


def extproc_cluster(config: RouterConfig, grpc_address: str | None = None) -> dict[str, Any]:
    host, port = split_host_port(grpc_address or config.router.grpc)
    tls = config.router.tls
    transport = {"transport_socket": router_tls_socket(tls, host)} if tls else {}
    return {
        **transport,
        "name": EXTPROC_CLUSTER,
        "type": "STATIC" if _is_ip(host) else "STRICT_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": _HTTP2_OPTIONS,
        "load_assignment": {
            "cluster_name": EXTPROC_CLUSTER,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": socket_address(host, port)}}]}
            ],
        },
        # grpc.health.v1: a draining replica turns NOT_SERVING and stops getting new streams
        # (with every replica unhealthy, Envoy's panic mode still uses them all)
        "health_checks": [{
            "timeout": "1s",
            "interval": "2s",
            "unhealthy_threshold": 1,
            "healthy_threshold": 1,
            "grpc_health_check": {},
        }],
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
