"""Reading Envoy ext_proc requests (envoy.service.ext_proc.v3.ProcessingRequest) from raw bytes
into small Python values; :mod:`extproc.envoy_adapter` builds the responses and re-exports
what is defined here, so callers import one module.

Constraints (shared with the adapter): field numbers checked against envoy-data-plane 2.2's
generated code; header text is UTF-8 with ``errors="surrogateescape"``; malformed input raises
:class:`AdapterError`, never anything else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from extproc.wire import WireError, iter_fields, read_varint
from extproc.wire_struct import map_entry, value_text


class AdapterError(ValueError):
    """An ext_proc message could not be read, or a response could not be built."""


class Phase(enum.Enum):
    """The ext_proc message kind; values double as log and metric labels."""

    REQUEST_HEADERS = "request_headers"
    RESPONSE_HEADERS = "response_headers"
    REQUEST_BODY = "request_body"
    RESPONSE_BODY = "response_body"
    REQUEST_TRAILERS = "request_trailers"
    RESPONSE_TRAILERS = "response_trailers"
    UNKNOWN = "unknown"

    # Members compare by identity; Enum's own __hash__ hashes the name in Python on every
    # dict or set lookup (several per message on the hot path).
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class RequestMessage:
    """One ``ProcessingRequest``, reduced to what the router reads.

    ``headers`` holds header or trailer fields (lower-cased names; repeats joined with ",");
    ``body`` the chunk of a body phase. ``end_of_stream`` is always true for trailers.
    ``attributes`` are the filter's ``request_attributes`` (CEL expression -> value as text),
    which Envoy sends with the first message it sends, also when it skips the headers phase.
    """

    phase: Phase
    headers: Mapping[str, str]
    body: bytes
    end_of_stream: bool
    attributes: Mapping[str, str] = field(default_factory=dict)


# --- field numbers (envoy-data-plane 2.2) ---------------------------------------------------

# ProcessingRequest.request lists the six phases in Phase's order from field 2
# (request_headers=2 .. response_trailers=7); ProcessingResponse.response does from field 1.
PHASES: Final = tuple(Phase)[:6]
_REQUEST_PHASES: Final = dict(zip(range(2, 8), PHASES, strict=True))
BODY_PHASES: Final = frozenset({Phase.REQUEST_BODY, Phase.RESPONSE_BODY})
TRAILER_PHASES: Final = frozenset({Phase.REQUEST_TRAILERS, Phase.RESPONSE_TRAILERS})
_REQ_ATTRIBUTES: Final = 9  # ProcessingRequest.attributes: map<string, google.protobuf.Struct>


# --- reading ---------------------------------------------------------------------------------


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _header_value(data: bytes) -> tuple[str, str]:
    """HeaderValue: key=1, value=2, raw_value=3; Envoy sends raw_value, older ones value."""
    key = b""
    value = b""
    raw_value = b""
    for number, _, item in iter_fields(data):
        if number > 3:
            continue
        if not isinstance(item, bytes):
            raise AdapterError(f"HeaderValue field {number} has the wrong wire type")
        if number == 1:
            key = item
        elif number == 2:
            value = item
        else:
            raw_value = item
    return _text(key).lower(), _text(raw_value or value)


def _header_map_slow(
    data: bytes, headers: dict[str, str], wanted: frozenset[bytes] | None = None
) -> dict[str, str]:
    """Generic path of :func:`_header_map`, for entries the fast path does not recognise."""
    for number, _, item in iter_fields(data):
        if number != 1:
            continue
        if not isinstance(item, bytes):
            raise AdapterError("HeaderMap.headers has the wrong wire type")
        name, value = _header_value(item)
        if wanted is not None and name.encode("utf-8", "surrogateescape") not in wanted:
            continue
        previous = headers.get(name)
        headers[name] = value if previous is None else f"{previous},{value}"
    return headers


def _header_map(
    data: bytes, headers: dict[str, str], wanted: frozenset[bytes] | None = None
) -> dict[str, str]:
    """Add HeaderMap entries (headers=1, repeated HeaderValue) to ``headers``; return it.

    Repeated names fold into one value joined with "," as HTTP allows for list-valued fields.
    Inlined fast path for what Envoy sends (each entry ``key=1`` then ``raw_value=3``, one-byte
    lengths): about a third cheaper than the generic reader, which handles everything else.
    With ``wanted`` (lower-case names as bytes), other headers are skipped undecoded.
    """
    pos = 0
    end = len(data)
    while pos < end:
        if data[pos] != 0x0A or pos + 1 >= end:  # not headers=1 (LEN): take the generic path
            return _header_map_slow(data[pos:], headers, wanted)
        size = data[pos + 1]
        if size < 0x80:
            pos += 2
        else:
            size, pos = read_varint(data, pos + 1)
        stop = pos + size
        if stop > end:
            raise WireError("HeaderValue runs past the end of the HeaderMap")
        key_end = pos + 2 + (data[pos + 1] if pos + 1 < stop else 0x80)
        if (
            key_end + 2 <= stop  # first: it bounds every index below
            and data[pos] == 0x0A
            and data[key_end] == 0x1A
            and data[key_end + 1] < 0x80
            and key_end + 2 + data[key_end + 1] == stop
        ):
            key = data[pos + 2 : key_end]
            if wanted is not None and key not in wanted and key.lower() not in wanted:
                pos = stop
                continue
            name = _text(key).lower()
            value = _text(data[key_end + 2 : stop])
        else:
            name, value = _header_value(data[pos:stop])
            if wanted is not None and name.encode("utf-8", "surrogateescape") not in wanted:
                pos = stop
                continue
        pos = stop
        previous = headers.get(name)
        headers[name] = value if previous is None else f"{previous},{value}"
    return headers


def _message(data: bytes, phase: Phase, wanted: frozenset[bytes] | None) -> RequestMessage:
    """HttpHeaders (headers=1, end_of_stream=3), HttpBody (body=1, end_of_stream=2) or
    HttpTrailers (trailers=1); other fields (attributes, newer additions) are skipped."""
    headers: dict[str, str] = {}
    body = b""
    end_of_stream = phase in TRAILER_PHASES
    is_body = phase in BODY_PHASES
    eos_field = 2 if is_body else 3
    for number, _, item in iter_fields(data):
        if number == 1:
            if not isinstance(item, bytes):
                raise AdapterError(f"{phase.value} field 1 has the wrong wire type")
            if is_body:
                body = item
            else:
                headers = _header_map(item, headers, wanted)  # a repeated field merges
        elif number == eos_field and phase not in TRAILER_PHASES:
            if not isinstance(item, int):
                raise AdapterError(f"{phase.value}.end_of_stream has the wrong wire type")
            end_of_stream = item != 0
    return RequestMessage(phase, headers, body, end_of_stream)


def _attributes(entry: bytes, attributes: dict[str, str]) -> None:
    """One ``attributes`` entry (namespace -> Struct) flattened into ``attributes``."""
    _, struct = map_entry(entry)
    for number, _, item in iter_fields(struct):
        if number == 1 and isinstance(item, bytes):
            key, value = map_entry(item)
            text = value_text(value)
            if text is not None:
                attributes[_text(key)] = text


def _length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The length varint at ``pos`` and the position after it; (-1, pos) if it is malformed
    or runs past ``end`` (the caller then takes the generic path)."""
    if pos < end and data[pos] < 0x80:  # one byte: every field up to 127 bytes
        return data[pos], pos + 1
    try:
        size, after = read_varint(data, pos)
    except WireError:
        return -1, pos
    return (size, after) if after <= end else (-1, pos)


