"""The router's vocabulary: header names, model-name kinds and default addresses.

Every header the router reads or writes is named here once, so the Envoy renderer, the
processor and the tests cannot drift apart.
"""

from __future__ import annotations

from typing import Final, NewType

PublicModelName = NewType("PublicModelName", str)
"""A name clients put in the request's ``model`` field (``auto`` or a configured model name)."""

ProviderModelId = NewType("ProviderModelId", str)
"""The id the backend itself serves (``Qwen/Qwen3-0.6B``); written into the forwarded body."""

ClusterName = NewType("ClusterName", str)
"""An Envoy cluster name, derived from a configured model name."""

CLUSTER_HEADER: Final = "x-semantic-router-cluster"
MODEL_HEADER: Final = "x-semantic-router-model"
DECISION_HEADER: Final = "x-semantic-router-decision"
DEBUG_HEADER: Final = "x-semantic-router-debug"
REQUEST_ID_HEADER: Final = "x-request-id"
CLIENT_ID_HEADER: Final = "x-client-id"
"""Set by Envoy's api_key_auth filter to the authenticated client id (never the key)."""
AUTHORIZATION_HEADER: Final = "authorization"

DEFAULT_AUTO_NAMES: Final = ("auto",)
DEFAULT_DECISION: Final = "default"
EXPLICIT_DECISION: Final = "explicit"

DEFAULT_LISTENER: Final = "127.0.0.1:8899"
DEFAULT_ENVOY_ADMIN: Final = "127.0.0.1:9901"
DEFAULT_GRPC: Final = "127.0.0.1:50051"
DEFAULT_ADMIN_HTTP: Final = "127.0.0.1:8080"

MAX_REQUEST_HEADERS_KB: Final = 60
"""Envoy's limit on a request's headers (its default, rendered explicitly); the simulated
backend accepts lines this long, so whatever Envoy forwards reaches its handlers."""

IMMEDIATE_DETAILS: Final = "semantic_router"
"""Response code details on the router's own replies (Envoy access logs show them)."""

EXT_PROC_SERVICE: Final = "envoy.service.ext_proc.v3.ExternalProcessor"
METADATA_NAMESPACE: Final = "envoy.filters.http.ext_proc"

CHAT_COMPLETIONS_PATH: Final = "/v1/chat/completions"
COMPLETIONS_PATH: Final = "/v1/completions"
RESPONSES_PATH: Final = "/v1/responses"
MODELS_PATH: Final = "/v1/models"

HEADER_ATTRIBUTES: Final = {
    ":path": "request.path",
    ":method": "request.method",
    REQUEST_ID_HEADER: "request.id",
    "content-type": "request.headers['content-type']",
    "content-encoding": "request.headers['content-encoding']",
    "content-length": "request.headers['content-length']",
    DEBUG_HEADER: f"request.headers['{DEBUG_HEADER}']",
}
"""The request headers the router reads, as the Envoy attributes (CEL expressions) that carry
them when a route skips the ext_proc headers phase: Envoy then sends them with the body."""
