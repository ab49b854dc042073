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
    """``response.created``, one ``response.output_text.delta`` per piece, then
    ``response.completed``, each as an SSE event with its sequence number."""
    item_id = response["output"][0]["id"]
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**response, "status": "in_progress", "output": []}})]
    events += [("response.output_text.delta", {"item_id": item_id, "output_index": 0,
                                               "content_index": 0, "delta": piece})
               for piece in deltas]
    events.append(("response.completed", {"response": response}))
    return [
        f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, **data})}\n\n"
        .encode()
        for n, (kind, data) in enumerate(events)
    ]
