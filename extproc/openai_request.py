"""A minimal, typed view of an OpenAI request body, and the surgical ``model`` rewrite.

We parse the top-level object ourselves (values through the C JSON scanner) so that we know
where each top-level ``model`` value sits in the original text: the rewrite replaces exactly
those bytes, and every other field reaches the backend as the client sent it.
"""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from extproc.confusables import readable
from extproc.errors import BadRequest
from extproc.names import CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH, RESPONSES_PATH
from extproc.openai_content import (
    call_text,
    content_text,
    item_text,
    prompt_text,
    template_extras,
    tool_names,
)


class Endpoint(Enum):
    CHAT = "chat"
    COMPLETIONS = "completions"
    RESPONSES = "responses"


ENDPOINTS: Mapping[str, Endpoint] = MappingProxyType(
    {
        CHAT_COMPLETIONS_PATH: Endpoint.CHAT,
        COMPLETIONS_PATH: Endpoint.COMPLETIONS,
        RESPONSES_PATH: Endpoint.RESPONSES,
    }
)
"""The routed OpenAI paths (POST only); the Envoy renderer gives them one-message routes."""


class TextSource(Enum):
    LAST_USER = "last_user"
    RECENT_USER = "recent_user"
    ALL_USER = "all_user"
    CONVERSATION = "conversation"
    TOOLS = "tools"  # the names of the tools the request offers, one per line
    INSTRUCTIONS = "instructions"  # system and developer messages (Responses: `instructions`)
    ASSISTANT = "assistant"  # the assistant turns the client sends back, tool calls included
    TOOL_RESULTS = "tool_results"  # tool and function results (Responses: function outputs)


# The sources that read every message of some roles; a completion's prompt is all of them but
# the instructions, the assistant's and the tools' (it has none).
_SOURCE_ROLES: Mapping[TextSource, frozenset[str]] = MappingProxyType({
    TextSource.ALL_USER: frozenset({"user"}),
    TextSource.INSTRUCTIONS: frozenset({"system", "developer"}),
    TextSource.ASSISTANT: frozenset({"assistant"}),
    TextSource.TOOL_RESULTS: frozenset({"tool", "function"}),
})
_PROMPT_SOURCES = frozenset({TextSource.LAST_USER, TextSource.RECENT_USER, TextSource.ALL_USER,
                             TextSource.CONVERSATION})

# recent_user: a last user message shorter than this (about six words: "why?", "and in Rust?")
# is read with the user messages before it until the text is this long, so a follow-up keeps
# its topic (and the task a few approvals back, "yes", "go on", still decides in an agent
# loop), while "ok. who won the 1998 world cup?" stands alone. At most RECENT_MAX_MESSAGES.
RECENT_MIN_CHARS = 32
RECENT_MAX_MESSAGES = 8
# A longer last turn that points back at what came before ("can you make it handle empty
# files too", "why does that line need a lock?") is read with the turns before it as well,
# unless it says it changes the subject; up to RECENT_REFERS_MAX_CHARS.
RECENT_REFERS_MAX_CHARS = 240
_REFERS_BACK = re.compile(
    r"\b(?:(?:make|do|fix|run|rewrite|explain|simplify|try|test|optimi[sz]e|convert|translate"
    r"|refactor|extend|change|modify|update|finish|continue|redo|solve|prove|check|verify|plot"
    r"|shorten|speed up)\s+(?:it|that|this|them|those|these)"
    r"|(?:why|how)\s+(?:is|does|did|was|would|do|can)\s+(?:that|this|it)"
    r"|(?:that|this)\s+(?:one|part|line|step|bit|function|code|answer|result|formula|equation"
    r"|error|approach|version|method|solution|loop|query|proof|example)"
    r"|the\s+(?:same|above|code|function|script|query|solution|formula|equation|proof|error"
    r"|output|last one|other one)"
    r"|instead|as well|what about|how about|what if|and if)\b"
    # a follow-up that opens with "and", "also", "plus" or an edit ("add validation that the
    # title is not empty", "add type hints")
    r"|\A\W*(?:and|also|plus|add)\b(?!\s+\d)",
    re.IGNORECASE,
)
_NEW_SUBJECT = re.compile(
    r"\b(?:unrelated|different (?:question|topic|subject|note)|new (?:question|topic)"
    r"|another question|change of subject|switching gears|by the way|btw|off[- ]topic"
    r"|side question|random question|totally different|something else)\b",
    re.IGNORECASE,
)


_MAX_INT_DIGITS = 4000  # below Python's own 4300-digit guard, whose message names sys.*


def _strict_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _strict_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise ValueError(f"number {literal[:20]} is out of range")
    return value


