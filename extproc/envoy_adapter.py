"""The one place the rest of the router reads or builds Envoy ext_proc protos
(envoy.service.ext_proc.v3): this module builds the responses and re-exports the request
reader of :mod:`extproc.envoy_request`.

The gRPC server hands us raw ``ProcessingRequest`` bytes and sends back raw
``ProcessingResponse`` bytes; the two modules turn them into small Python values and back with
:mod:`extproc.wire`, because betterproto2 costs 50-300 µs per message on the hot path.

Constraints:
- Output is byte-identical to ``bytes()`` of the equivalent envoy-data-plane message: fields in
  declaration (= field-number) order, proto3 defaults omitted. Tests pin this.
- Field numbers below were checked against envoy-data-plane 2.2's generated code.
- Header values go out as ``raw_value`` (a ``value`` arrives empty in Envoy: 503 NC), always
  with ``append_action = OVERWRITE_IF_EXISTS_OR_ADD``. A new body always sets
  ``content-length`` (a changed length without it makes Envoy answer 500).
- Header text is UTF-8 with ``errors="surrogateescape"`` both ways: valid UTF-8 reads as
  text, any other byte round-trips unchanged when a value is copied into a mutation.
- Names and values are validated before they reach the wire: names must be lower-case
  RFC 7230 tokens; values must not hold control characters other than tab.
- Malformed input and invalid mutations raise :class:`AdapterError`, never anything else.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from extproc.envoy_request import (
    BODY_PHASES,
    PHASES,
    TRAILER_PHASES,
    AdapterError,
    Phase,
    RequestMessage,
    parse_request,
)
from extproc.wire import field_bool, field_len, field_varint
from extproc.wire_struct import encode_struct, encode_value

__all__ = [
    "AdapterError",
    "Mutations",
    "Phase",
    "RequestMessage",
    "continue_response",
    "immediate_response",
    "parse_request",
    "skip_rest_response",
]


@dataclass(slots=True)
class Mutations:
    """What the processor wants changed; only :func:`continue_response` turns it into protos."""

    set_headers: dict[str, str] = field(default_factory=dict)
    remove_headers: list[str] = field(default_factory=list)
    body: bytes | None = None
    clear_route_cache: bool = False
    dynamic_metadata: Mapping[str, Mapping[str, str | float | bool]] | None = None


# --- field numbers (envoy-data-plane 2.2) ---------------------------------------------------

_RESPONSE_FIELD: Final = dict(zip(PHASES, range(1, 7), strict=True))
_BODY_PHASES: Final = BODY_PHASES
_TRAILER_PHASES: Final = TRAILER_PHASES
_RESP_IMMEDIATE: Final = 7  # ProcessingResponse.immediate_response
_RESP_DYNAMIC_METADATA: Final = 8  # ProcessingResponse.dynamic_metadata (google.protobuf.Struct)
_RESP_MODE_OVERRIDE: Final = 9  # ProcessingResponse.mode_override (ProcessingMode)
_MODE_RESPONSE_HEADER: Final = 2  # ProcessingMode.response_header_mode
_HEADER_MODE_SKIP: Final = 2  # ProcessingMode.HeaderSendMode.SKIP; BodySendMode.NONE is 0
_OVERWRITE_IF_EXISTS_OR_ADD: Final = 2  # HeaderValueOption.HeaderAppendAction
_APPEND_ACTION: Final = field_varint(3, _OVERWRITE_IF_EXISTS_OR_ADD)  # HeaderValueOption field 3

# envoy.type.v3.StatusCode values less 0 and 100: the proto declares HttpStatus.code
# `defined_only` (a code outside the enum is an invalid message) and 1xx is no final reply.
_HTTP_STATUSES: Final = frozenset(
    [
        *range(200, 209), 226, *range(300, 306), 307, 308, *range(400, 418), *range(421, 425),
        426, 428, 429, 431, *range(500, 509), 510, 511,
    ]
)  # fmt: skip
_CONTENT_LENGTH: Final = "content-length"
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")
_BAD_VALUE_CHAR: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


# --- building --------------------------------------------------------------------------------


def _name_bytes(name: object) -> bytes:
    """A validated header name as wire bytes."""
    if not isinstance(name, str):
        raise AdapterError(f"invalid header name {name!r}: not text")
    return _checked_name(name)


@functools.lru_cache(maxsize=1024)  # names repeat on every request; bounded, so no leak
def _checked_name(name: str) -> bytes:
    if _TOKEN.fullmatch(name) is None:
        raise AdapterError(f"invalid header name {name!r}: not a lower-case RFC 7230 token")
    return name.encode("ascii")


def _value_bytes(name: object, value: object) -> bytes:
    if not isinstance(value, str) or _BAD_VALUE_CHAR.search(value) is not None:
        raise AdapterError(f"invalid value for header {name!r}: control character or not text")
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as err:
        raise AdapterError(f"invalid value for header {name!r}: {err.reason}") from err


def _header_option(name: object, value: object) -> bytes:
    """HeaderValueOption{header: HeaderValue{key=1, raw_value=3}, append_action=3}."""
    if isinstance(name, str) and isinstance(value, str):
        return _header_option_cached(name, value)
    return _header_option_cached.__wrapped__(name, value)  # reports the bad name or value


@functools.lru_cache(maxsize=4096)  # clusters, decisions, lengths repeat; bounded, so no leak
def _header_option_cached(name: str, value: str) -> bytes:
    raw = _value_bytes(name, value)
    header = field_len(1, _name_bytes(name))
    if raw:  # proto3: an empty raw_value is the default and is not written
        header += field_len(3, raw)
    return field_len(1, header) + _APPEND_ACTION


def _header_mutation(set_headers: Mapping[str, str], remove: list[str]) -> bytes:
    """HeaderMutation: set_headers=1 (repeated HeaderValueOption), remove_headers=2."""
    parts = [field_len(1, _header_option(name, value)) for name, value in set_headers.items()]
    parts.extend(field_len(2, _name_bytes(name)) for name in remove)
    return b"".join(parts)


def _dynamic_metadata(metadata: Mapping[str, Mapping[str, str | float | bool]]) -> bytes:
    """A Struct whose top-level keys are namespaces and whose values are Structs."""
    try:
        # the type is part of the key: True == 1 == 1.0 would otherwise share an entry
        key = tuple(
            (namespace, tuple((k, type(v).__name__, v) for k, v in values.items()))
            for namespace, values in metadata.items()
        )
        return _dynamic_metadata_cached(key)
    except TypeError:  # an unhashable value: build it uncached, which reports it
        return _dynamic_metadata_uncached(metadata)


@functools.lru_cache(maxsize=1024)  # a route's metadata repeats on every request like it
def _dynamic_metadata_cached(
    key: tuple[tuple[str, tuple[tuple[str, str, str | float | bool], ...]], ...],
) -> bytes:
    return _dynamic_metadata_uncached(
        {namespace: {k: v for k, _, v in values} for namespace, values in key}
    )


def _dynamic_metadata_uncached(metadata: Mapping[str, Mapping[str, str | float | bool]]) -> bytes:
    try:
        namespaces = {
            namespace: field_len(
                5, encode_struct({key: encode_value(value) for key, value in values.items()})
            )
            for namespace, values in metadata.items()
        }
        return encode_struct(namespaces)
    except TypeError as err:
        raise AdapterError(f"dynamic metadata value: {err}") from err
    except (AttributeError, OverflowError, UnicodeEncodeError) as err:
        raise AdapterError(f"invalid dynamic metadata: {err}") from err


def _common_response(phase: Phase, mutations: Mutations) -> bytes:
    """CommonResponse: status=1 (CONTINUE=0, omitted), header_mutation=2, body_mutation=3,
    clear_route_cache=5."""
    set_headers: Mapping[str, str] = mutations.set_headers
    remove = mutations.remove_headers
    body = mutations.body
    if body is not None:
        if phase not in _BODY_PHASES:
            # Envoy only honours a body in a headers response with CONTINUE_AND_REPLACE.
            raise AdapterError(f"a body mutation is not allowed in {phase.value}")
        set_headers = {**set_headers, _CONTENT_LENGTH: str(len(body))}
        remove = [name for name in remove if name != _CONTENT_LENGTH]
    out = b""
    if set_headers or remove:
        out += field_len(2, _header_mutation(set_headers, remove))
    if body is not None:
        # BodyMutation.body=1 is a oneof member: written even when empty (clears the body).
        out += field_len(3, field_len(1, body))
    if mutations.clear_route_cache:
        out += field_bool(5, True)
    return out


def _is_empty(mutations: Mutations) -> bool:
    return not (
        mutations.set_headers
        or mutations.remove_headers
        or mutations.body is not None
        or mutations.clear_route_cache
        or mutations.dynamic_metadata
    )


def _build_continue(phase: Phase, mutations: Mutations) -> bytes:
    number = _RESPONSE_FIELD.get(phase)
    if number is None:
        raise AdapterError(f"no response exists for phase {phase.value}")
    if phase in _TRAILER_PHASES:
        # TrailersResponse has only header_mutation=1: no status, body or route-cache flag.
        if mutations.body is not None or mutations.clear_route_cache:
            raise AdapterError(f"{phase.value} allows header mutations only")
        inner = b""
        if mutations.set_headers or mutations.remove_headers:
            inner = field_len(1, _header_mutation(mutations.set_headers, mutations.remove_headers))
    else:
        # HeadersResponse / BodyResponse: response=1 (CommonResponse), written even if empty.
        inner = field_len(1, _common_response(phase, mutations))
    out = field_len(number, inner)
    if mutations.dynamic_metadata:
        out += field_len(_RESP_DYNAMIC_METADATA, _dynamic_metadata(mutations.dynamic_metadata))
    return out


# Built once at import: the no-mutation answer for every phase is a constant.
_CONTINUE: Final = {phase: _build_continue(phase, Mutations()) for phase in _RESPONSE_FIELD}
_SKIP_REST: Final = _CONTINUE[Phase.REQUEST_HEADERS] + field_len(
    _RESP_MODE_OVERRIDE, field_varint(_MODE_RESPONSE_HEADER, _HEADER_MODE_SKIP)
)


def continue_response(phase: Phase, mutations: Mutations | None = None) -> bytes:
    """A ``ProcessingResponse`` continuing ``phase``, applying ``mutations`` if any.

    Header and body phases carry ``CommonResponse{status: CONTINUE, ...}``; trailer phases a
    ``TrailersResponse`` (header mutations only). A body is allowed only in body phases and
    sets ``content-length`` (dropping any removal of it). Raises :class:`AdapterError` for
    ``Phase.UNKNOWN``, invalid header names/values or misplaced mutations.
    """
    if mutations is None or _is_empty(mutations):
        cached = _CONTINUE.get(phase)
        if cached is None:
            raise AdapterError(f"no response exists for phase {phase.value}")
        return cached
    return _build_continue(phase, mutations)


def skip_rest_response() -> bytes:
    """Continue request headers and skip the rest of the exchange, for paths not routed here.

    ``mode_override = ProcessingMode{request_body_mode: NONE, response_header_mode: SKIP}``
    (NONE is the proto3 default, so only the SKIP field is on the wire). Envoy honours it
    only with ``allow_mode_override: true`` on the filter.
    """
    return _SKIP_REST


def immediate_response(
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    details: str = "",
) -> bytes:
    """``ProcessingResponse.immediate_response``: ImmediateResponse{status=1 HttpStatus{code=1},
    headers=2 HeaderMutation, body=3, details=5}; ``headers`` (content-type included) are sent
    as given. Raises :class:`AdapterError` for a status Envoy does not define or bad headers."""
    if not isinstance(status, int) or isinstance(status, bool) or status not in _HTTP_STATUSES:
        raise AdapterError(f"HTTP status {status!r} is not one Envoy's StatusCode defines")
    out = field_len(1, field_varint(1, status))
    if headers:
        out += field_len(2, _header_mutation(headers, []))
    if body:
        out += field_len(3, body)
    if details:
        try:
            out += field_len(5, details.encode("utf-8"))
        except UnicodeEncodeError as err:
            raise AdapterError(f"invalid details {details!r}: {err.reason}") from err
    return field_len(_RESP_IMMEDIATE, out)
