"""The fast Envoy codec's request parser against envoy-data-plane's betterproto2 messages:
every phase, unknown fields, protobuf merge rules, malformed input, property tests on random
bytes, and the wire helpers underneath."""

from __future__ import annotations

import contextlib
import struct
import warnings
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extproc import envoy_request, wire
from extproc.envoy_adapter import (
    AdapterError,
    Mutations,
    Phase,
    RequestMessage,
    continue_response,
    parse_request,
)
from tests.adapter_support import UNKNOWN, core, ep, epf, header_map, pb

# --- parse_request ---------------------------------------------------------------------------


def test_parse_request_headers_with_raw_value_and_value() -> None:
    request = ep.ProcessingRequest(
        request_headers=ep.HttpHeaders(
            headers=core.HeaderMap(
                headers=[
                    core.HeaderValue(key=":method", raw_value=b"POST"),
                    core.HeaderValue(key=":path", raw_value=b"/v1/chat/completions"),
                    core.HeaderValue(key="Content-Type", value="application/json"),
                    core.HeaderValue(key="x-forwarded-for", raw_value=b"1.1.1.1"),
                    core.HeaderValue(key="X-Forwarded-For", raw_value=b"2.2.2.2"),
                    core.HeaderValue(key="x-bin", raw_value=b"\xff\xfe"),
                    core.HeaderValue(key="x-empty"),
                ]
            ),
            end_of_stream=True,
        )
    )
    msg = parse_request(bytes(request))
    assert msg.phase is Phase.REQUEST_HEADERS
    assert msg.end_of_stream is True
    assert msg.body == b""
    assert msg.headers[":path"] == "/v1/chat/completions"
    assert msg.headers["content-type"] == "application/json"
    assert msg.headers["x-forwarded-for"] == "1.1.1.1,2.2.2.2"
    assert msg.headers["x-empty"] == ""
    # surrogateescape: non-UTF-8 bytes survive a copy into a mutation unchanged
    copied = Mutations(set_headers={"x-bin": msg.headers["x-bin"]})
    out = continue_response(Phase.REQUEST_HEADERS, copied)
    sets = ep.ProcessingResponse.parse(out).request_headers.response.header_mutation.set_headers
    assert [o.header.raw_value for o in sets if o.header.key == "x-bin"] == [b"\xff\xfe"]


def test_parse_response_headers_and_envoy_extras() -> None:
    # Older Envoys fill HttpHeaders.attributes (now deprecated); it must be skipped cleanly.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        headers = ep.HttpHeaders(
            headers=header_map((":status", b"200")),
            attributes={"envoy.filters.http.ext_proc": pb.Struct(fields={})},
        )
        request = ep.ProcessingRequest(
            response_headers=headers,
            metadata_context=core.Metadata(
                filter_metadata={"ns": pb.Struct(fields={"k": pb.Value(string_value="v")})}
            ),
            attributes={"x": pb.Struct(fields={"request.path": pb.Value(string_value="/v1")})},
            observability_mode=True,
            protocol_config=ep.ProtocolConfiguration(
                request_body_mode=epf.ProcessingModeBodySendMode.BUFFERED,
                send_body_without_waiting_for_header_response=True,
            ),
        )
        msg = parse_request(bytes(request))
    assert msg.phase is Phase.RESPONSE_HEADERS
    assert dict(msg.headers) == {":status": "200"}
    assert msg.end_of_stream is False