def _fast_string_struct(data: bytes, pos: int, end: int, attributes: dict[str, str]) -> bool:
    """An ``attributes`` entry {key=1, value=2 Struct} whose Struct holds only string values
    with one-byte lengths, each part exactly once and in field order (what Envoy sends for
    the router's attributes), added to ``attributes``; False for any other shape."""
    if end - pos < 2 or data[pos] != 0x0A or data[pos + 1] >= 0x80:
        return False
    pos += 2 + data[pos + 1]  # past the namespace key
    if pos >= end or data[pos] != 0x12:
        return False
    size, pos = _length(data, pos + 1, end)
    if size < 0 or pos + size != end:
        return False
    while pos < end:
        # Struct.fields entry: 0A n {0A k key 12 v {1A s text}}
        if end - pos < 8 or data[pos] != 0x0A or data[pos + 2] != 0x0A:
            return False
        size = data[pos + 1]
        key_size = data[pos + 3]
        stop = pos + 2 + size
        key_end = pos + 4 + key_size
        if size >= 0x80 or key_size >= 0x80 or stop > end or key_end + 4 > stop:
            return False
        value_size = data[key_end + 1]
        text_size = data[key_end + 3]
        if (
            data[key_end] != 0x12
            or data[key_end + 2] != 0x1A
            or value_size >= 0x80
            or text_size >= 0x80
            or key_end + 2 + value_size != stop
            or key_end + 4 + text_size != stop
        ):
            return False
        key = data[pos + 4 : key_end].decode("utf-8", "surrogateescape")  # as _text, inline
        attributes[key] = data[key_end + 4 : stop].decode("utf-8", "surrogateescape")
        pos = stop
    return True


