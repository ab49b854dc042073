"""The fast Envoy codec against envoy-data-plane's betterproto2 messages, byte for byte."""

from __future__ import annotations

import contextlib
import struct
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extproc import wire
from extproc.envoy_adapter import (
    AdapterError,
    Mutations,
    Phase,
    continue_response,
    immediate_response,
    parse_request,
    skip_rest_response,
)

# envoy-data-plane's generated classes trip a pydantic 2.12 deprecation at import; the
# project's filterwarnings=error would turn that into a collection error.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from envoy_data_plane.envoy.config.core import v3 as core
    from envoy_data_plane.envoy.extensions.filters.http.ext_proc import v3 as epf
    from envoy_data_plane.envoy.service.ext_proc import v3 as ep
    from envoy_data_plane.envoy.type import v3 as typev3
    from envoy_data_plane.google import protobuf as pb

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


# --- continue_response ----------------------------------------------------------------------

PHASE_FIELDS = [
    (Phase.REQUEST_HEADERS, "request_headers", ep.HeadersResponse),
    (Phase.RESPONSE_HEADERS, "response_headers", ep.HeadersResponse),
    (Phase.REQUEST_BODY, "request_body", ep.BodyResponse),
    (Phase.RESPONSE_BODY, "response_body", ep.BodyResponse),
]


@pytest.mark.parametrize(("phase", "name", "cls"), PHASE_FIELDS)
def test_plain_continue_matches_betterproto(phase: Phase, name: str, cls: type) -> None:
    expected = bytes(ep.ProcessingResponse(**{name: cls(response=ep.CommonResponse())}))
    assert continue_response(phase) == expected
    assert continue_response(phase, Mutations()) == expected
    assert continue_response(phase) is continue_response(phase)  # cached, not rebuilt
    parsed = ep.ProcessingResponse.parse(expected)
    assert getattr(parsed, name).response.status == ep.CommonResponseResponseStatus.CONTINUE


@pytest.mark.parametrize(
    ("phase", "name"),
    [(Phase.REQUEST_TRAILERS, "request_trailers"), (Phase.RESPONSE_TRAILERS, "response_trailers")],
)
def test_trailer_continue_matches_betterproto(phase: Phase, name: str) -> None:
    assert continue_response(phase) == bytes(ep.ProcessingResponse(**{name: ep.TrailersResponse()}))
    ours = continue_response(phase, Mutations(set_headers={"x-t": "1"}, remove_headers=["x-u"]))
    mutation = ep.HeaderMutation(set_headers=[option("x-t", b"1")], remove_headers=["x-u"])
    expected = ep.ProcessingResponse(**{name: ep.TrailersResponse(header_mutation=mutation)})
    assert ours == bytes(expected)


def test_body_mutation_matches_betterproto_and_sets_content_length() -> None:
    body = b'{"model":"Qwen/Qwen3-0.6B","messages":[]}'
    mutations = Mutations(
        set_headers={"x-semantic-router-cluster": "qwen", "x-semantic-router-model": "Qwen"},
        remove_headers=["x-drop", "content-length"],
        body=body,
        clear_route_cache=True,
    )
    ours = continue_response(Phase.REQUEST_BODY, mutations)
    expected = ep.ProcessingResponse(
        request_body=ep.BodyResponse(
            response=common(
                header_mutation=ep.HeaderMutation(
                    set_headers=[
                        option("x-semantic-router-cluster", b"qwen"),
                        option("x-semantic-router-model", b"Qwen"),
                        option("content-length", str(len(body)).encode()),
                    ],
                    remove_headers=["x-drop"],  # removing content-length would undo the set
                ),
                body_mutation=ep.BodyMutation(body=body),
                clear_route_cache=True,
            )
        )
    )
    assert ours == bytes(expected)
    parsed = ep.ProcessingResponse.parse(ours).request_body.response
    assert parsed.clear_route_cache is True
    assert parsed.body_mutation.body == body
    sets = {o.header.key: o for o in parsed.header_mutation.set_headers}
    assert sets["content-length"].header.raw_value == str(len(body)).encode()
    for opt in sets.values():
        assert opt.header.value == ""
        assert opt.append_action == OVERWRITE
    assert sets["x-semantic-router-cluster"].header.raw_value == b"qwen"


