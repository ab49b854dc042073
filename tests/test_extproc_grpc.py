"""In-process gRPC: the real grpc.aio router and a grpc.aio client speaking ext_proc bytes.

Requests are built as Envoy 1.40 sends them (header values in ``raw_value``) with
envoy-data-plane's betterproto2 messages; every response is parsed and compared whole.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import AsyncIterator, Sequence

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from extproc.config import load_config_text
from extproc.errors import error_body
from extproc.names import HEADER_ATTRIBUTES
from extproc.server import Router

with warnings.catch_warnings():  # envoy-data-plane trips a pydantic deprecation at import
    warnings.simplefilter("ignore", DeprecationWarning)
    from envoy_data_plane.envoy.config.core import v3 as core
    from envoy_data_plane.envoy.extensions.filters.http.ext_proc import v3 as epf
    from envoy_data_plane.envoy.service.ext_proc import v3 as ep
    from envoy_data_plane.envoy.type import v3 as typev3
    from envoy_data_plane.google import protobuf as pb

PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
OVERWRITE = core.HeaderValueOptionHeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD
MAX_BYTES = 4096
# end_streams_after_request: false exercises the whole exchange (the default is tested last)
CONFIG = f"""\
listener: {{max_request_bytes: {MAX_BYTES}}}
router:
  auto_model_names: [auto, vllm-sr/auto]
  passthrough_paths: [/healthz]
  end_streams_after_request: false
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: g1, endpoint: "127.0.0.1:8101"}}]
    - name: local/coder
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{{name: c1, endpoint: "127.0.0.1:8103"}}]
signals:
  - {{name: code_kw, type: keyword, keywords: [python, "c++"]}}
decisions:
  - {{name: code, rules: {{signal: code_kw}}, model: local/coder}}