def _fast_request(data: bytes, wanted: frozenset[bytes] | None) -> RequestMessage | None:
    """What Envoy sends (one-byte tags, length-delimited fields only, one phase, string
    attributes), read without the generic field iterator; None for anything else, which
    :func:`parse_request` then reads generically (so results and errors are the same)."""
    end = len(data)
    pos = 0
    phase = Phase.UNKNOWN
    start = stop = 0
    attributes: dict[str, str] = {}
    while pos < end:
        tag = data[pos]
        if tag & 7 != 2 or tag < 0x08 or tag >= 0x80 or pos + 1 >= end:
            return None
        size, pos = _length(data, pos + 1, end)
        field_end = pos + size
        if size < 0 or field_end > end:
            return None
        found = _REQUEST_PHASES.get(tag >> 3)
        if found is not None:
            if phase is not Phase.UNKNOWN:
                return None  # a repeated oneof member merges or replaces: generic path
            phase, start, stop = found, pos, field_end
        elif tag >> 3 == _REQ_ATTRIBUTES and not _fast_string_struct(
            data, pos, field_end, attributes
        ):
            return None
        pos = field_end
    if phase is Phase.UNKNOWN:
        return None
    if phase not in BODY_PHASES:
        message = _message(data[start:stop], phase, wanted)
        return RequestMessage(phase, message.headers, b"", message.end_of_stream, attributes)
    return _fast_body(data, start, stop, phase, attributes)


def _fast_body(data: bytes, start: int, stop: int, phase: Phase,
               attributes: dict[str, str]) -> RequestMessage | None:
    """HttpBody in ``data[start:stop]`` as Envoy writes it: body=1, then end_of_stream=2
    (a one-byte bool) if true; None for any other shape."""
    if start == stop:
        return RequestMessage(phase, {}, b"", False, attributes)
    if data[start] != 0x0A:
        return None
    size, pos = _length(data, start + 1, stop)
    body_end = pos + size
    if size < 0 or body_end > stop:
        return None
    if body_end == stop:
        end_of_stream = False
    elif body_end + 2 == stop and data[body_end] == 0x10 and data[body_end + 1] < 0x80:
        end_of_stream = data[body_end + 1] != 0
    else:
        return None
    return RequestMessage(phase, {}, data[pos:body_end], end_of_stream, attributes)


def parse_request(data: bytes, wanted: frozenset[bytes] | None = None) -> RequestMessage:
    """Read a ``ProcessingRequest``. A message with no known phase gives ``Phase.UNKNOWN``.

    ``wanted``: keep only these headers (lower-case names as bytes); None keeps all.
    As protobuf does, the last member of the ``request`` oneof on the wire wins. Attributes
    of every namespace are merged into one mapping; fields the router does not read
    (metadata_context, protocol_config, ...) are skipped.
    """
    try:
        fast = _fast_request(data, wanted)
        return fast if fast is not None else _generic_request(data, wanted)
    except WireError as err:
        raise AdapterError(f"malformed ProcessingRequest: {err}") from err


def _generic_request(data: bytes, wanted: frozenset[bytes] | None) -> RequestMessage:
    """:func:`parse_request` for any input; raises ``WireError`` or ``AdapterError``."""
    phase = Phase.UNKNOWN
    payload = b""
    attributes: dict[str, str] = {}
    for number, _, item in iter_fields(data):
        found = _REQUEST_PHASES.get(number)
        if found is None:
            if number == _REQ_ATTRIBUTES and isinstance(item, bytes):
                _attributes(item, attributes)
            continue
        if not isinstance(item, bytes):
            raise AdapterError(f"ProcessingRequest field {number} has the wrong wire type")
        # Same oneof member twice merges (concatenated messages); another one replaces it.
        payload = payload + item if found is phase else item
        phase = found
    if phase is Phase.UNKNOWN:
        return RequestMessage(Phase.UNKNOWN, {}, b"", False)
    message = _message(payload, phase, wanted)
    if attributes:
        return RequestMessage(phase, message.headers, message.body, message.end_of_stream,
                              attributes)
    return message