def test_parse_body_with_attributes_as_envoy_sends_them_without_a_headers_phase() -> None:
    # Shape verified on Envoy 1.40 (request_header_mode SKIP + request_attributes).
    fields = {
        "request.path": pb.Value(string_value="/v1/chat/completions?x=1"),
        "request.method": pb.Value(string_value="POST"),
        "request.size": pb.Value(number_value=173.0),
        "ratio": pb.Value(number_value=0.5),
        "request.headers['content-type']": pb.Value(string_value="application/json"),
        "flag": pb.Value(bool_value=True),
        "nothing": pb.Value(null_value=pb.NullValue.NULL_VALUE),
    }
    request = ep.ProcessingRequest(
        request_body=ep.HttpBody(body=b"{}", end_of_stream=True),
        attributes={
            "envoy.filters.http.ext_proc": pb.Struct(fields=fields),
            "other": pb.Struct(fields={"request.id": pb.Value(string_value="abc")}),
        },
    )
    msg = parse_request(bytes(request))
    assert (msg.phase, msg.body, msg.end_of_stream) == (Phase.REQUEST_BODY, b"{}", True)
    assert dict(msg.attributes) == {
        "request.path": "/v1/chat/completions?x=1",
        "request.method": "POST",
        "request.size": "173",
        "ratio": "0.5",
        "request.headers['content-type']": "application/json",
        "flag": "true",
        "request.id": "abc",
    }
    assert parse_request(bytes(ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x")))
                         ).attributes == {}


@pytest.mark.parametrize(
    ("name", "phase"),
    [("request_body", Phase.REQUEST_BODY), ("response_body", Phase.RESPONSE_BODY)],
)
def test_parse_body(name: str, phase: Phase) -> None:
    body = b'{"model":"auto"}' * 100
    data = bytes(ep.ProcessingRequest(**{name: ep.HttpBody(body=body, end_of_stream=True)}))
    msg = parse_request(data)
    assert (msg.phase, msg.body, msg.end_of_stream, dict(msg.headers)) == (phase, body, True, {})
    chunk = parse_request(bytes(ep.ProcessingRequest(**{name: ep.HttpBody(body=b"ab")})))
    assert (chunk.body, chunk.end_of_stream) == (b"ab", False)


@pytest.mark.parametrize(
    ("name", "phase"),
    [("request_trailers", Phase.REQUEST_TRAILERS), ("response_trailers", Phase.RESPONSE_TRAILERS)],
)
def test_parse_trailers(name: str, phase: Phase) -> None:
    request = ep.ProcessingRequest(
        **{name: ep.HttpTrailers(trailers=header_map(("grpc-status", b"0")))}
    )
    msg = parse_request(bytes(request))
    assert (msg.phase, dict(msg.headers), msg.end_of_stream) == (phase, {"grpc-status": "0"}, True)


def test_parse_skips_unknown_fields_at_every_level() -> None:
    value = core.HeaderValue(key="x-a", raw_value=b"1")
    value._unknown_fields = UNKNOWN
    headers = ep.HttpHeaders(headers=core.HeaderMap(headers=[value]), end_of_stream=True)
    headers._unknown_fields = UNKNOWN
    request = ep.ProcessingRequest(request_headers=headers)
    request._unknown_fields = UNKNOWN
    msg = parse_request(UNKNOWN + bytes(request))
    assert (msg.phase, dict(msg.headers), msg.end_of_stream) == (
        Phase.REQUEST_HEADERS,
        {"x-a": "1"},
        True,
    )


def test_parse_odd_but_valid_header_entries() -> None:
    entries = [
        core.HeaderValue(key="x-long", raw_value=b"v" * 300),  # 2-byte length varint
        core.HeaderValue(key="k" * 200, raw_value=b"1"),
        core.HeaderValue(key="x-none"),
        core.HeaderValue(raw_value=b"no-key"),
        core.HeaderValue(key="x-both", value="old", raw_value=b"new"),
        core.HeaderValue(),  # empty entry, last in the map
    ]
    headers = ep.HttpHeaders(headers=core.HeaderMap(headers=entries))
    msg = parse_request(bytes(ep.ProcessingRequest(request_headers=headers)))
    assert dict(msg.headers) == {
        "x-long": "v" * 300,
        "k" * 200: "1",
        "x-none": "",
        "": "no-key,",
        "x-both": "new",
    }


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=60))
def test_random_header_map_bytes_parse_or_raise_adapter_error(data: bytes) -> None:
    # Aims the fuzzing at the header-map fast path, which indexes bytes directly.
    with contextlib.suppress(AdapterError):
        parse_request(wire.field_len(2, wire.field_len(1, data)))
    with contextlib.suppress(AdapterError):
        parse_request(wire.field_len(2, wire.field_len(1, wire.field_len(1, data))))