def _strict_int(literal: str) -> int:
    if len(literal) > _MAX_INT_DIGITS:
        raise ValueError(f"integer with {len(literal)} digits is too large")
    return int(literal)


# Strict JSON, as OpenAI's API: NaN, Infinity and numbers beyond a double are refused.
_DECODER = json.JSONDecoder(
    parse_constant=_strict_constant, parse_float=_strict_float, parse_int=_strict_int)
_WS_RUN = re.compile(r"[ \t\n\r]*")  # JSON whitespace
_WS = frozenset(" \t\n\r")
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # what raw_decode calls
# A text of at most _MAX_INT_DIGITS characters cannot hold a longer integer, so there the
# int hook cannot refuse anything and C's own int parsing gives the same values.
_SCAN_SHORT = json.JSONDecoder(  # type: ignore[attr-defined]
    parse_constant=_strict_constant, parse_float=_strict_float).scan_once
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]
# json.dumps(str, ensure_ascii=False) and json.dumps(str) are exactly these calls
_encode_str = json.encoder.encode_basestring
_encode_str_ascii = json.encoder.encode_basestring_ascii
_SPAN_KEYS = frozenset({"model", "messages"})
# null content is valid only for assistant turns (tool calls) and tool results
_CONTENT_REQUIRED = frozenset({"user", "system", "developer"})
# The roles OpenAI accepts, case-sensitive as it is: guards that read the user turns
# (text_source all_user) must not be sidestepped by "User" or "wizard".
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
RESPONSES_ROLES = ("user", "assistant", "system", "developer")
_CHAT_ROLES = frozenset(CHAT_ROLES)
_RESPONSES_ROLES = frozenset(RESPONSES_ROLES)
# JSON escapes can spell a lone surrogate ("\ud800"): a valid body whose text cannot be
# encoded, which the tokenizers reject (failing the whole classifier batch it lands in).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    text: str


@dataclass(frozen=True, slots=True)
class OpenAIRequest:
    endpoint: Endpoint
    model: str
    stream: bool
    messages: tuple[Message, ...]
    prompt_text: str
    text: str
    """The source text; ``spans`` locate its top-level ``model`` and ``messages`` values."""
    spans: tuple[tuple[str, int, int], ...]
    raw_messages: tuple[Any, ...] = ()
    """``messages`` as parsed, for plugins that edit them (system prompts)."""
    tool_names: tuple[str, ...] = ()
    """The names of the offered ``tools`` (chat and Responses): what a coding agent is."""
    choices: int = 1
    """``n`` where it is a valid count (1-128), times the number of prompts of a completion:
    a canned reply answers that many times."""
    include_usage: bool = False
    """``stream_options.include_usage``: a canned stream ends with a usage chunk."""
    _texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """``classifier_text`` of each distinct non-ASCII source text, computed once."""

    @property
    def model_spans(self) -> tuple[tuple[int, int], ...]:
        return tuple((start, end) for key, start, end in self.spans if key == "model")

    def classifier_text(self, source: TextSource) -> str:
        """The text the classifiers see (completions have only their prompt); lone
        surrogates become U+FFFD, so every classifier can encode it, and hostile spellings
        (look-alike letters, invisible characters: ``extproc.confusables``) read as meant."""
        raw = self._source_text(source)
        if raw.isascii():  # most requests: no look-alikes, no surrogates
            return raw
        cached = self._texts.get(raw)  # sources often read the same text (one user message)
        if cached is not None:
            return cached
        text = readable(raw)
        if _LONE_SURROGATE.search(text) is not None:
            text = _LONE_SURROGATE.sub("\ufffd", text)
        self._texts[raw] = text
        return text

    def classifier_text_for(self, source: str) -> str:
        """``classifier_text`` by the source's config name (a signal's ``text_source``)."""
        return self.classifier_text(TextSource(source))

    def _source_text(self, source: TextSource) -> str:
        if source is TextSource.TOOLS:
            return "\n".join(self.tool_names)
        if self.endpoint is Endpoint.COMPLETIONS:
            return self.prompt_text if source in _PROMPT_SOURCES else ""
        roles = _SOURCE_ROLES.get(source)
        if roles is not None:
            return "\n".join(m.text for m in self.messages if m.role in roles)
        if source is TextSource.LAST_USER:
            for message in reversed(self.messages):
                if message.role == "user":
                    return message.text
            return self.messages[-1].text if self.messages else ""
        if source is TextSource.RECENT_USER:
            return self._recent_user_text()
        return "\n".join(m.text for m in self.messages)

    def _recent_user_text(self) -> str:
        """The last user message, preceded by earlier user messages while the text is
        shorter than ``RECENT_MIN_CHARS`` (at most ``RECENT_MAX_MESSAGES`` messages); a last
        message that refers back (``_REFERS_BACK``, no ``_NEW_SUBJECT``) counts as empty."""
        turns: list[str] = []
        length = 0
        for message in reversed(self.messages):
            if message.role != "user":
                continue
            turns.append(message.text)
            length += 0 if len(turns) == 1 and _refers_back(message.text) else len(
                message.text.strip())
            if length >= RECENT_MIN_CHARS or len(turns) == RECENT_MAX_MESSAGES:
                break
        if not turns:
            return self.messages[-1].text if self.messages else ""
        return "\n".join(reversed(turns))

    def total_text_length(self) -> int:
        if self.endpoint is Endpoint.COMPLETIONS:
            return len(self.prompt_text)
        return sum(len(m.text) for m in self.messages)

    def with_model(self, model: str) -> bytes:
        """The original body with every top-level ``model`` value replaced by ``model``."""
        return self.rewrite(model)

    def rewrite(self, model: str, messages: list[Any] | None = None) -> bytes:
        """The original body with ``model`` (and, when given, ``messages``) replaced; every
        other byte stays as the client sent it."""
        values = {"model": _json_text(model)}
        if messages is not None:
            values["messages"] = _json_text(messages)
        parts = []
        cursor = 0
        for key, start, end in self.spans:
            replacement = values.get(key)
            if replacement is None:
                continue
            parts.append(self.text[cursor:start])
            parts.append(replacement)
            cursor = end
        parts.append(self.text[cursor:])
        return "".join(parts).encode("utf-8")


