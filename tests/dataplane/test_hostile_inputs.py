"""Real Envoy + router + fake vLLM backends: inputs an acceptance run threw at the listener
(lone-surrogate escapes, long prompts, ``n`` > 1), each followed by a good request."""

from __future__ import annotations

import openai
import pytest

from tests.dataplane.conftest import Stack
from tests.dataplane.test_routing import chat_body, post

pytestmark = pytest.mark.dataplane


async def assert_still_routes(stack: Stack) -> None:
    after = await post(stack, chat_body("define a python function"))
    assert after.status_code == 200, after.text
    assert after.headers["x-backend-id"] == "code-1"


async def test_model_name_with_a_lone_surrogate_is_a_json_404(stack: Stack) -> None:
    """The 404 quotes the model name; encoding ``\\ud800`` used to raise and answer 500."""
    raw = b'{"model": "auto\\ud800", "messages": [{"role": "user", "content": "x"}]}'
    response = await post(stack, raw)
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    await assert_still_routes(stack)


async def test_lone_surrogate_in_content_is_routed_on_its_text(stack: Stack) -> None:
    raw = (b'{"model": "auto", "messages": [{"role": "user", '
           b'"content": "write a python function \\udfff please"}]}')
    response = await post(stack, raw)
    assert response.status_code == 200, response.text
    assert response.headers["x-semantic-router-decision"] == "code"
    received = stack.backends["code"].requests[-1].body
    assert received is not None
    assert received["messages"][0]["content"] == "write a python function \udfff please"


async def test_long_prompt_under_the_limit_reaches_the_backend(stack: Stack) -> None:
    """2 MiB is under ``max_request_bytes``; the simulated backend used to answer aiohttp's
    plain-text 413 beyond 1 MiB, which no vLLM does."""
    body = chat_body("python " + "word " * 420_000)
    response = await post(stack, body)
    assert response.status_code == 200, response.text[:200]
    assert response.headers["x-backend-id"] == "code-1"
    await assert_still_routes(stack)


async def test_n_choices_and_prompt_lists_through_the_sdk(stack: Stack) -> None:
    client = openai.AsyncOpenAI(base_url=stack.base_url + "/v1", api_key="sk", max_retries=0)
    messages = [{"role": "user", "content": "a python question"}]
    completion = await client.chat.completions.create(
        model="auto", messages=messages, n=3)  # type: ignore[arg-type]
    assert [c.index for c in completion.choices] == [0, 1, 2]
    stream = await client.chat.completions.create(
        model="auto", messages=messages, n=2, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True})
    indices = set()
    usage = None
    async for chunk in stream:
        indices.update(c.index for c in chunk.choices)
        usage = chunk.usage or usage
    assert indices == {0, 1}
    assert usage is not None
    legacy = await client.completions.create(model="auto", prompt=["python one", "python two"])
    assert [c.index for c in legacy.choices] == [0, 1]
    await client.close()