def test_parse_follows_protobuf_merge_rules() -> None:
    # Concatenated messages merge (protobuf spec, as Envoy's C++ runtime does; betterproto2
    # replaces instead): the same oneof member merges, another member replaces it.
    first = bytes(
        ep.ProcessingRequest(request_headers=ep.HttpHeaders(headers=header_map(("a", b"1"))))
    )
    second = bytes(
        ep.ProcessingRequest(
            request_headers=ep.HttpHeaders(headers=header_map(("b", b"2")), end_of_stream=True)
        )
    )
    merged = parse_request(first + second)
    assert (dict(merged.headers), merged.end_of_stream) == ({"a": "1", "b": "2"}, True)
    body = bytes(ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x")))
    replaced = parse_request(first + body)
    assert (replaced.phase, replaced.body, dict(replaced.headers)) == (Phase.REQUEST_BODY, b"x", {})


def test_parse_empty_and_unknown_only_is_unknown_phase() -> None:
    assert parse_request(b"").phase is Phase.UNKNOWN
    msg = parse_request(UNKNOWN + wire.field_bool(10, True))
    assert (msg.phase, dict(msg.headers), msg.body, msg.end_of_stream) == (
        Phase.UNKNOWN,
        {},
        b"",
        False,
    )


def test_parse_body_with_multibyte_lengths() -> None:
    body = bytes(range(256)) * 1024  # 256 KiB: a 3-byte length varint
    msg = parse_request(bytes(ep.ProcessingRequest(request_body=ep.HttpBody(body=body))))
    assert msg.body == body


MALFORMED = [
    b"\x12",  # tag, no length
    b"\x12\x05abc",  # length past the end
    b"\x12\x80",  # truncated length varint
    b"\x80",  # truncated tag
    b"\x08" + b"\xff" * 10 + b"\x01",  # varint longer than 10 bytes
    b"\x0f",  # wire type 7
    b"\x00\x00",  # field number 0
    b"\x1c",  # end-group without start
    b"\x1b\x08\x01",  # group never closed
    b"\x1b\x24",  # group closed by another field's end tag
    b"\x09\x00\x00",  # truncated fixed64
    b"\x0d\x00",  # truncated fixed32
    b"\x10\x01",  # request_headers (field 2) as a varint: wrong wire type
]


@pytest.mark.parametrize("data", MALFORMED)
def test_malformed_input_raises_adapter_error(data: bytes) -> None:
    with pytest.raises(AdapterError):
        parse_request(data)


def test_malformed_nested_input_raises_adapter_error() -> None:
    good = bytes(
        ep.ProcessingRequest(request_headers=ep.HttpHeaders(headers=header_map(("a", b"b"))))
    )
    for cut in range(1, len(good)):
        with pytest.raises(AdapterError):
            parse_request(good[:cut])
    bad_inner = [
        wire.field_varint(1, 3),  # HttpHeaders.headers as varint
        wire.field_len(3, b""),  # HttpHeaders.end_of_stream as bytes
        wire.field_len(1, wire.field_varint(1, 1)),  # HeaderMap.headers as varint
        wire.field_len(1, wire.field_len(1, wire.field_varint(3, 1))),  # raw_value as varint
    ]
    for inner in bad_inner:
        with pytest.raises(AdapterError):
            parse_request(wire.field_len(2, inner))


def test_adapter_error_is_value_error() -> None:
    assert issubclass(AdapterError, ValueError)
    assert issubclass(wire.WireError, ValueError)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_parse_or_raise_adapter_error(data: bytes) -> None:
    try:
        msg = parse_request(data)
    except AdapterError:
        return
    assert isinstance(msg.phase, Phase)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.binary(max_size=20)), max_size=8))
def test_random_well_formed_messages_parse(fields: list[tuple[int, bytes]]) -> None:
    # Well-formed framing of arbitrary fields: phase payloads may still be malformed inside.
    data = b"".join(wire.field_len(number, payload) for number, payload in fields)
    with contextlib.suppress(AdapterError):
        parse_request(data)


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(st.text(max_size=130), st.text(max_size=130), max_size=5),
    st.binary(max_size=300) | st.sampled_from([b"x" * 20_000]),
    st.booleans(),
    st.integers(0, 400),
    st.binary(min_size=1, max_size=3),
)
def test_fast_reader_agrees_with_the_generic_one(
    attributes: dict[str, str], body: bytes, end_of_stream: bool, at: int, junk: bytes
) -> None:
    # What Envoy sends on one-message routes takes the fast path; it must read exactly as
    # the generic reader does, and any damage must leave it to the generic reader.
    fields = {k: pb.Value(string_value=v) for k, v in attributes.items()}
    request = ep.ProcessingRequest(
        request_body=ep.HttpBody(body=body, end_of_stream=end_of_stream),
        attributes={"envoy.filters.http.ext_proc": pb.Struct(fields=fields)},
    )
    data = bytes(request)
    assert parse_request(data) == envoy_request._generic_request(data, None)
    at %= len(data)
    for damaged in (data[:at], data[:at] + junk + data[at + len(junk) :]):
        fast = _outcome(envoy_request._fast_request, damaged)
        if fast is not None:
            assert fast == _outcome(envoy_request._generic_request, damaged)


def _outcome(
    read: Callable[[bytes, None], RequestMessage | None], data: bytes
) -> RequestMessage | str | None:
    try:
        return read(data, None)
    except (AdapterError, wire.WireError) as err:
        return f"{type(err).__name__}: {err}"


# --- wire ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**32, 2**63, 2**64 - 1])
def test_varint_round_trip(value: int) -> None:
    encoded = wire.encode_varint(value)
    assert wire.read_varint(encoded, 0) == (value, len(encoded))


def test_negative_varint_is_ten_bytes_and_double_round_trips() -> None:
    assert wire.encode_varint(-1) == b"\xff" * 9 + b"\x01"
    [(number, wire_type, raw)] = list(wire.iter_fields(wire.field_double(3, -2.5)))
    assert (number, wire_type) == (3, wire.FIXED64)
    assert isinstance(raw, int)
    assert wire.decode_double(raw) == -2.5
    assert struct.pack("<d", -2.5) == raw.to_bytes(8, "little")
