"""Minimal protobuf wire-format reader and writer for the ext_proc hot path.

Constraints:
- Pure Python, no generated code: betterproto2 costs 50-300 µs per message, this costs a few.
- Reading yields ``(field_number, wire_type, value)``; ``value`` is ``bytes`` for
  length-delimited fields and ``int`` for varint, fixed64 and fixed32 (little-endian,
  unsigned; use :func:`decode_double` for doubles). Unknown fields of every wire type,
  groups included, are the caller's to ignore; groups are skipped here and never yielded.
- Truncated or malformed input (varint longer than 10 bytes, length past the end, wire type
  6/7, unbalanced groups, field number 0) raises :class:`WireError`; nothing else escapes.
- Writing mirrors proto3 as betterproto2 emits it: the caller writes fields in field-number
  order and omits defaults, so output is byte-identical to ``bytes(message)``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

VARINT: Final = 0
FIXED64: Final = 1
LEN: Final = 2
START_GROUP: Final = 3
END_GROUP: Final = 4
FIXED32: Final = 5

_U64: Final = (1 << 64) - 1
_MAX_FIELD: Final = (1 << 29) - 1
_DOUBLE: Final = struct.Struct("<d")
# Single-byte varints are nearly every tag, length and enum we write; a table avoids bytes().
_SMALL: Final = tuple(bytes((i,)) for i in range(128))


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode the varint at ``pos``; return ``(value, next_pos)``. Values wrap to 64 bits."""
    end = len(data)
    if pos >= end:
        raise WireError("truncated varint")
    byte = data[pos]
    pos += 1
    if byte < 0x80:  # fast path: tags and short lengths are one byte
        return byte, pos
    result = byte & 0x7F
    shift = 7
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:  # protobuf varints are at most 10 bytes
            raise WireError("varint longer than 10 bytes")


def _read_value(data: bytes, pos: int, wire_type: int) -> tuple[int | bytes, int]:
    """Read one field value of ``wire_type`` (not a group) starting at ``pos``."""
    if wire_type == VARINT:
        return read_varint(data, pos)
    if wire_type == LEN:
        size, pos = read_varint(data, pos)
        end = pos + size
        if end > len(data):
            raise WireError("length-delimited field runs past the end")
        return data[pos:end], end
    if wire_type == FIXED64:
        end = pos + 8
    elif wire_type == FIXED32:
        end = pos + 4
    else:
        raise WireError(f"invalid wire type {wire_type}")
    if end > len(data):
        raise WireError("truncated fixed-width field")
    return int.from_bytes(data[pos:end], "little"), end


def _skip_group(data: bytes, pos: int, number: int) -> int:
    """Skip a (deprecated) group whose start tag for ``number`` was just read; return next pos.

    Iterative, not recursive, so hostile nesting cannot exhaust the Python stack.
    """
    open_groups = [number]
    while open_groups:
        tag, pos = read_varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if field == 0 or field > _MAX_FIELD:
            raise WireError(f"invalid field number {field}")
        if wire_type == START_GROUP:
            open_groups.append(field)
        elif wire_type == END_GROUP:
            if open_groups.pop() != field:
                raise WireError("mismatched end-group tag")
        else:
            _, pos = _read_value(data, pos, wire_type)
    return pos


def iter_fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """Yield ``(field_number, wire_type, value)`` for each field of one message, in wire order.

    Groups are skipped, not yielded. Raises :class:`WireError` on malformed input (possibly
    after yielding the well-formed prefix, so callers must consume the whole iterator).
    """
    pos = 0
    end = len(data)
    while pos < end:
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = read_varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if field == 0 or field > _MAX_FIELD:
            raise WireError(f"invalid field number {field}")
        if wire_type == LEN:  # inlined: the common case (messages, strings, bytes)
            size = data[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = read_varint(data, pos)
            stop = pos + size
            if stop > end:
                raise WireError("length-delimited field runs past the end")
            yield field, LEN, data[pos:stop]
            pos = stop
        elif wire_type == START_GROUP:
            pos = _skip_group(data, pos, field)
        elif wire_type == END_GROUP:
            raise WireError("end-group tag without a start")
        else:
            value, pos = _read_value(data, pos, wire_type)
            yield field, wire_type, value


def decode_double(raw: int) -> float:
    """Interpret a fixed64 value from :func:`iter_fields` as an IEEE-754 double."""
    return float(_DOUBLE.unpack(raw.to_bytes(8, "little"))[0])


# --- writing -------------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """Encode a varint; negative values use 64-bit two's complement (10 bytes), as proto does."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    if 0 < value < 0x4000:  # two bytes: body and message lengths up to 16 KiB
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0:
        value &= _U64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    """The key bytes of a field: ``field_number << 3 | wire_type``."""
    return encode_varint((field << 3) | wire_type)


def field_varint(field: int, value: int) -> bytes:
    """A varint field (int, enum, bool). Callers omit proto3 defaults themselves."""
    return encode_varint(field << 3) + encode_varint(value)


def field_bool(field: int, value: bool) -> bytes:
    """A bool field; like betterproto2, emits ``false`` only when the caller asks (oneofs)."""
    return encode_varint(field << 3) + (b"\x01" if value else b"\x00")


def field_len(field: int, payload: bytes) -> bytes:
    """A length-delimited field (message, string, bytes) around an encoded ``payload``."""
    return len_key(field, len(payload)) + payload


def len_key(field: int, size: int) -> bytes:
    """The key and length of a length-delimited field of ``size`` bytes: ``field_len`` less
    the payload, for callers that join a large payload in once instead of copying it."""
    key = (field << 3) | LEN
    if key < 0x80:  # fast path: most fields we write have one-byte keys
        return _SMALL[key] + (_SMALL[size] if size < 0x80 else encode_varint(size))
    return encode_varint(key) + encode_varint(size)


def field_double(field: int, value: float) -> bytes:
    """A fixed64 double field."""
    return encode_varint((field << 3) | FIXED64) + _DOUBLE.pack(value)