def test_body_mutation_overrides_caller_content_length_in_place() -> None:
    mutations = Mutations(set_headers={"content-length": "999", "x-a": "b"}, body=b"abc")
    ours = continue_response(Phase.RESPONSE_BODY, mutations)
    expected = ep.ProcessingResponse(
        response_body=ep.BodyResponse(
            response=common(
                header_mutation=ep.HeaderMutation(
                    set_headers=[option("content-length", b"3"), option("x-a", b"b")]
                ),
                body_mutation=ep.BodyMutation(body=b"abc"),
            )
        )
    )
    assert ours == bytes(expected)
    assert mutations.set_headers["content-length"] == "999"  # caller's value left alone


def test_empty_body_mutation_is_written() -> None:
    ours = continue_response(Phase.REQUEST_BODY, Mutations(body=b""))
    expected = ep.ProcessingResponse(
        request_body=ep.BodyResponse(
            response=common(
                header_mutation=ep.HeaderMutation(set_headers=[option("content-length", b"0")]),
                body_mutation=ep.BodyMutation(body=b""),
            )
        )
    )
    assert ours == bytes(expected)
    assert ep.ProcessingResponse.parse(ours).request_body.response.body_mutation.body == b""


def test_header_phase_mutations_match_betterproto() -> None:
    mutations = Mutations(
        set_headers={"x-semantic-router-decision": "math", "x-empty": "", "x-utf": "ü"},
        clear_route_cache=True,
    )
    ours = continue_response(Phase.RESPONSE_HEADERS, mutations)
    expected = ep.ProcessingResponse(
        response_headers=ep.HeadersResponse(
            response=common(
                header_mutation=ep.HeaderMutation(
                    set_headers=[
                        option("x-semantic-router-decision", b"math"),
                        option("x-empty", b""),
                        option("x-utf", "ü".encode()),
                    ]
                ),
                clear_route_cache=True,
            )
        )
    )
    assert ours == bytes(expected)


def test_dynamic_metadata_is_a_struct_of_namespaces() -> None:
    metadata = {
        "envoy.filters.http.ext_proc": {"decision": "math", "score": 0.75, "cached": False},
        "router": {"hit": True, "n": 3},
    }
    ours = continue_response(Phase.REQUEST_BODY, Mutations(dynamic_metadata=metadata))
    expected = ep.ProcessingResponse(
        request_body=ep.BodyResponse(response=ep.CommonResponse()),
        dynamic_metadata=pb.Struct(
            fields={
                "envoy.filters.http.ext_proc": pb.Value(
                    struct_value=pb.Struct(
                        fields={
                            "decision": pb.Value(string_value="math"),
                            "score": pb.Value(number_value=0.75),
                            "cached": pb.Value(bool_value=False),
                        }
                    )
                ),
                "router": pb.Value(
                    struct_value=pb.Struct(
                        fields={"hit": pb.Value(bool_value=True), "n": pb.Value(number_value=3.0)}
                    )
                ),
            }
        ),
    )
    assert ours == bytes(expected)
    parsed = ep.ProcessingResponse.parse(ours).dynamic_metadata
    assert parsed is not None
    ns = parsed.fields["envoy.filters.http.ext_proc"].struct_value
    assert ns.fields["score"].number_value == 0.75
    assert ns.fields["cached"].bool_value is False


def test_dynamic_metadata_rejects_other_types() -> None:
    with pytest.raises(AdapterError):
        continue_response(
            Phase.REQUEST_BODY,
            Mutations(dynamic_metadata={"ns": {"x": [1]}}),  # type: ignore[dict-item]
        )


@pytest.mark.parametrize(
    "value", ["a\r\nx-evil: 1", "a\nb", "a\rb", "a\x00b", "a\x01b", "a\x7fb", "\ud800"]
)
def test_header_values_with_control_characters_are_rejected(value: str) -> None:
    for phase in (Phase.REQUEST_HEADERS, Phase.REQUEST_BODY, Phase.RESPONSE_TRAILERS):
        with pytest.raises(AdapterError):
            continue_response(phase, Mutations(set_headers={"x-a": value}))
    with pytest.raises(AdapterError):
        immediate_response(400, b"", {"x-a": value})


def test_tab_and_obs_text_values_are_allowed() -> None:
    ours = continue_response(Phase.REQUEST_HEADERS, Mutations(set_headers={"x-a": "a\tb é"}))
    parsed = ep.ProcessingResponse.parse(ours).request_headers.response
    assert parsed.header_mutation.set_headers[0].header.raw_value == "a\tb é".encode()


