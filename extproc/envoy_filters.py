"""Envoy HTTP filters the router needs, in chain order: a Lua filter that sets the default
cluster and drops client-sent routing headers, the ext_proc filter, with fail-open a second
Lua filter that maps model names while the router is unreachable, and the local-reply
mapping that gives Envoy's own errors the OpenAI error shape."""

from __future__ import annotations

from typing import Any

from extproc.config import RouterConfig
from extproc.envoy_clusters import EXTPROC_CLUSTER
from extproc.names import CLUSTER_HEADER, DECISION_HEADER, IMMEDIATE_DETAILS


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
