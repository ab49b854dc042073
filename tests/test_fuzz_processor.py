"""Property tests: whatever a client sends, the processor answers with a valid
ProcessingResponse, and a rejection is a 4xx OpenAI error, never a 5xx or an exception.

At least 10,000 cases per run (``FUZZ_EXAMPLES`` raises it; ``make fuzz`` runs a long one).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from envoy_data_plane.envoy.service.ext_proc.v3 import ProcessingResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extproc.config import load_config_text
from extproc.context import build_state
from extproc.envoy_adapter import Phase, RequestMessage
from extproc.metrics import RouterMetrics
from extproc.processor import StreamProcessor

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0"))
CLIENT_ERRORS = {400, 404, 405, 413, 415}
CONFIG = """
listener: {max_request_bytes: 65536}
providers:
  defaults: {model: general}
  models:
    - name: general
      provider_model_id: m/general
      backend_refs: [{name: a, endpoint: "127.0.0.1:9"}]
    - {name: code, provider_model_id: m/code, backend_refs: [{name: b, endpoint: "127.0.0.1:9"}]}
signals:
  - {name: kw, type: keyword, keywords: [python, "c++", "re.*gex"], regex: false}
  - {name: long, type: context_length, min_tokens: 50}
decisions:
  - {name: code, priority: 2, rules: {any: [{signal: kw}, {not: {signal: long}}]}, model: code}
"""


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def state() -> Any:
    return build_state(load_config_text(CONFIG), RouterMetrics(), engine=None)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children,
                                                                        max_size=4),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant"]) | json_values},
        optional={"content": st.text() | json_values | st.lists(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"]) | json_values},
                                  optional={"text": st.text() | json_values}), max_size=3)},
    ),
    max_size=4,
) | json_values
request_objects = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["auto", "code", "general", "m/code", "gpt-x", ""]) | json_values,
        "messages": messages,
        "prompt": st.text() | json_values,
        "stream": st.booleans() | json_values,
        "temperature": json_values,
    },
)
bodies = (
    st.binary(max_size=512)
    | request_objects.map(lambda o: json.dumps(o).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
)
header_sets = st.fixed_dictionaries({
    ":method": st.sampled_from(["POST", "GET", "PUT", "DELETE"]) | st.text(max_size=8),
    ":path": st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/models",
                              "/v1/models/code", "/v1/models/x%0d%0a", "/other?q=1"])
    | st.text(max_size=40),
}, optional={
    "content-type": st.sampled_from(["application/json", "text/plain", "application/x+json"])
    | st.text(max_size=20),
    "content-encoding": st.sampled_from(["gzip", "identity"]) | st.text(max_size=10),
    "content-length": st.integers(min_value=0, max_value=10**7).map(str) | st.text(max_size=5),
    "x-request-id": st.text(max_size=30),
})


def _check(raw: bytes, phase: Phase) -> ProcessingResponse:
    response = ProcessingResponse.parse(raw)
    if response.immediate_response is not None:
        status = response.immediate_response.status
        assert status is not None
        code = int(status.code)
        assert code in CLIENT_ERRORS or code == 200
        body = json.loads(response.immediate_response.body)
        if code != 200:
            assert set(body["error"]) == {"message", "type", "param", "code"}
        return response
    field = {Phase.REQUEST_HEADERS: "request_headers", Phase.REQUEST_BODY: "request_body"}[phase]
    assert getattr(response, field) is not None
    return response


@settings(max_examples=EXAMPLES or 10_000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(headers=header_sets, body=bodies, end_of_stream=st.booleans())
def test_any_request_gets_a_valid_response(
    loop: asyncio.AbstractEventLoop, state: Any, headers: dict[str, str], body: bytes,
    end_of_stream: bool,
) -> None:
    processor = StreamProcessor(state, _quiet_logger())
    first = loop.run_until_complete(processor.handle(
        RequestMessage(Phase.REQUEST_HEADERS, headers, b"", end_of_stream)))
    response = _check(first, Phase.REQUEST_HEADERS)
    if response.immediate_response is not None or end_of_stream:
        return
    second = loop.run_until_complete(processor.handle(
        RequestMessage(Phase.REQUEST_BODY, {}, body, True)))
    _check(second, Phase.REQUEST_BODY)


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("fuzz")
    logger.disabled = True
    return logger
