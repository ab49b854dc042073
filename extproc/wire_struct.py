"""google.protobuf.Struct, Value and map entries on the wire (what ext_proc attributes and
dynamic metadata are made of), on top of :mod:`extproc.wire`.

Constraints: output is byte-identical to the protobuf encoding of the same Struct with its
entries in mapping order; readers skip what they do not know and never raise anything but
:class:`extproc.wire.WireError` on malformed input.
"""

from __future__ import annotations

from collections.abc import Mapping

from extproc.wire import decode_double, field_bool, field_double, field_len, iter_fields


def value_text(value: bytes) -> str | None:
    """google.protobuf.Value as text: string_value=3, number_value=2 (integral numbers
    without ".0"), bool_value=4; other kinds (null, struct, list) give None."""
    for number, wire_type, item in iter_fields(value):
        if number == 3 and isinstance(item, bytes):
            return item.decode("utf-8", "surrogateescape")
        if number == 2 and wire_type == 1 and isinstance(item, int):
            number_value = decode_double(item)
            return str(int(number_value)) if number_value.is_integer() else str(number_value)
        if number == 4 and isinstance(item, int):
            return "true" if item else "false"
    return None


def map_entry(data: bytes) -> tuple[bytes, bytes]:
    """A map entry {key=1, value=2} as raw bytes."""
    key = value = b""
    for number, _, item in iter_fields(data):
        if isinstance(item, bytes):
            if number == 1:
                key = item
            elif number == 2:
                value = item
    return key, value


def encode_value(value: object) -> bytes:
    """google.protobuf.Value: number_value=2 (double), string_value=3, bool_value=4.
    Raises ``TypeError`` for anything else."""
    # bool before float: bool is an int subclass and must stay a bool in the Struct.
    if isinstance(value, bool):
        return field_bool(4, value)
    if isinstance(value, int | float):
        return field_double(2, float(value))
    if isinstance(value, str):
        return field_len(3, value.encode("utf-8"))
    raise TypeError(f"{value!r} is not str, float or bool")


def encode_struct(fields: Mapping[str, bytes]) -> bytes:
    """google.protobuf.Struct: fields=1, map entries {key=1, value=2} in mapping order."""
    return b"".join(
        field_len(1, field_len(1, key.encode("utf-8")) + field_len(2, value))
        for key, value in fields.items()
    )
