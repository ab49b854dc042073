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
from extproc.wire import field_bool, field_len, field_varint, len_key
from extproc.wire_struct import encode_struct, encode_value

__all__ = [
    "AdapterError",
    "BodyTemplate",
    "Mutations",
    "Phase",
    "RequestMessage",
    "body_template",
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
_CLEAR_ROUTE_CACHE: Final = field_bool(5, True)  # CommonResponse.clear_route_cache

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
    return _set_headers(set_headers) + _remove_headers(remove)


def _remove_headers(remove: list[str]) -> bytes:
    return b"".join([field_len(2, _name_bytes(name)) for name in remove]) if remove else b""


def _set_headers(set_headers: Mapping[str, str]) -> bytes:
    """HeaderMutation.set_headers entries."""
    return _pairs_bytes(tuple(set_headers.items())) if set_headers else b""


def _pairs_bytes(pairs: tuple[tuple[str, str], ...]) -> bytes:
    """set_headers entries for ``pairs``; a route's headers repeat on every request like it,
    so the whole run is cached (an unhashable value is built uncached, which reports it)."""
    try:
        return _set_headers_cached(pairs)
    except TypeError:
        return _set_headers_uncached(pairs)


def _set_headers_uncached(pairs: tuple[tuple[str, str], ...]) -> bytes:
    return b"".join([field_len(1, _header_option(name, value)) for name, value in pairs])


# bounded, so no leak; a name or value that fails validation raises and is not cached
_set_headers_cached = functools.lru_cache(maxsize=1024)(_set_headers_uncached)


def _dynamic_metadata(metadata: Mapping[str, Mapping[str, str | float | bool]]) -> bytes:
    """A Struct whose top-level keys are namespaces and whose values are Structs."""
    try:
        # the type is part of the key: True == 1 == 1.0 would otherwise share an entry
        key = tuple(
            (namespace, tuple(zip(values, map(type, values.values()), values.values(),
                                  strict=True)))
            for namespace, values in metadata.items()
        )
        return _dynamic_metadata_cached(key)
    except TypeError:  # an unhashable value: build it uncached, which reports it
        return _dynamic_metadata_uncached(metadata)


@functools.lru_cache(maxsize=1024)  # a route's metadata repeats on every request like it
def _dynamic_metadata_cached(
    key: tuple[tuple[str, tuple[tuple[str, type, str | float | bool], ...]], ...],
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


def _body_headers(set_headers: Mapping[str, str], remove: list[str]) -> tuple[bytes, bytes]:
    """A HeaderMutation with a new body, less its content-length entry: the entries that go
    before it and those after (the removals, any removal of content-length dropped). The
    entry takes the place of a content-length in ``set_headers``, else it goes last, where
    ``{**set_headers, "content-length": ...}`` puts it."""
    if _CONTENT_LENGTH in set_headers:
        pairs = tuple(set_headers.items())
        at = [name for name, _ in pairs].index(_CONTENT_LENGTH)
        before, after = _pairs_bytes(pairs[:at]), _pairs_bytes(pairs[at + 1 :])
    else:
        before, after = _set_headers(set_headers), b""
    if remove:
        after += _remove_headers([name for name in remove if name != _CONTENT_LENGTH])
    return before, after


@functools.lru_cache(maxsize=4096)  # body lengths repeat; bounded, so no leak
def _length_entry(size: int) -> bytes:
    """The content-length entry of a HeaderMutation for a body of ``size`` bytes."""
    return field_len(1, _header_option(_CONTENT_LENGTH, str(size)))


def _assemble(number: int, mutation: bytes, body: bytes | None, clear_route_cache: bool,
              metadata: bytes) -> bytes:
    """ProcessingResponse{<phase>=number: {response=1: CommonResponse{status=1 (CONTINUE=0,
    omitted), header_mutation=2, body_mutation=3, clear_route_cache=5}}, dynamic_metadata
    (``metadata``: the whole field, or empty)}, joined once so a large body is copied once."""
    parts = [field_len(2, mutation)] if mutation else []
    if body is not None:
        # BodyMutation.body=1 is a oneof member: written even when empty (clears the body).
        inner = len_key(1, len(body))
        parts += (len_key(3, len(inner) + len(body)), inner, body)
    if clear_route_cache:
        parts.append(_CLEAR_ROUTE_CACHE)
    size = sum(map(len, parts))
    common = len_key(1, size)
    parts[:0] = (len_key(number, len(common) + size), common)
    if metadata:
        parts.append(metadata)
    return b"".join(parts)


def _metadata_field(metadata: Mapping[str, Mapping[str, str | float | bool]] | None) -> bytes:
    if not metadata:
        return b""
    return field_len(_RESP_DYNAMIC_METADATA, _dynamic_metadata(metadata))


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
        return field_len(number, inner) + _metadata_field(mutations.dynamic_metadata)
    # HeadersResponse / BodyResponse: response=1 (CommonResponse), written even if empty.
    body = mutations.body
    if body is None:
        mutation = _header_mutation(mutations.set_headers, mutations.remove_headers)
    else:
        if phase not in _BODY_PHASES:
            # Envoy only honours a body in a headers response with CONTINUE_AND_REPLACE.
            raise AdapterError(f"a body mutation is not allowed in {phase.value}")
        before, after = _body_headers(mutations.set_headers, mutations.remove_headers)
        mutation = before + _length_entry(len(body)) + after
    return _assemble(number, mutation, body, mutations.clear_route_cache,
                     _metadata_field(mutations.dynamic_metadata))


@dataclass(frozen=True, slots=True)
class BodyTemplate:
    """A body-phase answer built once for every body: :meth:`render` returns exactly what
    :func:`continue_response` returns for the template's mutations with that body. Made by
    :func:`body_template`, for answers whose headers and metadata repeat on every request."""

    number: int
    before: bytes
    after: bytes
    clear_route_cache: bool
    metadata: bytes

    def render(self, body: bytes) -> bytes:
        mutation = self.before + _length_entry(len(body)) + self.after
        return _assemble(self.number, mutation, body, self.clear_route_cache, self.metadata)


def body_template(phase: Phase, mutations: Mutations) -> BodyTemplate:
    """Build ``continue_response(phase, mutations)`` but for its body, which each
    :meth:`BodyTemplate.render` supplies (``mutations.body`` must be None). Raises
    :class:`AdapterError` where :func:`continue_response` would, and for a phase that
    carries no body."""
    if phase not in _BODY_PHASES:
        raise AdapterError(f"a body mutation is not allowed in {phase.value}")
    if mutations.body is not None:
        raise AdapterError("a body template takes its body in render()")
    before, after = _body_headers(mutations.set_headers, mutations.remove_headers)
    return BodyTemplate(_RESPONSE_FIELD[phase], before, after, mutations.clear_route_cache,
                        _metadata_field(mutations.dynamic_metadata))


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