def _json_text(value: Any) -> str:
    """``value`` as JSON that encodes to UTF-8: non-ASCII kept as is, unless a lone
    surrogate (from a client's escape) forces escapes."""
    if isinstance(value, str):  # what json.dumps runs for a str, without its set-up
        text = _encode_str(value)
        return text if _LONE_SURROGATE.search(text) is None else _encode_str_ascii(value)
    text = json.dumps(value, ensure_ascii=False)
    return text if _LONE_SURROGATE.search(text) is None else json.dumps(value)


def _refers_back(text: str) -> bool:
    return (RECENT_MIN_CHARS <= len(text) <= RECENT_REFERS_MAX_CHARS
            and _REFERS_BACK.search(text) is not None and _NEW_SUBJECT.search(text) is None)


def parse_request(body: bytes, endpoint: Endpoint) -> OpenAIRequest:
    """Parse and check the fields the router needs; raises ``BadRequest`` naming the param."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequest(f"request body is not valid UTF-8 (byte {err.start})") from err
    if text.startswith("\ufeff"):
        raise BadRequest("request body must not start with a byte order mark")
    fields, spans = _parse_top_level(text)
    model = fields.get("model")
    if model is None:
        raise BadRequest("you must provide a model parameter", param="model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' must be a non-empty string", param="model")
    stream = fields.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    raw_messages: tuple[Any, ...] = ()
    prompts = 1
    if endpoint is Endpoint.CHAT:
        messages = _messages(fields.get("messages"))
        raw_messages = tuple(fields["messages"])
        # vLLM's template reads these too: first, so the last message stays the last
        messages = (*(Message(role, text) for role, text in template_extras(fields)), *messages)
        prompt = ""
    elif endpoint is Endpoint.RESPONSES:
        messages = _responses_input(fields.get("input"), fields.get("instructions"))
        prompt = ""
    else:
        messages = ()
        prompt, prompts = prompt_text(fields.get("prompt"))
        suffix = fields.get("suffix")  # the text after the insertion: the model reads it too
        if suffix is not None and not isinstance(suffix, str):
            raise BadRequest("'suffix' must be a string", param="suffix")
        if suffix:
            prompt = f"{prompt}\n{suffix}" if prompt else suffix
    n = fields.get("n")
    options = fields.get("stream_options")
    if options is not None and not stream:  # as OpenAI and vLLM answer it
        raise BadRequest("'stream_options' is only allowed when 'stream' is true",
                         param="stream_options")
    return OpenAIRequest(endpoint, model, bool(stream), messages, prompt, text, tuple(spans),
                         raw_messages, tool_names(fields.get("tools")),
                         (n if type(n) is int and 1 <= n <= 128 else 1) * prompts,
                         isinstance(options, dict) and options.get("include_usage") is True)


def _parse_top_level(text: str) -> tuple[dict[str, Any], list[tuple[str, int, int]]]:
    """Parse a JSON object, remembering where each top-level ``model`` and ``messages``
    value sits."""
    end = len(text)
    pos = _skip_ws(text, 0)
    if pos >= end or text[pos] != "{":
        raise BadRequest("request body must be a JSON object")
    fields: dict[str, Any] = {}
    spans: list[tuple[str, int, int]] = []
    pos = _skip_ws(text, pos + 1)
    try:
        if pos < end and text[pos] == "}":
            pos += 1
        else:
            pos = _members(text, pos, fields, spans)
    except RecursionError as err:
        raise BadRequest("request body is nested too deeply") from err
    except ValueError as err:
        raise BadRequest(f"request body is not valid JSON: {err}") from err
    if _skip_ws(text, pos) != end:
        raise BadRequest("request body has extra data after the JSON object")
    return fields, spans


def _members(text: str, pos: int, fields: dict[str, Any],
             spans: list[tuple[str, int, int]]) -> int:
    """Read the members of the object whose first key starts at ``pos`` into ``fields`` and
    ``spans``; return the position after its "}". Raises ``ValueError`` (JSONDecodeError
    included) for malformed JSON."""
    end = len(text)
    scan = _SCAN_SHORT if end <= _MAX_INT_DIGITS else _SCAN
    while True:
        if pos >= end or text[pos] != '"':
            raise ValueError(f"expected a property name at char {pos}")
        key, pos = _scanstring(text, pos + 1)
        pos = _skip_ws(text, pos)
        if pos >= end or text[pos] != ":":
            raise ValueError(f"expected ':' at char {pos}")
        pos = _skip_ws(text, pos + 1)
        try:  # as JSONDecoder.raw_decode
            value, value_end = scan(text, pos)
        except StopIteration as err:
            raise json.JSONDecodeError("Expecting value", text, err.value) from None
        if key in _SPAN_KEYS:
            spans.append((key, pos, value_end))
        fields[key] = value
        pos = _skip_ws(text, value_end)
        if pos < end and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
            continue
        if pos < end and text[pos] == "}":
            return pos + 1
        raise ValueError(f"expected ',' or '}}' at char {pos}")


def _skip_ws(text: str, pos: int) -> int:
    """The position after the JSON whitespace at ``pos``; the regex only where there is more
    than the one space json.dumps' separators put after ":" and ","."""
    if text[pos : pos + 1] not in _WS:
        return pos
    if text[pos] == " " and text[pos + 1 : pos + 2] not in _WS:
        return pos + 1
    return _WS_RUN.match(text, pos).end()  # type: ignore[union-attr]  # `*` always matches


