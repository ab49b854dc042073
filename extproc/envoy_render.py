"""Render Envoy v3 config from a router config: a whole bootstrap, or the fragment an existing
Envoy needs (filters, clusters, route).

The shape encodes the verified Envoy facts in ARCHITECTURE.md: ext_proc sends request headers
and the buffered body, the body response re-routes via ``cluster_header`` + clear_route_cache,
the ext_proc cluster speaks HTTP/2, SSE routes have no timeout, a Lua filter before ext_proc
sets the default cluster and overwrites any client-sent cluster header (so fail-open cannot
let clients pick a backend), and per-decision stats come from virtual clusters keyed on the
decision header, which is stripped before requests reach a backend (as is ``expect``).
The listener takes HTTP/1.0 (nginx's default upstream protocol) and bounds how long a client
may take to send its request (``listener.request_headers_timeout_s``, ``request_timeout_s``),
never how long the answer takes.
"""

from __future__ import annotations

from typing import Any

import yaml

from extproc.config import RouterConfig
from extproc.config.runtime import split_host_port
from extproc.envoy_clusters import EXTPROC_CLUSTER, clusters, socket_address
from extproc.envoy_filters import (
    cors_policy,
    http_filters,
    local_reply_config,
    one_message_override,
    one_message_routing,
)
from extproc.names import (
    CLUSTER_HEADER,
    DEBUG_HEADER,
    DECISION_HEADER,
    EXPLICIT_DECISION,
    MAX_REQUEST_HEADERS_KB,
    METADATA_NAMESPACE,
    MODEL_HEADER,
)
from extproc.openai_request import ENDPOINTS
from extproc.security import Secrets, envoy_secrets

__all__ = ["EXTPROC_CLUSTER", "LISTENER_NAME", "bootstrap", "fragment", "to_yaml"]

