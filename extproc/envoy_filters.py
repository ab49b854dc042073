"""Envoy HTTP filters the router needs, in chain order: with ``listener.auth`` Envoy's own
api_key_auth filter (client keys inline: see ``extproc.security``), a Lua filter that sets the
default cluster and drops client-sent routing headers, the ext_proc filter, with fail-open a
second Lua filter that maps model names while the router is unreachable, and the local-reply
mapping that gives Envoy's own errors the OpenAI error shape (a 408 names the client-side
timeouts, ``listener.request_headers_timeout_s`` and ``request_timeout_s``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extproc.config import RouterConfig
from extproc.config.schema import CorsSettings
from extproc.envoy_clusters import EXTPROC_CLUSTER
from extproc.names import (
    AUTHORIZATION_HEADER,
    CLIENT_ID_HEADER,
    CLUSTER_HEADER,
    DECISION_HEADER,
    HEADER_ATTRIBUTES,
    IMMEDIATE_DETAILS,
    MODEL_HEADER,
)
from extproc.security import ClientKey, Secrets

EXT_PROC_FILTER = "envoy.filters.http.ext_proc"  # the filter's name: per-route configs use it
ROUTE_FROM_METADATA_FILTER = "semantic_router.route_from_metadata"

# response_code_details of Envoy's api_key_auth filter (verified on Envoy 1.40)
AUTH_DETAILS = {"missing_api_key": "missing API key; send 'Authorization: Bearer <key>'",
                "unknown_api_key": "incorrect API key provided"}


def _lua(code: str) -> dict[str, Any]:
    return {
        "name": "envoy.filters.http.lua",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
            "default_source_code": {"inline_string": code},
        },
    }


def lua_filter(default_cluster: str) -> dict[str, Any]:
    code = (
        "function envoy_on_request(handle)\n"
        f'  handle:headers():replace("{CLUSTER_HEADER}", "{default_cluster}")\n'
        f'  handle:headers():remove("{DECISION_HEADER}")\n'
        "  handle:clearRouteCache()\n"
        "end\n"
    )
    return _lua(code)


def _lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def fail_open_lua_filter(config: RouterConfig,
                         backend_auth: Mapping[str, str] | None = None) -> dict[str, Any]:
    """After ext_proc, only with fail-open: when the router did not handle a request (no
    decision header), map its ``model`` the way the router would for explicit names, and
    send auto names to the default model, so the backend gets a model id it serves, with
    its ``authorization`` when the model has ``api_key_env`` (``backend_auth``).

    A Lua pattern finds the first ``"model": "..."`` in the body: a degraded path that keeps
    clients working while the router is down, not a JSON parser."""
    routes = {name: config.default_model for name in config.auto_names}
    routes.update(config.models)
    auth = backend_auth or {}
    table = ",\n".join(
        f"  [{_lua_string(name)}] = {{{_lua_string(t.cluster)}, "
        f"{_lua_string(t.provider_model_id)}"
        + (f", {_lua_string(auth[t.name])}}}" if t.name in auth else "}")
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
        f'  if route[3] ~= nil then handle:headers():replace("{AUTHORIZATION_HEADER}", route[3])'
        " end\n"
        "  local rewritten = string.sub(text, 1, first - 1) .. '\"model\": \"' .. route[2]"
        " .. '\"' .. string.sub(text, last + 1)\n"
        "  body:setBytes(rewritten)\n"
        "  handle:clearRouteCache()\n"
        "end\n"
    )
    return _lua(code)


def ext_proc_filter(config: RouterConfig) -> dict[str, Any]:
    timeout_s = config.router.message_timeout_ms / 1000
    return {
        "name": EXT_PROC_FILTER,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3."
            "ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": EXTPROC_CLUSTER}},
            "failure_mode_allow": config.router.failure_mode == "open",
            "message_timeout": f"{timeout_s:g}s",
            "allow_mode_override": True,
            "processing_mode": _processing_mode("SEND"),
            "request_attributes": list(HEADER_ATTRIBUTES.values()),
            "metadata_options": {
                "receiving_namespaces": {"untyped": ["envoy.filters.http.ext_proc"]},
            },
        },
    }


def _processing_mode(request_headers: str) -> dict[str, str]:
    return {
        "request_header_mode": request_headers,
        # the response headers come from dynamic metadata (virtual host
        # response_headers_to_add): one ext_proc message less per request
        "response_header_mode": "SKIP",
        "request_body_mode": "BUFFERED",
        "response_body_mode": "NONE",
        "request_trailer_mode": "SKIP",
        "response_trailer_mode": "SKIP",
    }


def one_message_routing(config: RouterConfig) -> bool:
    """Whether the rendered routes send OpenAI POSTs to the router as one message. Envoy
    drops header mutations answered to a body whose headers phase was skipped, so the
    routing headers come from dynamic metadata (``route_from_metadata_filter``); backend
    credentials (``api_key_env``) and ``set_headers`` plugins need real header mutations,
    so configs that use them keep the headers phase."""
    if not config.router.one_message_requests:
        return False
    if any(ref.api_key_env for m in config.source.providers.models for ref in m.backend_refs):
        return False
    return not any(d.plugins.set_headers for d in config.decisions)


def route_from_metadata_filter() -> dict[str, Any]:
    """After ext_proc: where the router's header mutations were dropped (one-message
    routes), set the cluster and decision headers from the router's dynamic metadata and
    re-route. A request that already has the decision header was routed by mutations."""
    code = (
        "function envoy_on_request(handle)\n"
        # With the headers phase skipped, ext_proc lets headers pass at once and holds only
        # the body: waiting for the body here holds the headers back from the router filter
        # until the router has answered (header objects taken before body() go stale).
        "  if handle:body() == nil then return end\n"
        "  local headers = handle:headers()\n"
        f'  if headers:get("{DECISION_HEADER}") ~= nil then return end\n'
        "  local meta = handle:streamInfo():dynamicMetadata()"
        f':get("{EXT_PROC_FILTER}")\n'
        '  if meta == nil or meta["cluster"] == nil then return end\n'
        f'  headers:replace("{CLUSTER_HEADER}", meta["cluster"])\n'
        f'  headers:replace("{DECISION_HEADER}", meta["decision"])\n'
        "  handle:clearRouteCache()\n"
        "end\n"
    )
    # No default code: only the one-message routes name this script (one_message_override),
    # so no other request has its body held here.
    return {
        "name": ROUTE_FROM_METADATA_FILTER,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
            "source_codes": {ROUTE_FROM_METADATA_FILTER: {"inline_string": code}},
        },
    }


def one_message_override() -> dict[str, Any]:
    """Per-route ext_proc config for POSTs that carry a body: skip the headers phase. The
    filter's ``request_attributes`` then carry the headers the router reads with the body
    (verified on Envoy 1.40: Envoy sends them with the first message it sends, whatever the
    phase; ``request_attributes`` in a per-route override, by contrast, are not sent)."""
    return {
        EXT_PROC_FILTER: {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3."
            "ExtProcPerRoute",
            "overrides": {"processing_mode": _processing_mode("SKIP")},
        },
        ROUTE_FROM_METADATA_FILTER: {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute",
            "name": ROUTE_FROM_METADATA_FILTER,
        },
    }


def api_key_auth_filter(keys: tuple[ClientKey, ...]) -> dict[str, Any]:
    """Envoy's own API key check, first in the chain. It reads ``Authorization: Bearer <key>``
    (the exact ``Bearer `` prefix is stripped; a bare key is accepted too), removes the header
    before anything else sees it and forwards only the client id."""
    return {
        "name": "envoy.filters.http.api_key_auth",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3."
                     "ApiKeyAuth",
            "credentials": [{"key": k.key, "client": k.client} for k in keys],
            "key_sources": [{"header": AUTHORIZATION_HEADER}],
            "forwarding": {"header": CLIENT_ID_HEADER, "hide_credentials": True},
        },
    }


CORS_FILTER = "envoy.filters.http.cors"
_CORS_HEADERS = "authorization, content-type, *"  # "*" alone never covers Authorization
_CORS_EXPOSED = (MODEL_HEADER, DECISION_HEADER, "x-request-id", "retry-after")


def cors_policy(cors: CorsSettings) -> dict[str, Any]:
    """The virtual host's CORS policy (``listener.cors``): the filter answers a preflight
    from an allowed origin itself and adds the allow headers to every answer to one, the
    router's and Envoy's errors included."""
    origins = [{"safe_regex": {"regex": ".*"}} if o == "*" else {"exact": o}
               for o in cors.allow_origins]
    return {CORS_FILTER: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy",
        "allow_origin_string_match": origins,
        "allow_methods": "GET, POST, OPTIONS",
        "allow_headers": _CORS_HEADERS,
        "expose_headers": ", ".join(_CORS_EXPOSED),
        "max_age": str(cors.max_age_s),
    }}


def http_filters(config: RouterConfig, secrets: Secrets | None = None) -> list[dict[str, Any]]:
    """The chain; ``secrets`` holds what auth and the fail-open fallback need in clear. CORS
    comes first: a browser's preflight carries no API key."""
    secrets = secrets or Secrets()
    cors = ([{"name": CORS_FILTER, "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}}]
        if config.listener.cors else [])
    auth = [api_key_auth_filter(secrets.client_keys)] if config.listener.auth else []
    fail_open = ([fail_open_lua_filter(config, secrets.backend_auth)]
                 if config.router.failure_mode == "open" else [])
    return [
        *cors,
        *auth,
        lua_filter(config.default_model.cluster),
        ext_proc_filter(config),
        *([route_from_metadata_filter()] if one_message_routing(config) else []),
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


def _request_timeout_message(config: RouterConfig) -> str:
    """How long a client may take to send its request (0 = no limit): Envoy's
    ``request_headers_timeout`` from its first byte to the end of its headers, and
    ``request_timeout`` until the whole request has passed the filters, disarmed once that
    happens or a response starts (it never cuts a generation or an SSE stream)."""
    listener = config.listener
    limits = [f"{part} within {seconds:g} s" for part, seconds in
              (("its headers", listener.request_headers_timeout_s),
               ("all of it", listener.request_timeout_s))
              if seconds]
    return ("the request was not received in time (%RESPONSE_CODE_DETAILS%)"
            + ("; send " + " and ".join(limits) if limits else ""))


def local_reply_config(config: RouterConfig) -> dict[str, Any]:
    """Envoy's own local replies (413 from its buffer, 4xx for requests it refuses to parse,
    5xx when a backend or the router is unreachable) get the OpenAI error shape too. The
    router's replies carry the details ``IMMEDIATE_DETAILS`` and are left as they are.

    Envoy's reply body is empty for some (a path it cannot normalize, such as one with a
    '#fragment'; an unknown cluster) and a mapper cannot test for that, so the generic
    messages are fixed text naming Envoy's response code details (``http1.codec_error``,
    ``no_healthy_upstream``), never an empty string. Details that carry a transport reason in
    braces (a refused connection) are left to Envoy's access log: the client gets plain words."""
    ours = f"response.code_details != '{IMMEDIATE_DETAILS}'"
    limit = config.listener.max_request_bytes
    auth = [
        {"filter": _cel(f"response.code_details == '{details}'"),
         "headers_to_add": [{"header": {"key": "www-authenticate", "value": "Bearer"},
                             "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
         "body_format_override": _openai_error(message, "invalid_request_error",
                                               "invalid_api_key")}
        for details, message in AUTH_DETAILS.items()
    ] if config.listener.auth is not None else []
    return {"mappers": [
        *auth,
        {"filter": _cel("response.code_details == 'request_payload_too_large'"),
         "body_format_override": _openai_error(
             f"request body is larger than the limit of {limit} bytes",
             "invalid_request_error", "request_too_large")},
        {"filter": _cel(f"{ours} && response.code_details.startsWith('ext_proc')"),
         "body_format_override": _openai_error(
             "the semantic router is unavailable; retry shortly", "server_error",
             "router_unavailable")},
        # A client too slow to send its request (request_header_timeout,
        # request_overall_timeout): a slow upload, or a connection held open on purpose
        {"filter": _cel(f"{ours} && response.code == 408"),
         "body_format_override": _openai_error(
             _request_timeout_message(config), "invalid_request_error", "request_timeout")},
        # A request Envoy's codec cannot take (`transfer-encoding: gzip, chunked`): 501 in
        # HTTP terms, but the client's mistake, so a 400 like any malformed request.
        {"filter": _cel(f"{ours} && response.code == 501"),
         "status_code": 400,
         "body_format_override": _openai_error(
             "the proxy could not parse the request (%RESPONSE_CODE_DETAILS%)",
             "invalid_request_error", "request_rejected")},
        # A backend silent for listener.stream_idle_timeout_s: a retry would run the same
        # long generation again, so the SDKs are told not to (they honour x-should-retry)
        {"filter": _cel("response.code_details == 'stream_idle_timeout'"),
         "headers_to_add": [{"header": {"key": "x-should-retry", "value": "false"},
                             "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
         "body_format_override": _openai_error(
             f"the model sent nothing for {config.listener.stream_idle_timeout_s:g} s "
             "(listener.stream_idle_timeout_s); stream the response or raise the limit",
             "server_error", "timeout")},
        # Details with a transport reason in braces, such as
        # upstream_reset_before_response_started{remote_connection_failure|delayed_connect_
        # error:_Connection_refused}, stay in the access log; the client gets plain words.
        {"filter": _cel(f"{ours} && response.code >= 500 && "
                        "response.code_details.startsWith('upstream_reset_before')"),
         "body_format_override": _openai_error(
             "the upstream is unavailable (the model's backend refused or closed the "
             "connection); retry shortly", "server_error", "upstream_unavailable")},
        {"filter": _cel(f"{ours} && response.code >= 500 && "
                        "response.code_details.contains('{')"),
         "body_format_override": _openai_error(
             "the upstream is unavailable (the proxy's access log has the cause); retry "
             "shortly", "server_error",
             "upstream_unavailable")},
        {"filter": _cel(f"{ours} && response.code >= 500"),
         "body_format_override": _openai_error(
             "the upstream is unavailable (%RESPONSE_CODE_DETAILS%)", "server_error",
             "upstream_unavailable")},
        {"filter": _cel(f"{ours} && response.code >= 400"),
         "body_format_override": _openai_error(
             "the proxy refused the request (%RESPONSE_CODE_DETAILS%)",
             "invalid_request_error", "request_rejected")},
    ]}
