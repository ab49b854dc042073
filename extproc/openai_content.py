"""What each part of an OpenAI request shows the served model as text: content strings and
part arrays (text, refusal and thinking parts, plain-string parts), assistant tool calls,
Responses items, completions prompts, and the names of the offered tools. Malformed shapes the
router must refuse raise ``BadRequest`` naming the param; shapes it only reads are skipped."""

from __future__ import annotations

from typing import Any

from extproc.errors import BadRequest

# Content parts whose text the served model reads (vLLM renders refusal and thinking parts of
# any role as text too): the part type -> the field holding its text. A part of another type
# that carries a string "text" is read as well: guards must not miss what the model sees.
_TEXT_FIELDS = {"text": "text", "input_text": "text", "output_text": "text",
                "refusal": "refusal", "thinking": "thinking", "reasoning": "text"}


def call_text(message: dict[str, Any]) -> str:
    """An assistant turn's tool calls (and legacy ``function_call``) as the model reads them
    back: each function's name and arguments. Malformed entries are the backend's to refuse."""
    calls = message.get("tool_calls")
    functions = [c.get("function") for c in calls if isinstance(c, dict)] \
        if isinstance(calls, list) else []
    functions.append(message.get("function_call"))
    texts = [f"{f.get('name', '')}({f.get('arguments', '')})" for f in functions
             if isinstance(f, dict) and isinstance(f.get("name", ""), str)
             and isinstance(f.get("arguments", ""), str)]
    return "\n".join(texts)


def tool_names(tools: Any) -> tuple[str, ...]:
    """The names of the offered tools: chat's ``{"function": {"name"}}`` and the Responses
    API's ``{"name"}``. Their descriptions and schemas are the application's own text, read by
    no signal (a sandbox card number in a payment tool's description is not the user's)."""
    if not isinstance(tools, list):
        return ()
    names = []
    for tool in tools[:256]:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str) and name:
            names.append(name[:128])
    return tuple(names)


def item_text(item: dict[str, Any], kind: Any) -> str:
    """The text a non-message Responses item shows the model: a function call's name and
    arguments, a call output's string, a reasoning item's summary and content texts."""
    if kind in ("function_call", "custom_tool_call"):
        name, arguments = item.get("name"), item.get("arguments", item.get("input"))
        return f"{name}({arguments})" if isinstance(name, str) and isinstance(arguments, str) \
            else ""
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if isinstance(output, list):
            return content_text(output, "output", strict=False)
        return output if isinstance(output, str) else ""
    if kind == "reasoning":
        parts = [p for key in ("summary", "content") if isinstance(item.get(key), list)
                 for p in item[key]]
        return content_text(parts, "reasoning", strict=False)
    return ""


def content_text(content: Any, param: str, *, strict: bool = True) -> str:
    """String content, or the texts of a content-part array (parts may also be plain strings,
    as vLLM accepts); null is allowed (assistant messages with tool calls). ``strict=False``
    skips malformed parts instead of refusing them (items the router only reads)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{param} must be a string or an array of content parts", param=param)
    texts = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            if not strict:
                continue
            raise BadRequest(
                f"{param}[{j}] must be a content part with a type", param=f"{param}[{j}]"
            )
        field = _TEXT_FIELDS.get(part["type"], "text")
        text = part.get(field)
        if isinstance(text, str):
            texts.append(text)
        elif strict and part["type"] in _TEXT_FIELDS:
            raise BadRequest(f"{param}[{j}].{field} must be a string",
                             param=f"{param}[{j}].{field}")
    return "\n".join(texts)


def prompt_text(value: Any) -> tuple[str, int]:
    """A completion's prompt as text, and how many prompts it holds (a list of strings or of
    token-id lists is one prompt each, and each gets ``n`` choices)."""
    if value is None:
        raise BadRequest("you must provide a prompt parameter", param="prompt")
    if isinstance(value, str):
        return value, 1
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "\n".join(value), len(value)
    if isinstance(value, list) and value and all(_token_id(v) for v in value):
        return "", 1  # token ids: nothing to classify, route on the rest
    if isinstance(value, list) and value and all(
        isinstance(v, list) and v and all(_token_id(t) for t in v) for v in value
    ):
        return "", len(value)
    raise BadRequest("'prompt' must be a string, a non-empty array of strings or of "
                     "non-negative token ids", param="prompt")


def _token_id(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**31


def template_extras(fields: dict[str, Any]) -> list[tuple[str, str]]:
    """What vLLM's chat template also puts before the model beside the messages, as (role,
    text): a request's own ``chat_template`` and the string values of its
    ``chat_template_kwargs`` (instructions), and retrieved ``documents`` (results, as a tool's
    are). Malformed values are left for the backend to refuse."""
    extras: list[tuple[str, str]] = []
    template = fields.get("chat_template")
    if isinstance(template, str) and template:
        extras.append(("system", template))
    kwargs = fields.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        texts = [v for v in kwargs.values() if isinstance(v, str) and v]
        if texts:
            extras.append(("system", "\n".join(texts)))
    documents = fields.get("documents")
    if isinstance(documents, list):
        for document in documents:
            values = document.values() if isinstance(document, dict) else [document]
            text = "\n".join(v for v in values if isinstance(v, str) and v)
            if text:
                extras.append(("tool", text))
    return extras
