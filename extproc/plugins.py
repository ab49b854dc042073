"""Decision plugins: what a matched decision does besides choosing a model.

``block`` refuses the request (an OpenAI-style error with the configured status, or a canned
assistant reply for clients that need a 200, as JSON or SSE to match ``stream``);
``system_prompt`` inserts or replaces the system message; ``set_headers`` adds upstream
headers (validated at config load, so no client value reaches a header).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from extproc.decision import Block, SignalResult, SystemPrompt
from extproc.errors import Blocked
from extproc.names import DECISION_HEADER
from extproc.openai_request import Endpoint, OpenAIRequest
from extproc.responses_api import response_events, response_object

_DEBUG_LIMIT = 4096


def blocked_error(block: Block, decision: str) -> Blocked:
    """The configured error; the decision's name rides along in the decision header."""
    error = Blocked(block.message, code=block.code, headers={DECISION_HEADER: decision})
    error.status = block.status
    return error


def canned_reply(block: Block, request: OpenAIRequest) -> tuple[bytes, dict[str, str]]:
    """A 200 reply holding ``block.message`` as the assistant's answer, shaped like what the
    client asked for (chat or completions, streamed or not, ``n`` choices, a usage chunk when
    the stream asks for one), under the model name the client sent."""
    created = int(time.time())
    ident = f"blocked-{uuid.uuid4().hex[:24]}"
    model = request.model
    if request.endpoint is Endpoint.RESPONSES:
        return _responses_reply(block.message, model, ident, created, request.stream)
    chat = request.endpoint is Endpoint.CHAT
    kind = ("chat.completion" if chat else "text_completion") + (
        ".chunk" if chat and request.stream else "")
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    if not chat:
        answer: dict[str, Any] = {"text": block.message, "logprobs": None}
    elif request.stream:
        answer = {"delta": {"role": "assistant", "content": block.message}}
    else:
        answer = {"message": {"role": "assistant", "content": block.message}}
    choices = [{"index": i, **answer, "finish_reason": "content_filter"}
               for i in range(request.choices)]
    payload: dict[str, Any] = {"id": ident, "object": kind, "created": created, "model": model,
                               "choices": choices}
    if not request.stream:
        payload["usage"] = usage
        return json.dumps(payload).encode(), {"content-type": "application/json"}
    chunks = [payload]
    if request.include_usage:
        chunks.append({**payload, "choices": [], "usage": usage})
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return body.encode(), {"content-type": "text/event-stream", "cache-control": "no-cache"}


def with_system_prompt(messages: tuple[Any, ...], prompt: SystemPrompt) -> list[Any]:
    """``insert`` puts our system message first, keeping the client's; ``replace`` swaps the
    client's system messages for ours (or inserts when there are none)."""
    ours = {"role": "system", "content": prompt.text}
    if prompt.mode == "insert":
        return [ours, *messages]
    kept = [m for m in messages if not (isinstance(m, dict) and m.get("role") == "system")]
    return [ours, *kept]


def debug_summary(decision: str, results: Mapping[str, SignalResult]) -> str:
    """Per-signal results for the debug response header: compact ASCII JSON (no control
    characters can reach the header), bounded in size."""
    signals = {
        name: {"matched": r.matched, "score": round(r.score, 4), "label": r.label,
               **({"error": r.error} if r.error else {})}
        for name, r in sorted(results.items())
    }
    text = json.dumps({"decision": decision, "signals": signals}, ensure_ascii=True,
                      separators=(",", ":"))
    if len(text) > _DEBUG_LIMIT:
        text = json.dumps({"decision": decision, "signals": sorted(signals)[:50],
                           "truncated": True}, ensure_ascii=True, separators=(",", ":"))
    return text[:_DEBUG_LIMIT]


def _responses_reply(text: str, model: str, ident: str, created: int,
                     stream: bool) -> tuple[bytes, dict[str, str]]:
    """The same canned answer in the Responses API's shape."""
    response = response_object(text, model, ident, created)
    if not stream:
        return json.dumps(response).encode(), {"content-type": "application/json"}
    body = b"".join(response_events(response, [text]))
    return body, {"content-type": "text/event-stream", "cache-control": "no-cache"}