"""
CHAT_PATH = "/v1/chat/completions"


@pytest.fixture
async def router() -> AsyncIterator[Router]:
    instance = Router(
        load_config_text(CONFIG), grpc_address="127.0.0.1:0", admin_address="127.0.0.1:0"
    )
    await instance.start()
    try:
        yield instance
    finally:
        await instance.stop(0.5)


@pytest.fixture
async def channel(router: Router) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{router.grpc_port}") as ch:
        yield ch


# --- building requests and expected responses ---------------------------------------------------


def request_headers(
    method: str = "POST", path: str = CHAT_PATH, end_of_stream: bool = False, **extra: str
) -> ep.ProcessingRequest:
    pairs = {":method": method, ":path": path, ":authority": "router", "x-request-id": "r-1"}
    if method == "POST":
        pairs["content-type"] = "application/json"
    pairs.update({k.replace("_", "-"): v for k, v in extra.items()})
    headers = [core.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return ep.ProcessingRequest(
        request_headers=ep.HttpHeaders(
            headers=core.HeaderMap(headers=headers), end_of_stream=end_of_stream
        )
    )


def request_body(body: bytes) -> ep.ProcessingRequest:
    return ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True))


def response_headers() -> ep.ProcessingRequest:
    headers = core.HeaderMap(headers=[core.HeaderValue(key=":status", raw_value=b"200")])
    return ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=headers))


def option(name: str, value: str) -> core.HeaderValueOption:
    return core.HeaderValueOption(
        header=core.HeaderValue(key=name, raw_value=value.encode()), append_action=OVERWRITE
    )


def continued(phase: str, *headers: tuple[str, str], **common: object) -> ep.ProcessingResponse:
    mutation = ep.HeaderMutation(set_headers=[option(k, v) for k, v in headers])
    response = ep.CommonResponse(header_mutation=mutation if headers else None, **common)  # type: ignore[arg-type]
    return ep.ProcessingResponse(**{phase: ep.HeadersResponse(response=response)})


def routed_body(body: bytes, cluster: str, decision: str, model: str,
                outcome: str) -> ep.ProcessingResponse:
    mutation = ep.HeaderMutation(
        set_headers=[
            option("x-semantic-router-cluster", cluster),
            option("x-semantic-router-decision", decision),
            option("content-length", str(len(body))),
        ]
    )
    fields = {"decision": decision, "model": model, "outcome": outcome, "shadowed": "",
              "cluster": cluster}
    metadata = pb.Struct(
        fields={
            "envoy.filters.http.ext_proc": pb.Value(
                struct_value=pb.Struct(
                    fields={k: pb.Value(string_value=v) for k, v in fields.items()}
                )
            )
        }
    )
    return ep.ProcessingResponse(
        request_body=ep.BodyResponse(
            response=ep.CommonResponse(
                header_mutation=mutation,
                body_mutation=ep.BodyMutation(body=body),
                clear_route_cache=True,
            )
        ),
        dynamic_metadata=metadata,
    )


def immediate(status: typev3.StatusCode, body: bytes, **headers: str) -> ep.ProcessingResponse:
    mutation = ep.HeaderMutation(
        set_headers=[option("content-type", "application/json")]
        + [option(k, v) for k, v in headers.items()]
    )
    return ep.ProcessingResponse(
        immediate_response=ep.ImmediateResponse(
            status=typev3.HttpStatus(code=status),
            headers=mutation,
            body=body,
            details="semantic_router",  # shown as response code details in Envoy's access log
        )
    )


def invalid(message: str, param: str | None = None, code: str | None = None) -> bytes:
    return error_body(message, "invalid_request_error", param, code)


HEADERS_CONTINUE = continued("request_headers")
RESPONSE_CONTINUE = continued("response_headers")


async def exchange(
    channel: grpc.aio.Channel, messages: Sequence[ep.ProcessingRequest]
) -> list[ep.ProcessingResponse]:
    """One ext_proc stream: one response per message, then the client half-closes."""
    call = channel.stream_stream(PROCESS, request_serializer=None, response_deserializer=None)()
    responses = []
    for message in messages:
        await call.write(bytes(message))
        raw = await call.read()
        assert isinstance(raw, bytes), raw
        responses.append(ep.ProcessingResponse.parse(raw))
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    return responses


def chat(model: str, text: str, **extra: object) -> bytes:
    payload = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    return json.dumps(payload).encode()


async def assert_routes(channel: grpc.aio.Channel, model: str = "auto") -> None:
    """A keyword request on a new stream: CONTINUE, the rewritten body, decision headers."""
    body = chat(model, "Fix my Python code", temperature=0.2)
    new_body = body.replace(f'"{model}"'.encode(), b'"Qwen/Qwen2.5-Coder-7B-Instruct"', 1)
    responses = await exchange(
        channel, [request_headers(), request_body(body), response_headers()]
    )
    assert responses == [
        HEADERS_CONTINUE,
        routed_body(new_body, "local_coder", "code", "local/coder", "routed"),
        continued(
            "response_headers",
            ("x-semantic-router-model", "local/coder"),
            ("x-semantic-router-decision", "code"),
        ),
    ]


# --- routing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("auto", ["auto", "vllm-sr/auto"])
async def test_auto_model_routed_by_keyword(channel: grpc.aio.Channel, auto: str) -> None:
    await assert_routes(channel, auto)


@pytest.mark.parametrize(
    ("requested", "cluster", "model", "provider_id", "decision", "outcome"),
    [
        ("local/coder", "local_coder", "local/coder", "Qwen/Qwen2.5-Coder-7B-Instruct",
         "explicit", "explicit"),
        ("Qwen/Qwen3-0.6B", "general", "general", "Qwen/Qwen3-0.6B", "explicit", "explicit"),
        ("auto", "general", "general", "Qwen/Qwen3-0.6B", "default", "default"),
    ],
    ids=["explicit-name", "explicit-provider-id", "auto-no-match"],
)
async def test_explicit_and_default(
    channel: grpc.aio.Channel, requested: str, cluster: str, model: str, provider_id: str,
    decision: str, outcome: str,
) -> None:
    text = "Write python" if requested != "auto" else "Tell me a story"
    body = chat(requested, text)
    new_body = body.replace(f'"{requested}"'.encode(), json.dumps(provider_id).encode(), 1)
    responses = await exchange(
        channel, [request_headers(), request_body(body), response_headers()]
    )
    assert responses == [
        HEADERS_CONTINUE,
        routed_body(new_body, cluster, decision, model, outcome),
        continued(
            "response_headers",
            ("x-semantic-router-model", model),
            ("x-semantic-router-decision", decision),
        ),
    ]


# --- errors: each is answered, and the next stream still routes --------------------------------

ST = typev3.StatusCode
HEADER_ERRORS = [
    pytest.param(
        request_headers(method="GET"), ST.MethodNotAllowed,
        error_body("/v1/chat/completions only supports POST", "invalid_request_error", None,
                   "method_not_allowed"), {"allow": "POST"}, id="wrong-method",
    ),
    pytest.param(
        request_headers(end_of_stream=True), ST.BadRequest,
        invalid("request body is required"), {}, id="post-without-body",
    ),
    pytest.param(
        request_headers(content_type="text/plain"), ST.UnsupportedMediaType,
        invalid("content type 'text/plain' is not supported; send application/json", None,
                "unsupported_media_type"), {}, id="text-plain",
    ),
    pytest.param(
        request_headers(content_encoding="gzip"), ST.UnsupportedMediaType,
        invalid("content encoding 'gzip' is not supported", None, "unsupported_media_type"),
        {}, id="gzip",
    ),
    pytest.param(
        request_headers(content_length=str(MAX_BYTES + 1)), ST.PayloadTooLarge,
        invalid(f"request body is larger than the limit of {MAX_BYTES} bytes", None,
                "request_too_large"), {}, id="content-length-over-cap",
    ),
    pytest.param(
        request_headers(method="POST", path="/v1/models"), ST.MethodNotAllowed,
        error_body("/v1/models only supports GET", "invalid_request_error", None,
                   "method_not_allowed"), {"allow": "GET"}, id="post-models",
    ),
    pytest.param(
        request_headers(method="GET", path="/v1/models/nope"), ST.NotFound,
        invalid("The model 'nope' does not exist.", "model", "model_not_found"), {},
        id="get-unknown-model",
    ),
]


@pytest.mark.parametrize(("message", "status", "body", "headers"), HEADER_ERRORS)
async def test_header_phase_errors(
    channel: grpc.aio.Channel, message: ep.ProcessingRequest, status: typev3.StatusCode,
    body: bytes, headers: dict[str, str],
) -> None:
    assert await exchange(channel, [message]) == [immediate(status, body, **headers)]
    await assert_routes(channel)


BODY_ERRORS = [
    pytest.param(
        chat("nope", "python"), ST.NotFound,
        invalid("The model 'nope' does not exist.", "model", "model_not_found"),
        id="unknown-model",
    ),
    pytest.param(
        b'{"model": "auto", "messages": [', ST.BadRequest,
        invalid("request body is not valid JSON: Expecting value: line 1 column 32 (char 31)"),
        id="malformed-json",
    ),
    pytest.param(
        b'{"model": "auto"}', ST.BadRequest,
        invalid("you must provide a messages parameter", "messages"), id="no-messages",
    ),
    pytest.param(
        b'{"model": "auto", "messages": [{"role": "user", "content": "' + b"x" * MAX_BYTES
        + b'"}]}', ST.PayloadTooLarge,
        invalid(f"request body is larger than the limit of {MAX_BYTES} bytes", None,
                "request_too_large"), id="body-over-cap",
    ),
]


KEY_IN_MODEL = "sk-SECRETinmodel0123456789abcdef"


async def test_a_key_put_in_model_is_neither_logged_nor_echoed(
        channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture) -> None:
    """A client that pastes its API key into ``model``: the 404 and the log line show a
    placeholder (one rule for both, in extproc.secretscan.redacted)."""
    expected = invalid("The model '[redacted: looks like an API key]' does not exist.",
                       "model", "model_not_found")
    with caplog.at_level(logging.INFO):
        body = await exchange(channel, [request_headers(), request_body(
            chat(KEY_IN_MODEL, "hi"))])
        listed = await exchange(channel, [request_headers(
            "GET", f"/v1/models/{KEY_IN_MODEL}", True)])
    assert body == [HEADERS_CONTINUE, immediate(ST.NotFound, expected)]
    assert listed == [immediate(ST.NotFound, expected)]
    assert [r for r in caplog.records if r.getMessage() == "request rejected"]
    assert "SECRETinmodel" not in caplog.text
    assert "SECRETinmodel" not in json.dumps([vars(r) for r in caplog.records], default=str)


@pytest.mark.parametrize(("body", "status", "error"), BODY_ERRORS)
async def test_body_phase_errors(
    channel: grpc.aio.Channel, body: bytes, status: typev3.StatusCode, error: bytes
) -> None:
    responses = await exchange(channel, [request_headers(), request_body(body)])
    assert responses == [HEADERS_CONTINUE, immediate(status, error)]
    await assert_routes(channel)


async def test_list_models(channel: grpc.aio.Channel) -> None:
    (response,) = await exchange(channel, [request_headers("GET", "/v1/models?x=1", True)])
    created = json.loads(response.immediate_response.body)["data"][0]["created"]
    names = ["auto", "vllm-sr/auto", "general", "local/coder"]
    data = [
        {"id": n, "object": "model", "created": created, "owned_by": "semantic-router"}
        for n in names
    ]
    expected = json.dumps({"object": "list", "data": data}).encode()
    assert response == immediate(ST.OK, expected)
    await assert_routes(channel)


@pytest.mark.parametrize("name", ["local/coder", "vllm-sr/auto"])
async def test_get_one_model(channel: grpc.aio.Channel, name: str) -> None:
    (response,) = await exchange(channel, [request_headers("GET", f"/v1/models/{name}", True)])
    created = json.loads(response.immediate_response.body)["created"]
    obj = {"id": name, "object": "model", "created": created, "owned_by": "semantic-router"}
    assert response == immediate(ST.OK, json.dumps(obj).encode())


async def test_unknown_path_passes_through_with_mode_override(
    channel: grpc.aio.Channel,
) -> None:
    responses = await exchange(channel, [request_headers("GET", "/healthz", True)])
    expected = ep.ProcessingResponse(
        request_headers=ep.HeadersResponse(response=ep.CommonResponse()),
        mode_override=epf.ProcessingMode(
            response_header_mode=epf.ProcessingModeHeaderSendMode.SKIP
        ),
    )
    assert responses == [expected]
    await assert_routes(channel)


async def test_unknown_path_is_404_by_default(channel: grpc.aio.Channel) -> None:
    responses = await exchange(channel, [request_headers("POST", "/v1/nope", True)])
    assert len(responses) == 1
    immediate_response = responses[0].immediate_response
    assert immediate_response is not None
    assert immediate_response.status.code == ST.NotFound  # type: ignore[union-attr]
    assert json.loads(immediate_response.body)["error"]["code"] == "unknown_url"


async def test_garbage_message_ends_only_its_stream(channel: grpc.aio.Channel) -> None:
    call = channel.stream_stream(PROCESS, request_serializer=None, response_deserializer=None)()
    await call.write(b"\xff\xff\xff")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "unreadable message"
    await assert_routes(channel)


async def test_health_serving_and_stop(router: Router) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{router.grpc_port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for service in ("", "envoy.service.ext_proc.v3.ExternalProcessor"):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert router.ready
        await router.stop(0.5)
        assert not router.ready
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_stream_ends_after_the_body_answer_by_default() -> None:
    """Response headers are skipped, so the router ends the call itself after the body."""
    config = load_config_text(CONFIG.replace("end_streams_after_request: false",
                                             "end_streams_after_request: true"))
    router = Router(config, grpc_address="127.0.0.1:0", admin_address="127.0.0.1:0")
    await router.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{router.grpc_port}") as channel:
            call = channel.stream_stream(PROCESS, request_serializer=None,
                                         response_deserializer=None)()
            await call.write(bytes(request_headers()))
            assert ep.ProcessingResponse.parse(await call.read()) == HEADERS_CONTINUE
            await call.write(bytes(request_body(chat("auto", "python please"))))
            answer = ep.ProcessingResponse.parse(await call.read())
            assert answer.request_body is not None
            assert await call.read() is grpc.aio.EOF  # ended by the router, not the client
            assert await call.code() == grpc.StatusCode.OK
    finally:
        await router.stop(0.5)


def body_with_attributes(body: bytes, **headers: str) -> ep.ProcessingRequest:
    """What Envoy sends on a one-message route: the body, the headers as attributes."""
    values = {":path": CHAT_PATH, ":method": "POST", "x-request-id": "r-1",
              "content-type": "application/json",
              **{k.replace("_", "-"): v for k, v in headers.items()}}
    fields = {HEADER_ATTRIBUTES[name]: pb.Value(string_value=value)
              for name, value in values.items() if name in HEADER_ATTRIBUTES}
    return ep.ProcessingRequest(
        request_body=ep.HttpBody(body=body, end_of_stream=True),
        attributes={"envoy.filters.http.ext_proc": pb.Struct(fields=fields)},
    )


async def test_one_message_request_is_checked_and_routed(channel: grpc.aio.Channel) -> None:
    body = chat("auto", "Fix my Python code", temperature=0.2)
    new_body = body.replace(b'"auto"', b'"Qwen/Qwen2.5-Coder-7B-Instruct"', 1)
    # one message in, one answer out, and the router ends the stream itself
    assert await exchange(channel, [body_with_attributes(body)]) == [
        routed_body(new_body, "local_coder", "code", "local/coder", "routed")]
    wrong_type = await exchange(channel, [body_with_attributes(body, content_type="text/plain")])
    assert wrong_type == [immediate(
        ST.UnsupportedMediaType,
        invalid("content type 'text/plain' is not supported; send application/json", None,
                "unsupported_media_type"))]
    wrong_method = await exchange(channel, [body_with_attributes(body, **{":method": "PUT"})])
    assert wrong_method[0].immediate_response.status.code == ST.MethodNotAllowed
    # unknown paths are answered as on the two-message path (router.unknown_paths: reject)
    other = await exchange(channel, [body_with_attributes(body, **{":path": "/v1/embeddings"})])
    assert other[0].immediate_response.status.code == ST.NotFound
    await assert_routes(channel)

