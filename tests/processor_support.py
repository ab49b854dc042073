"""Drive one request through a ``StreamProcessor`` in process (headers, then the body), and
read what it answered."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse

from extproc.context import RouterState
from extproc.envoy_adapter import Phase, RequestMessage
from extproc.processor import StreamProcessor

CHAT_HEADERS = {":method": "POST", ":path": "/v1/chat/completions"}

# Two models (the default `general`, and `coder`) for configs that test routing in process.
TWO_MODELS = """
providers:
  defaults: {model: general}
  models:
    - {name: general, provider_model_id: m/g, backend_refs: [{name: a, endpoint: "h:1"}]}
    - {name: coder, provider_model_id: m/c, backend_refs: [{name: b, endpoint: "h:2"}]}
"""


async def send_chat(state: RouterState, model: str, text: str | list[dict[str, str]],
                    headers: Mapping[str, str] = CHAT_HEADERS,
                    logger: str = "test.processor") -> ProcessingResponse:
    """A one-turn chat request for ``model`` (``text``: the content, a string or its parts);
    the processor's answer to its body."""
    processor = StreamProcessor(state, logging.getLogger(logger))
    await processor.handle(RequestMessage(Phase.REQUEST_HEADERS, dict(headers), b"", False))
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    raw = await processor.handle(RequestMessage(Phase.REQUEST_BODY, {}, body.encode(), True))
    return ProcessingResponse.parse(raw)


def routed_decision(response: ProcessingResponse) -> str:
    """The decision of a routed (not refused) request, from the router's dynamic metadata."""
    assert response.request_body is not None, response
    fields = response.dynamic_metadata.fields["envoy.filters.http.ext_proc"]
    return str(fields.struct_value.fields["decision"].string_value)  # type: ignore[union-attr]
