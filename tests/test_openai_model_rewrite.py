"""The surgical ``model`` rewrite: only the top-level model value's bytes change."""

from __future__ import annotations

import json

import pytest

from extproc.openai_request import Endpoint, parse_request

CHAT = Endpoint.CHAT
COMPLETIONS = Endpoint.COMPLETIONS


def expected_rewrite(raw: bytes, old: bytes, new: bytes) -> bytes:
    """``raw`` with every occurrence of ``old`` (the top-level model values, written so they
    occur nowhere else) replaced by ``new``."""
    assert old in raw
    return raw.replace(old, new)


REWRITES = [
    pytest.param(
        b'{"model":"auto","messages":[{"role":"user","content":"hi"}]}',
        b'"auto"',
        id="compact",
    ),
    pytest.param(
        b'\r\n {\n  "stream" : false ,\n\t"model"  :\t"auto" ,"messages":[{"content":"x",'
        b'"role":"user"}]  ,"z":1}\n ',
        b'"auto"',
        id="odd-whitespace-and-key-order",
    ),
    pytest.param(
        b'{"temperature":1.0E2,"top_p":0.50,"n":1e0,"model":"auto","messages":'
        b'[{"role":"user","content":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\/"}],'
        b'"logit_bias":{"50256":-100.000}}',
        b'"auto"',
        id="floats-and-escapes",
    ),
    pytest.param(
        '{"model":"auto","messages":[{"role":"user","content":"naïve 日本 😀"}]}'.encode(),
        b'"auto"',
        id="raw-utf8",
    ),
    pytest.param(
        b'{"model":"auto","messages":[{"role":"user","content":"x","model":"inner"}],'
        b'"metadata":{"model":"nested"},"tools":[{"model":"tool"}]}',
        b'"auto"',
        id="nested-model-keys-untouched",
    ),
    pytest.param(
        b'{"model":"vllm-sr/auto","messages":[{"role":"user","content":"x"}],'
        b'"model":"vllm-sr/auto"}',
        b'"vllm-sr/auto"',
        id="duplicate-top-level-model",
    ),
    pytest.param(
        b'{"model":"\\u0061uto","messages":[{"role":"user","content":"x"}]}',
        b'"\\u0061uto"',
        id="escaped-model-value",
    ),
]


@pytest.mark.parametrize(("raw", "old"), REWRITES)
@pytest.mark.parametrize("new", ["Qwen/Qwen3-8B", 'we"ird\\model', "模型"])
def test_with_model_changes_only_the_model_value(raw: bytes, old: bytes, new: str) -> None:
    request = parse_request(raw, CHAT)
    rewritten = request.with_model(new)
    encoded = json.dumps(new, ensure_ascii=False).encode()
    assert rewritten == expected_rewrite(raw, old, encoded)
    assert json.loads(rewritten)["model"] == new
    assert parse_request(rewritten, CHAT).model == new


def test_with_model_handles_escaped_key_and_other_endpoint() -> None:
    raw = b'{"prompt":"model","mod\\u0065l":"auto","x":"\\"model\\":\\"auto\\""}'
    request = parse_request(raw, COMPLETIONS)
    assert request.model == "auto"
    assert request.with_model("B") == raw.replace(b'l":"auto"', b'l":"B"', 1)


def test_with_model_same_length_is_idempotent() -> None:
    raw = b'{"model": "auto", "prompt": "x"}'
    assert parse_request(raw, COMPLETIONS).with_model("auto") == raw