@pytest.mark.parametrize("name", ["", "X-Upper", "bad name", "a:b", ":path", "a\r\n", "é", "a/b"])
def test_bad_header_names_are_rejected(name: str) -> None:
    with pytest.raises(AdapterError):
        continue_response(Phase.REQUEST_HEADERS, Mutations(set_headers={name: "v"}))
    with pytest.raises(AdapterError):
        continue_response(Phase.REQUEST_HEADERS, Mutations(remove_headers=[name]))


def test_non_text_names_and_values_are_rejected() -> None:
    bad: list[Mutations] = [
        Mutations(remove_headers=[None, ["x"]]),  # type: ignore[list-item]
        Mutations(set_headers={"x-a": 1}),  # type: ignore[dict-item]
        Mutations(set_headers={b"x-a": "1"}),  # type: ignore[dict-item]
    ]
    for mutations in bad:
        with pytest.raises(AdapterError):
            continue_response(Phase.REQUEST_HEADERS, mutations)


def test_misplaced_mutations_are_rejected() -> None:
    with pytest.raises(AdapterError):
        continue_response(Phase.REQUEST_HEADERS, Mutations(body=b"x"))
    with pytest.raises(AdapterError):
        continue_response(Phase.REQUEST_TRAILERS, Mutations(clear_route_cache=True))
    with pytest.raises(AdapterError):
        continue_response(Phase.UNKNOWN)
    with pytest.raises(AdapterError):
        continue_response(Phase.UNKNOWN, Mutations(set_headers={"x-a": "b"}))


# --- skip_rest_response / immediate_response ------------------------------------------------


def test_skip_rest_response_matches_betterproto() -> None:
    expected = ep.ProcessingResponse(
        request_headers=ep.HeadersResponse(response=ep.CommonResponse()),
        mode_override=epf.ProcessingMode(
            request_body_mode=epf.ProcessingModeBodySendMode.NONE,
            response_header_mode=epf.ProcessingModeHeaderSendMode.SKIP,
        ),
    )
    assert skip_rest_response() == bytes(expected)
    parsed = ep.ProcessingResponse.parse(skip_rest_response())
    assert parsed.request_headers is not None
    assert parsed.mode_override is not None
    assert parsed.mode_override.response_header_mode == epf.ProcessingModeHeaderSendMode.SKIP
    assert parsed.mode_override.request_body_mode == epf.ProcessingModeBodySendMode.NONE


def test_immediate_response_matches_betterproto() -> None:
    body = b'{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}'
    headers = {"content-type": "application/json", "x-semantic-router-decision": "rejected"}
    ours = immediate_response(400, body, headers, details="invalid_json")
    expected = ep.ProcessingResponse(
        immediate_response=ep.ImmediateResponse(
            status=typev3.HttpStatus(code=typev3.StatusCode.BadRequest),
            headers=ep.HeaderMutation(
                set_headers=[
                    option("content-type", b"application/json"),
                    option("x-semantic-router-decision", b"rejected"),
                ]
            ),
            body=body,
            details="invalid_json",
        )
    )
    assert ours == bytes(expected)
    parsed = ep.ProcessingResponse.parse(ours).immediate_response
    assert parsed is not None
    assert parsed.status is not None
    assert parsed.status.code == 400
    assert parsed.body == body
    assert parsed.details == "invalid_json"
    assert parsed.headers is not None
    assert parsed.headers.set_headers[0].header.raw_value == b"application/json"


def test_immediate_response_minimal_and_invalid_status() -> None:
    expected = ep.ProcessingResponse(
        immediate_response=ep.ImmediateResponse(
            status=typev3.HttpStatus(code=typev3.StatusCode.ServiceUnavailable)
        )
    )
    assert immediate_response(503, b"") == bytes(expected)
    # HttpStatus.code is declared `defined_only` in Envoy's proto: 418 and 499 are not defined.
    for status in (0, 99, 100, 418, 499, 600, -1, 200.0, True):
        with pytest.raises(AdapterError):
            immediate_response(status, b"")  # type: ignore[arg-type]
    for status in (200, 226, 404, 413, 429, 431, 500, 503, 511):
        code = ep.ProcessingResponse.parse(immediate_response(status, b"")).immediate_response
        assert code is not None
        assert code.status is not None
        assert code.status.code == status


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
