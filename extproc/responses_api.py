"""The OpenAI Responses API's shapes (a ``response`` object and its streamed events), built
in one place for the canned replies of block decisions and for the simulated backend."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def response_object(text: str, model: str, ident: str, created: int,
                    usage: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """A completed ``response`` whose one output message holds ``text``; ``usage`` is
    (input tokens, output tokens)."""
    message = {"type": "message", "id": f"msg_{ident}", "status": "completed",
               "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return {
        "id": f"resp_{ident}", "object": "response", "created_at": created, "model": model,
        "status": "completed", "output": [message], "parallel_tool_calls": False,
        "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1],
                  "total_tokens": usage[0] + usage[1]}}


def response_events(response: dict[str, Any], deltas: Iterable[str]) -> list[bytes]:
    """The events OpenAI and vLLM stream for one output message, each as an SSE event with its
    sequence number: ``response.created`` and ``.in_progress``, the message item and its text
    part opened, one ``response.output_text.delta`` per piece, the text, part and item closed,
    then ``response.completed``. The SDKs' stream helpers (``client.responses.stream()``)
    need every one of them: a delta before its item was announced fails there."""
    message = response["output"][0]
    item_id = message["id"]
    text = message["content"][0]["text"]
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    opened = {**message, "status": "in_progress", "content": []}
    part = {"type": "output_text", "annotations": []}
    in_progress = {**response, "status": "in_progress", "output": [], "usage": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": in_progress}),
        ("response.in_progress", {"response": in_progress}),
        ("response.output_item.added", {"output_index": 0, "item": opened}),
        ("response.content_part.added", {**where, "part": {**part, "text": ""}}),
        *(("response.output_text.delta", {**where, "delta": piece, "logprobs": []})
          for piece in deltas),
        ("response.output_text.done", {**where, "text": text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": {**part, "text": text}}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.completed", {"response": response}),
    ]
    return [
        f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, **data})}\n\n"
        .encode()
        for n, (kind, data) in enumerate(events)
    ]
