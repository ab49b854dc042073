"""The soak bench's request mix, its per-request checks and its tally (bench/soak.py).

Every request is a ``Probe``: what to send and what must come back. Good requests (routed,
streamed, explicit) must answer 200 from the expected simulated backend (its ``x-backend-id``
header) with the rewritten model (``x-received-model``), the router's decision header and a
well-formed OpenAI object or SSE stream; malformed ones must answer their 4xx with an
OpenAI-style error body and the expected ``code``. Anything else is counted by kind:
``status`` (unexpected status), ``body`` (unexpected body shape, backend or header) or
``transport`` (connection error, timeout, truncated stream).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from extproc.names import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    DECISION_HEADER,
    EXPLICIT_DECISION,
)
from extproc.simulated_backend import BACKEND_ID_HEADER, RECEIVED_MODEL_HEADER

ERROR_KEYS = frozenset({"message", "type", "param", "code"})
MAX_SAMPLES = 3  # error details kept per (kind, category)

# (model name, provider model id, backend id) of the three simulated backends.
MODELS = (
    ("general", "Qwen/Qwen3-0.6B", "sim-general"),
    ("code", "Qwen/Qwen2.5-Coder-7B-Instruct", "sim-code"),
    ("reasoning", "Qwen/Qwen3-8B", "sim-reasoning"),
)
BACKEND_OF = {name: backend for name, _, backend in MODELS}
PROVIDER_ID_OF = {name: provider for name, provider, _ in MODELS}

# (prompt, expected decision, expected model) for keyword routing; see soak.router_document.
PROMPTS = (
    ("Write a Python function that merges two sorted lists.", "code", "code"),
    ("What is the derivative of x^3 * sin(x)? Show the steps.", "reasoning", "reasoning"),
    ("Suggest three friendly names for a neighbourhood bakery.", "default", "general"),
    ("My SQL query returns duplicate rows after a join; how do I fix it?", "code", "code"),
    ("Prove the theorem that the square root of two is irrational.", "reasoning", "reasoning"),
    ("Summarise the causes of the French Revolution in three sentences.", "default", "general"),
    ("Explain what a stack trace is and how to read one.", "code", "code"),
    ("Plan a two-day trip to Lisbon on a small budget.", "default", "general"),
)

KINDS = ("routed", "streamed", "explicit", "bad_json", "unknown_model", "wrong_method",
         "oversized", "bad_content_type")
# One cycle of the mix: 35% routed, 20% streamed, 20% explicit, 25% malformed (5% each).
SCHEDULE = (["routed"] * 7 + ["streamed"] * 4 + ["explicit"] * 4
            + ["bad_json", "unknown_model", "wrong_method", "oversized", "bad_content_type"])


@dataclass(frozen=True)
class Probe:
    kind: str
    method: str
    path: str
    body: bytes | None
    content_type: str = "application/json"
    status: int = 200
    backend: str | None = None  # good requests: expected x-backend-id
    provider_id: str | None = None  # good requests: expected x-received-model
    decision: str | None = None  # good requests: expected decision header
    error_code: str | None = None  # malformed requests: expected error.code
    stream: bool = False
    chunked: bool = False  # send ``body`` as a chunked upload (no content-length)


def _chat(model: str, prompt: str, **extra: object) -> bytes:
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": prompt}]
    return json.dumps({"model": model, "messages": messages, "max_tokens": 64, **extra}).encode()


def _good(kind: str, body: bytes, model: str, decision: str, *, path: str = CHAT_COMPLETIONS_PATH,
          stream: bool = False) -> Probe:
    return Probe(kind, "POST", path, body, backend=BACKEND_OF[model],
                 provider_id=PROVIDER_ID_OF[model], decision=decision, stream=stream)


def _good_probes(auto: str) -> dict[str, list[Probe]]:
    routed, streamed, explicit = [], [], []
    for i, (prompt, decision, model) in enumerate(PROMPTS):
        routed.append(_good("routed", _chat(auto, prompt, temperature=0.2), model, decision))
        completion = json.dumps({"model": auto, "prompt": prompt, "max_tokens": 16}).encode()
        routed.append(_good("routed", completion, model, decision, path=COMPLETIONS_PATH))
        options = {"stream_options": {"include_usage": True}} if i % 2 else {}
        streamed.append(_good("streamed", _chat(auto, prompt, stream=True, **options), model,
                              decision, stream=True))
    for i, (name, provider, _) in enumerate(MODELS * 2):
        asked = name if i < len(MODELS) else provider  # by public name, then by provider id
        explicit.append(_good("explicit", _chat(asked, PROMPTS[i][0]), name, EXPLICIT_DECISION))
    return {"routed": routed, "streamed": streamed, "explicit": explicit}


def _bad_probes(auto: str, max_request_bytes: int) -> dict[str, list[Probe]]:
    over = max_request_bytes + 16 * 1024
    huge = _chat(auto, "x" * over)
    chat = CHAT_COMPLETIONS_PATH
    return {
        "bad_json": [
            Probe("bad_json", "POST", chat, b'{"model": "auto", "messages": [', status=400),
            Probe("bad_json", "POST", chat, b"[1, 2]", status=400),
            Probe("bad_json", "POST", chat, b'{"model": "auto", "messages": "hi"}', status=400),
        ],
        "unknown_model": [Probe("unknown_model", "POST", chat, _chat("gpt-17", "hello"),
                                status=404, error_code="model_not_found")],
        "wrong_method": [
            Probe("wrong_method", "GET", chat, None, status=405, error_code="method_not_allowed"),
            Probe("wrong_method", "PUT", COMPLETIONS_PATH, _chat(auto, "hi"), status=405,
                  error_code="method_not_allowed"),
        ],
        "oversized": [
            Probe("oversized", "POST", chat, huge, status=413, error_code="request_too_large"),
            Probe("oversized", "POST", chat, huge, status=413, error_code="request_too_large",
                  chunked=True),
        ],
        "bad_content_type": [
            Probe("bad_content_type", "POST", chat, _chat(auto, "hi"), content_type="text/plain",
                  status=415, error_code="unsupported_media_type"),
        ],
    }


class Plan:
    """The fixed, deterministic request sequence: ``SCHEDULE`` slots, each kind cycling
    through its own probes."""

    def __init__(self, auto: str, max_request_bytes: int) -> None:
        self._by_kind = {**_good_probes(auto), **_bad_probes(auto, max_request_bytes)}
        self._seen: Counter[str] = Counter()

    def probe(self, index: int) -> Probe:
        kind = SCHEDULE[index % len(SCHEDULE)]
        probes = self._by_kind[kind]
        n = self._seen[kind]
        self._seen[kind] += 1
        return probes[n % len(probes)]

    def every_probe(self) -> list[Probe]:
        return [p for probes in self._by_kind.values() for p in probes]


class Unexpected(Exception):
    def __init__(self, category: str, detail: str) -> None:
        super().__init__(detail)
        self.category = category


def _check_headers(probe: Probe, response: aiohttp.ClientResponse) -> None:
    got = (response.headers.get(BACKEND_ID_HEADER), response.headers.get(RECEIVED_MODEL_HEADER),
           response.headers.get(DECISION_HEADER))
    want = (probe.backend, probe.provider_id, probe.decision)
    if got != want:
        raise Unexpected("body", f"(backend, model, decision) {got} != {want}")


def _check_completion(probe: Probe, data: Any) -> None:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        raise Unexpected("body", f"no choices in {str(data)[:200]}")
    choice = choices[0]
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else choice.get("text")
    if not (isinstance(text, str) and text.startswith(f"[{probe.backend}]")):
        raise Unexpected("body", f"answer text {str(text)[:80]!r} not from {probe.backend}")


async def _check_stream(probe: Probe, response: aiohttp.ClientResponse) -> None:
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        raise Unexpected("body", f"stream content-type {response.headers.get('content-type')}")
    pieces: list[str] = []
    done = False
    async for raw in response.content:
        line = raw.decode().strip()
        if not line:
            continue
        if not line.startswith("data: ") or done:
            raise Unexpected("body", f"bad SSE line {line[:80]!r} (after [DONE]: {done})")
        payload = line[len("data: "):]
        if payload == "[DONE]":
            done = True
            continue
        for choice in json.loads(payload).get("choices", []):
            delta = choice.get("delta") or {}
            pieces.append(delta.get("content") or choice.get("text") or "")
    if not done:
        raise Unexpected("transport", "stream ended without data: [DONE]")
    text = "".join(pieces)
    if not text.startswith(f"[{probe.backend}]"):
        raise Unexpected("body", f"streamed text {text[:80]!r} not from {probe.backend}")


def _check_error(probe: Probe, data: Any, content_type: str) -> None:
    error = data.get("error") if isinstance(data, dict) else None
    if not content_type.startswith("application/json") or not isinstance(error, dict):
        raise Unexpected("body", f"not an OpenAI error ({content_type}): {str(data)[:200]}")
    if set(error) != ERROR_KEYS:
        raise Unexpected("body", f"error keys {sorted(error)}")
    if probe.error_code is not None and error["code"] != probe.error_code:
        raise Unexpected("body", f"error.code {error['code']!r} != {probe.error_code!r}")


async def _chunks(body: bytes, size: int = 16 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


async def send(session: aiohttp.ClientSession, base_url: str, probe: Probe) -> None:
    """One request, fully consumed and checked; raises ``Unexpected`` on any deviation."""
    data: bytes | AsyncIterator[bytes] | None = probe.body
    if probe.chunked and probe.body is not None:
        data = _chunks(probe.body)
    headers = {"content-type": probe.content_type} if probe.body is not None else {}
    try:
        async with session.request(probe.method, base_url + probe.path, data=data,
                                   headers=headers) as response:
            if response.status != probe.status:
                text = (await response.read())[:200]
                raise Unexpected("status", f"{response.status} (want {probe.status}): {text!r}")
            if probe.stream:
                _check_headers(probe, response)
                await _check_stream(probe, response)
                return
            raw = await response.read()
            try:
                parsed = json.loads(raw)
            except ValueError as err:
                raise Unexpected("body", f"not JSON: {raw[:200]!r}") from err
            if probe.status == 200:
                _check_headers(probe, response)
                _check_completion(probe, parsed)
            else:
                _check_error(probe, parsed, response.headers.get("content-type", ""))
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as err:
        raise Unexpected("transport", f"{type(err).__name__}: {err}") from err


@dataclass
class Tally:
    """Counts, latencies and errors per kind; bounded by the run's request cap."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    samples: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def requests(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    async def run(self, session: aiohttp.ClientSession, base_url: str, probe: Probe) -> None:
        started = time.perf_counter()
        try:
            await send(session, base_url, probe)
        except Unexpected as err:
            key = (probe.kind, err.category)
            self.errors[key] += 1
            if len(self.samples[key]) < MAX_SAMPLES:
                self.samples[key].append(str(err))
        self.latencies[probe.kind].append(time.perf_counter() - started)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, round(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def table(tally: Tally, seconds: float) -> str:
    """A Markdown table: one row per kind, then the total."""
    rows = ["| kind | requests | req/s | p50 ms | p90 ms | p99 ms | status err | body err "
            "| transport err |", "|---|---|---|---|---|---|---|---|---|"]
    every: list[float] = []
    for kind in (*KINDS, "total"):
        values = sorted(every) if kind == "total" else sorted(tally.latencies.get(kind, []))
        every.extend(values if kind != "total" else [])
        if kind == "total":
            errs = [sum(n for (_, c), n in tally.errors.items() if c == cat)
                    for cat in ("status", "body", "transport")]
        else:
            errs = [tally.errors[(kind, cat)] for cat in ("status", "body", "transport")]
        p = [percentile(values, q) * 1000 for q in (50, 90, 99)]
        rows.append(f"| {kind} | {len(values)} | {len(values) / max(seconds, 1e-9):.1f} | "
                    f"{p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {errs[0]} | {errs[1]} | {errs[2]} |")
    return "\n".join(rows)