LISTENER_NAME = "semantic_router"
_PREVIOUS_HOSTS = ("type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3."
                   "PreviousHostsPredicate")
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
# HTTP/1.0 requests need not carry a Host; this one is used instead (every domain matches).
# nginx proxies with HTTP/1.0 unless told otherwise (`proxy_http_version`).
HTTP10_DEFAULT_HOST = "semantic-router"
# Never forwarded: Envoy answers `Expect: 100-continue` itself before routing; any other
# expectation would reach the backend, whose plain-text 417 the client would get.
EXPECT_HEADER = "expect"
_STDOUT_LOG_TYPE = (
    "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog"
)
_WITHOUT_QUERY_FORMATTER = {
    "name": "envoy.formatter.req_without_query",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.formatter.req_without_query.v3."
        "ReqWithoutQuery"
    },
}
_ACCESS_LOG_FORMAT = {
    "time": "%START_TIME%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ_WITHOUT_QUERY(:PATH)%",  # a query string may carry a key (?api_key=...)
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


def _route_action() -> dict[str, Any]:
    return {
        "cluster_header": CLUSTER_HEADER,
        "timeout": "0s",  # SSE streams must not be cut by the 15 s default
        # connection failures and resets before any response header arrived (a backend
        # dying mid-request) are retried on another endpoint of the model; once headers
        # are sent to the client nothing is retried
        "retry_policy": {
            "retry_on": "connect-failure,refused-stream,reset-before-request,reset",
            "num_retries": 2,
            "retry_host_predicate": [
                {"name": "envoy.retry_host_predicates.previous_hosts",
                 "typed_config": {"@type": _PREVIOUS_HOSTS}}],
            "host_selection_retry_max_attempts": 3,
        },
    }


def at_most_regex(limit: int) -> str:
    """An RE2 regex (Envoy matches it whole) for the decimal numbers 1 to ``limit``, written
    as clients send a content-length: no sign, no leading zeros."""
    digits = str(limit)
    width = len(digits)
    alternatives = [f"[1-9][0-9]{{0,{width - 2}}}"] if width > 1 else []  # fewer digits
    for i, digit in enumerate(digits):  # equal so far, then a smaller digit, then any digits
        low, high = (1 if i == 0 else 0), int(digit) - 1
        if high >= low:
            rest = width - i - 1
            any_digits = f"[0-9]{{{rest}}}" if rest else ""
            alternatives.append(f"{digits[:i]}[{low}-{high}]{any_digits}")
    return "|".join([*alternatives, digits])


def one_message_routes(max_request_bytes: int) -> list[dict[str, Any]]:
    """POSTs to the OpenAI endpoints that announce a non-empty body within the limit: one
    ext_proc message (see ``one_message_override``). Anything else takes the catch-all route
    and its headers phase: no content-length (chunked uploads), other methods (the router
    answers 405) and a declared length over ``max_request_bytes``, which the router answers
    with 413 from the headers alone (on a one-message route it would hear of the request only
    once Envoy had read the whole body)."""
    return [
        {
            "match": {
                "path": path,  # Envoy compares it with the query string removed
                "headers": [
                    {"name": ":method", "string_match": {"exact": "POST"}},
                    {"name": "content-length", "string_match": {
                        "safe_regex": {"regex": at_most_regex(max_request_bytes)}}},
                ],
            },
            "route": _route_action(),
            "typed_per_filter_config": one_message_override(),
        }
        for path in ENDPOINTS
    ]


def virtual_host(config: RouterConfig) -> dict[str, Any]:
    decisions = sorted({d.name for d in config.decisions} | {"default", EXPLICIT_DECISION})
    limit = config.listener.max_request_bytes
    fast = one_message_routes(limit) if one_message_routing(config) else []
    return {
        "name": VIRTUAL_HOST,
        "domains": ["*"],
        "routes": [*fast, {"match": {"prefix": "/"}, "route": _route_action()}],
        "virtual_clusters": [
            {
                "name": name,
                "headers": [{"name": DECISION_HEADER, "string_match": {"exact": name}}],
            }
            for name in decisions
        ],
        **({"typed_per_filter_config": cors_policy(config.listener.cors)}
           if config.listener.cors else {}),
        "request_headers_to_remove": [DECISION_HEADER, EXPECT_HEADER],
        "response_headers_to_add": [
            {"header": {"key": name, "value": f"%DYNAMIC_METADATA({METADATA_NAMESPACE}:{key})%"},
             "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
            for name, key in ((MODEL_HEADER, "model"), (DECISION_HEADER, "decision"),
                              (DEBUG_HEADER, "debug"))
        ],
    }


def listener(config: RouterConfig, secrets: Secrets | None = None) -> dict[str, Any]:
    host, port = split_host_port(config.listener.address)
    return {
        "name": LISTENER_NAME,
        "address": socket_address(host, port),
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
                            "max_request_headers_kb": MAX_REQUEST_HEADERS_KB,
                            "stream_idle_timeout":
                                f"{config.listener.stream_idle_timeout_s:g}s",
                            "request_headers_timeout":
                                f"{config.listener.request_headers_timeout_s:g}s",
                            "request_timeout": f"{config.listener.request_timeout_s:g}s",
                            # every answer names its request (the router's log lines do):
                            # the SDKs' `_request_id`, errors included
                            "always_set_request_id_in_response": True,
                            "http_protocol_options": {
                                "accept_http_10": True,
                                "default_host_for_http_10": HTTP10_DEFAULT_HOST,
                            },
                            "access_log": [
                                {
                                    "name": "envoy.access_loggers.stdout",
                                    "typed_config": {
                                        "@type": _STDOUT_LOG_TYPE,
                                        "log_format": {
                                            "json_format": _ACCESS_LOG_FORMAT,
                                            "formatters": [_WITHOUT_QUERY_FORMATTER],
                                        },
                                    },
                                }
                            ],
                            "local_reply_config": local_reply_config(config),
                            "route_config": {
                                "name": LISTENER_NAME,
                                "virtual_hosts": [virtual_host(config)],
                            },
                            "http_filters": http_filters(config, secrets),
                        },
                    }
                ]
            }
        ],
    }


def bootstrap(config: RouterConfig, grpc_address: str | None = None,
              secrets: Secrets | None = None) -> dict[str, Any]:
    """A complete Envoy bootstrap; ``grpc_address`` overrides where the router listens.
    ``secrets`` (default: read from the files and variables the config names) are written
    in clear: client API keys and, with fail-open, backend keys (see ``envoy_secret_paths``)."""
    secrets = secrets if secrets is not None else envoy_secrets(config)
    admin_host, admin_port = split_host_port(config.listener.admin)
    return {
        "node": {"id": "semantic-router-envoy", "cluster": "semantic-router"},
        "admin": {"address": socket_address(admin_host, admin_port)},
        "static_resources": {
            "listeners": [listener(config, secrets)],
            "clusters": clusters(config, grpc_address),
        },
    }


def fragment(config: RouterConfig, grpc_address: str | None = None,
             secrets: Secrets | None = None) -> dict[str, Any]:
    """What an existing Envoy needs: add the filters before its router filter, the clusters
    to its clusters and the virtual host (or its route) to its route config."""
    secrets = secrets if secrets is not None else envoy_secrets(config)
    return {
        "http_filters": http_filters(config, secrets)[:-1],
        "clusters": clusters(config, grpc_address),
        "virtual_host": virtual_host(config),
    }


def to_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, width=100)
