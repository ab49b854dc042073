"""``GET /v1/models`` and ``/v1/models/{id}``: the id arrives percent-encoded as the SDKs send
it, and every name chat accepts (auto names, model names, unambiguous provider ids) is found."""

from __future__ import annotations

import json
import logging

import pytest
from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse

from extproc.config import load_config_text
from extproc.context import RouterState, build_state
from extproc.envoy_adapter import Phase, RequestMessage
from extproc.metrics import RouterMetrics
from extproc.processor import StreamProcessor

CONFIG = """
router: {auto_model_names: [auto, vllm-sr/auto]}
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: Qwen/Qwen3-8B, backend_refs: [{name: a, endpoint: "h:1"}]}
    - {name: code, provider_model_id: m/shared, backend_refs: [{name: b, endpoint: "h:2"}]}
    - {name: other, provider_model_id: m/shared, backend_refs: [{name: c, endpoint: "h:3"}]}
"""


@pytest.fixture(scope="module")
def state() -> RouterState:
    return build_state(load_config_text(CONFIG), RouterMetrics(), engine=None)


async def get(state: RouterState, path: str) -> tuple[int, dict[str, object]]:
    processor = StreamProcessor(state, logging.getLogger("test"))
    headers = {":method": "GET", ":path": path}
    raw = await processor.handle(RequestMessage(Phase.REQUEST_HEADERS, headers, b"", True))
    reply = ProcessingResponse.parse(raw).immediate_response
    assert reply is not None and reply.status is not None
    return int(reply.status.code), json.loads(reply.body)


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v1/models/auto", "auto"),
        ("/v1/models/vllm-sr%2Fauto", "vllm-sr/auto"),  # what openai's models.retrieve sends
        ("/v1/models/vllm-sr%2fauto", "vllm-sr/auto"),
        ("/v1/models/vllm-sr/auto", "vllm-sr/auto"),
        ("/v1/models/general?x=1", "general"),
        ("/v1/models/Qwen%2FQwen3-8B", "Qwen/Qwen3-8B"),  # chat accepts the provider id too
        ("/v1/models/%67eneral", "general"),
    ],
)
async def test_retrieve_finds_every_name_chat_accepts(
    state: RouterState, path: str, model: str
) -> None:
    status, body = await get(state, path)
    assert status == 200
    assert body["id"] == model and body["object"] == "model"


@pytest.mark.parametrize(
    ("path", "quoted"),
    [
        ("/v1/models/vllm-sr%252Fauto", "vllm-sr%2Fauto"),  # decoded once, not twice
        ("/v1/models/m%2Fshared", "m/shared"),  # two models serve it: chat refuses it too
        ("/v1/models/auto%00", "auto\x00"),
        ("/v1/models/..%2Fauto", "../auto"),
        ("/v1/models/vllm-sr%2F..%2Fauto", "vllm-sr/../auto"),
        ("/v1/models/%ff", "\ufffd"),
        ("/v1/models/", ""),
    ],
)
async def test_odd_ids_are_unknown_models(state: RouterState, path: str, quoted: str) -> None:
    status, body = await get(state, path)
    assert status == 404
    assert body["error"] == {"message": f"The model '{quoted}' does not exist.",
                             "type": "invalid_request_error", "param": "model",
                             "code": "model_not_found"}


async def test_the_list_names_each_model_once(state: RouterState) -> None:
    status, body = await get(state, "/v1/models")
    assert status == 200
    data = body["data"]
    assert isinstance(data, list)
    assert [m["id"] for m in data] == ["auto", "vllm-sr/auto", "general", "code", "other"]
