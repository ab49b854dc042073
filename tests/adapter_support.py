"""Shared helpers for the Envoy adapter tests: envoy-data-plane's betterproto2 messages (the
reference the fast codec is checked against, byte for byte), header builders, and a run of
unknown fields of every wire type."""

from __future__ import annotations

import warnings

from extproc import wire

# envoy-data-plane's generated classes trip a pydantic 2.12 deprecation at import; the
# project's filterwarnings=error would turn that into a collection error.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from envoy_data_plane.envoy.config.core import v3 as core
    from envoy_data_plane.envoy.extensions.filters.http.ext_proc import v3 as epf
    from envoy_data_plane.envoy.service.ext_proc import v3 as ep
    from envoy_data_plane.envoy.type import v3 as typev3
    from envoy_data_plane.google import protobuf as pb

__all__ = [
    "OVERWRITE",
    "UNKNOWN",
    "common",
    "core",
    "ep",
    "epf",
    "header_map",
    "option",
    "pb",
    "typev3",
]

OVERWRITE = core.HeaderValueOptionHeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD
# An unknown field of every wire type: varint, fixed64, length-delimited, group, fixed32.
UNKNOWN = (
    wire.field_varint(900, 7)
    + wire.field_double(901, 1.5)
    + wire.field_len(902, b"junk")
    + wire.tag(903, wire.START_GROUP)
    + wire.field_varint(1, 1)
    + wire.tag(903, wire.END_GROUP)
    + wire.tag(904, wire.FIXED32)
    + b"\x01\x02\x03\x04"
)


def option(name: str, value: bytes) -> core.HeaderValueOption:
    return core.HeaderValueOption(
        header=core.HeaderValue(key=name, raw_value=value), append_action=OVERWRITE
    )


def header_map(*pairs: tuple[str, bytes]) -> core.HeaderMap:
    return core.HeaderMap(headers=[core.HeaderValue(key=k, raw_value=v) for k, v in pairs])


def common(**kwargs: object) -> ep.CommonResponse:
    return ep.CommonResponse(**kwargs)  # type: ignore[arg-type]
