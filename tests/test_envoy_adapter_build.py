"""The fast Envoy codec's response builders against envoy-data-plane's betterproto2 messages,
byte for byte: continue (plain, header, body, trailer and metadata mutations, with the header
checks), skip-rest and immediate responses."""

from __future__ import annotations

import pytest

from extproc.envoy_adapter import (
    AdapterError,
    Mutations,
    Phase,
    body_template,
    continue_response,
    immediate_response,
    skip_rest_response,
)
from tests.adapter_support import OVERWRITE, common, ep, epf, option, pb, typev3

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


TEMPLATE_MUTATIONS = [
    Mutations(set_headers={"x-semantic-router-cluster": "code", "authorization": "Bearer k"},
              clear_route_cache=True,
              dynamic_metadata={"envoy.filters.http.ext_proc": {"decision": "code", "n": 1.5}}),
    Mutations(set_headers={"x-a": "1", "content-length": "9", "x-b": "2"},
              remove_headers=["content-length", "x-drop"]),
    Mutations(),
]


@pytest.mark.parametrize("mutations", TEMPLATE_MUTATIONS)
@pytest.mark.parametrize("phase", [Phase.REQUEST_BODY, Phase.RESPONSE_BODY])
def test_body_template_renders_what_continue_response_builds(
    mutations: Mutations, phase: Phase
) -> None:
    template = body_template(phase, mutations)
    for body in (b"", b"{}", b"x" * 200, b"y" * 20_000):  # 1-, 2- and 3-byte lengths
        with_body = Mutations(mutations.set_headers, mutations.remove_headers, body,
                              mutations.clear_route_cache, mutations.dynamic_metadata)
        assert template.render(body) == continue_response(phase, with_body)


def test_body_template_refuses_what_continue_response_refuses() -> None:
    with pytest.raises(AdapterError):
        body_template(Phase.REQUEST_HEADERS, Mutations())  # no body in a headers answer
    with pytest.raises(AdapterError):
        body_template(Phase.REQUEST_BODY, Mutations(body=b"x"))  # the body comes at render
    with pytest.raises(AdapterError):
        body_template(Phase.REQUEST_BODY, Mutations(set_headers={"Bad Name": "x"}))


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
