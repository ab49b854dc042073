"""A model can declare which PII types it may receive; requests carrying others are refused
whether the router chose the model or the client named it."""

from __future__ import annotations

import json

import pytest
from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse

from extproc.config import ConfigError, load_config_text
from extproc.context import build_state
from extproc.metrics import RouterMetrics
from tests.processor_support import send_chat

CONFIG = """
providers:
  defaults: {model: local}
  models:
    - {name: local, provider_model_id: m/local, backend_refs: [{name: a, endpoint: "h:1"}]}
    - name: hosted
      provider_model_id: m/hosted
      pii_allowed: [EMAIL_ADDRESS]
      backend_refs: [{name: b, endpoint: "h:2"}]
signals:
  - {name: pii, type: pii}
  - {name: hosted_kw, type: keyword, keywords: [summarise]}
decisions:
  - {name: hosted, rules: {signal: hosted_kw}, model: hosted}
"""
HEADERS = {":method": "POST", ":path": "/v1/chat/completions"}


@pytest.fixture(scope="module")
def state() -> object:
    return build_state(load_config_text(CONFIG), RouterMetrics(), engine=None)


async def _send(state: object, model: str, text: str | list[dict[str, str]]) -> ProcessingResponse:
    return await send_chat(state, model, text, HEADERS)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "text", "refused"),
    [
        ("auto", "summarise this thread from bob@example.com", False),  # allowed type
        ("auto", "summarise: my card is 4111 1111 1111 1111", True),
        ("hosted", "charge 5555 5555 5555 4444 please", True),  # named explicitly
        ("hosted", "hello there", False),
        # a card number split over two content parts (joined by a line break)
        ("hosted", [{"type": "text", "text": "charge my card 4111 1111"},
                    {"type": "text", "text": "1111 1111 please"}], True),
        ("hosted", [{"type": "text", "text": "my ssn is 078-05-"},
                    {"type": "text", "text": "1120"}], True),
        ("local", "my card is 4111 1111 1111 1111", False),  # no limit on this model
    ],
)
async def test_pii_allowed(
    state: object, model: str, text: str | list[dict[str, str]], refused: bool
) -> None:
    response = await _send(state, model, text)
    if refused:
        assert response.immediate_response is not None
        assert response.immediate_response.status.code == 403  # type: ignore[union-attr]
        error = json.loads(response.immediate_response.body)["error"]
        assert error["code"] == "pii_not_allowed"
        assert "hosted" in error["message"]
        assert "4111" not in error["message"]  # names types, never the value
    else:
        assert response.request_body is not None


def test_pii_allowed_needs_a_pii_signal() -> None:
    without = CONFIG.replace("  - {name: pii, type: pii}\n", "")
    with pytest.raises(ConfigError) as info:
        load_config_text(without)
    assert any("providers.models[1].pii_allowed: needs a signal of type pii" in e
               for e in info.value.errors)