def _messages(value: Any) -> tuple[Message, ...]:
    if value is None:
        raise BadRequest("you must provide a messages parameter", param="messages")
    if not isinstance(value, list) or not value:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequest(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = _role(item.get("role"), f"messages[{i}].role", CHAT_ROLES, _CHAT_ROLES)
        content = item.get("content")
        if content is None and role in _CONTENT_REQUIRED:
            raise BadRequest(f"messages[{i}].content must be a string or an array of parts",
                             param=f"messages[{i}].content")
        if not isinstance(content, str):  # (a string is its own text: no param to format)
            content = content_text(content, f"messages[{i}].content")
        calls = call_text(item) if role == "assistant" else ""
        out.append(Message(role, f"{content}\n{calls}" if content and calls else content or calls))
    return tuple(out)


def _responses_input(value: Any, instructions: Any) -> tuple[Message, ...]:
    """The Responses API's ``input`` (a string, or items with a role and string or part
    content) and ``instructions`` as messages; tool-call items carry no text to classify."""
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string", param="instructions")
    out = [Message("system", instructions)] if instructions else []
    if isinstance(value, str) and value:
        return (*out, Message("user", value))
    if not isinstance(value, list) or not value:
        raise BadRequest("'input' must be a non-empty string or array", param="input")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequest(f"input[{i}] must be an object", param=f"input[{i}]")
        role = item.get("role")
        kind = item.get("type")
        reference = kind is None and "content" not in item  # {"id": ...}: its type is optional
        if role is None and (reference or kind not in (None, "message")):
            shown = item_text(item, kind)
            if shown:  # function calls and their outputs, reasoning summaries
                out.append(Message("tool" if kind == "function_call_output" else "assistant",
                                   shown))
            continue  # item references: nothing of their own
        role = _role(role, f"input[{i}].role", RESPONSES_ROLES, _RESPONSES_ROLES)
        out.append(Message(role, content_text(item.get("content"), f"input[{i}].content")))
    return tuple(out)


def _role(role: Any, param: str, names: tuple[str, ...], allowed: frozenset[str]) -> str:
    """``role`` if OpenAI accepts it; a 400 naming ``param`` (as OpenAI's) otherwise."""
    if not isinstance(role, str):
        raise BadRequest(f"{param} must be a string", param=param)
    if role not in allowed:
        supported = ", ".join(f"'{name}'" for name in names)
        raise BadRequest(f"Invalid value for {param}: '{role[:100]}'. "
                         f"Supported values are: {supported}.", param=param)
    return role
