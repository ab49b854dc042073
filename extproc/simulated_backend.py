"""A simulated OpenAI/vLLM backend for the demo, the data-plane tests and the benchmarks.

Contract:

* ``GET /v1/models`` lists the served model ids in vLLM's shape; ``GET /health`` answers 200.
* ``POST /v1/chat/completions`` and ``POST /v1/completions`` answer valid OpenAI objects whose
  text starts with ``[<backend_id>] model=<received model>``, with response headers
  ``x-backend-id`` and ``x-received-model``, so a test can tell which backend served a request
  and what ``model`` reached it after the router rewrote the body.
* ``"stream": true`` answers SSE chunks, ``stream_delay_s`` apart, so a client sees them arrive
  over time (a buffering proxy would show up as all chunks at once); a usage chunk follows when
  ``stream_options.include_usage`` is true; the stream ends with ``data: [DONE]``.
* ``n`` choices per prompt (a completions ``prompt`` list counts each prompt), indexed as
  vLLM does; bodies up to ``MAX_BODY_BYTES`` (aiohttp's 1 MiB default would answer long
  prompts with a plain-text 413 no vLLM sends) and header lines up to ``MAX_HEADER_LINE``
  (whatever Envoy's header limit lets through).
* A model it does not serve gets vLLM's 404 ``model_not_found``; bad JSON or a malformed request
  gets a 400; both OpenAI-style ``{"error": {"message", "type", "param", "code"}}``. A missing
  ``model`` falls back to the first served model, as vLLM does.
* Every request is recorded (path, lower-case headers, parsed body) in ``requests``, bounded to
  the last ``MAX_RECORDED`` so a long benchmark cannot grow it without limit. With
  ``record_probes=False``, ``GET /health`` and ``GET /v1/models`` (Envoy's health checks, the
  router's readiness probes) are only counted in ``probes``, so ``requests`` holds traffic.

Output is deterministic (no randomness), loopback only, and it never touches the network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from aiohttp import web

from extproc.names import (
    CHAT_COMPLETIONS_PATH,
    COMPLETIONS_PATH,
    MAX_REQUEST_HEADERS_KB,
    MODELS_PATH,
    RESPONSES_PATH,
)
from extproc.responses_api import response_events, response_object

BACKEND_ID_HEADER: Final = "x-backend-id"
RECEIVED_MODEL_HEADER: Final = "x-received-model"
MAX_RECORDED: Final = 1000
MAX_MODEL_LEN: Final = 32768
MAX_BODY_BYTES: Final = 256 * 1024 * 1024  # the router's largest listener.max_request_bytes
MAX_CHOICES: Final = 128
# Envoy bounds all request headers together, so any one line it forwards fits (with room for
# the request line's method and version); aiohttp's 8190-byte default would answer a long
# header with a plain-text 400 no vLLM behind Envoy sends.
MAX_HEADER_LINE: Final = (MAX_REQUEST_HEADERS_KB + 1) * 1024
REPLY_TEXT: Final = "This is a deterministic reply from the simulated backend."

Json = dict[str, Any]


@dataclass(frozen=True)
class BackendSpec:
    """One backend: its id (echoed in replies), the model ids it serves, where it listens
    (port 0 picks a free one) and how its SSE streams are paced."""

    backend_id: str
    models: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 0
    stream_delay_s: float = 0.02
    stream_chunks: int = 5
    record_probes: bool = True
    reply_delay_s: float = 0.0
    """Seconds a completion waits before its first byte (a long generation, not streamed)."""


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as it reached the backend; ``body`` is None when it was not a JSON object."""

    method: str
    path: str
    headers: dict[str, str]
    body: Json | None


class _BadRequest(Exception):
    def __init__(self, message: str, param: str | None, code: str) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _error(
    status: int, message: str, param: str | None, code: str, headers: dict[str, str]
) -> web.Response:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return web.json_response({"error": error}, status=status, headers=headers)


def _word_count(value: Any) -> int:
    """A stand-in token count: whitespace words in strings, one per int (token-id prompts)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, int):
        return 1
    if isinstance(value, list):
        return sum(_word_count(item) for item in value)
    if isinstance(value, dict):
        return _word_count(value.get("content")) + _word_count(value.get("text"))
    return 0


def _choice_count(body: Json, chat: bool) -> int:
    """``n`` per prompt; a completions ``prompt`` list of strings (or of token-id lists)
    holds one prompt per item, a flat token-id list is one prompt."""
    n = body.get("n") or 1
    prompt = body.get("prompt")
    if chat or not isinstance(prompt, list) or not prompt or isinstance(prompt[0], int):
        return int(n)
    return int(n) * len(prompt)


def _split(text: str, pieces: int) -> list[str]:
    """Split into ``pieces`` non-empty parts (fewer if the text is shorter) that join back."""
    n = max(1, min(pieces, len(text)))
    bounds = [round(i * len(text) / n) for i in range(n + 1)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(n)]


def _sse(payload: Json | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


class SimulatedBackend:
    """One simulated vLLM server; start it with ``async with`` or ``start()``/``stop()``."""

    def __init__(self, spec: BackendSpec) -> None:
        if not spec.models:
            raise ValueError("BackendSpec.models must name at least one model")
        self.spec = spec
        self.requests: list[ReceivedRequest] = []
        self.probes = 0
        self._created = int(time.time())
        self._runner: web.AppRunner | None = None
        self._port = 0
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get(MODELS_PATH, self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post(CHAT_COMPLETIONS_PATH, partial(self._complete, chat=True))
        app.router.add_post(COMPLETIONS_PATH, partial(self._complete, chat=False))
        app.router.add_post(RESPONSES_PATH, self._respond)
        self._app = app

    @property
    def port(self) -> int:
        if self._runner is None:
            raise RuntimeError("backend not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    async def start(self) -> None:
        # A short shutdown timeout: stop() must not wait a minute for an open SSE stream.
        runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=0.5,
                               max_line_size=MAX_HEADER_LINE, max_field_size=MAX_HEADER_LINE)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.spec.host, self.spec.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> SimulatedBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def _record(self, request: web.Request, body: Json | None) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(ReceivedRequest(request.method, request.path, headers, body))
        if len(self.requests) > MAX_RECORDED:
            del self.requests[: len(self.requests) - MAX_RECORDED]

    def _record_probe(self, request: web.Request) -> None:
        self.probes += 1
        if self.spec.record_probes:
            self._record(request, None)

    async def _health(self, request: web.Request) -> web.Response:
        self._record_probe(request)
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.Response:
        self._record_probe(request)
        card = {"object": "model", "created": self._created, "owned_by": "vllm", "parent": None}
        data = [
            {"id": m, "root": m, "max_model_len": MAX_MODEL_LEN, **card} for m in self.spec.models
        ]
        return web.json_response(
            {"object": "list", "data": data}, headers={BACKEND_ID_HEADER: self.spec.backend_id}
        )

    async def _parse(self, request: web.Request, chat: bool) -> Json:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError as err:  # UnicodeDecodeError is a ValueError too
            self._record(request, None)
            raise _BadRequest(f"body is not valid JSON: {err}", None, "invalid_json") from err
        if not isinstance(body, dict):
            self._record(request, None)
            raise _BadRequest("request body must be a JSON object", None, "invalid_json")
        self._record(request, body)
        field = "messages" if chat else "prompt"
        if chat and not isinstance(body.get("messages"), list):
            raise _BadRequest("'messages' must be a list", field, "invalid_value")
        if not chat and not isinstance(body.get("prompt"), str | list):
            raise _BadRequest("'prompt' must be a string or a list", field, "invalid_value")
        if not isinstance(body.get("model", ""), str | None):
            raise _BadRequest("'model' must be a string", "model", "invalid_value")
        n = body.get("n", 1)
        if n is not None and (type(n) is not int or not 1 <= n <= MAX_CHOICES):
            raise _BadRequest(f"'n' must be an integer in [1, {MAX_CHOICES}]", "n",
                              "invalid_value")
        return body

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        headers = {BACKEND_ID_HEADER: self.spec.backend_id}
        try:
            body = await self._parse(request, chat)
        except _BadRequest as err:
            return _error(400, str(err), err.param, err.code, headers)
        model: str = body.get("model") or self.spec.models[0]
        headers[RECEIVED_MODEL_HEADER] = model
        if model not in self.spec.models:
            return _error(
                404, f"The model `{model}` does not exist.", "model", "model_not_found", headers
            )
        if self.spec.reply_delay_s:
            await asyncio.sleep(self.spec.reply_delay_s)
        text = f"[{self.spec.backend_id}] model={model} {REPLY_TEXT}"
        n_in = max(1, _word_count(body.get("messages" if chat else "prompt")))
        n_out = len(text.split())
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
        req_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        base: Json = {"id": req_id, "created": int(time.time()), "model": model}
        count = _choice_count(body, chat)
        if body.get("stream") is True:
            options = body.get("stream_options")
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
            chunks = [c for index in range(count)
                      for c in self._stream_chunks(base, text, chat, index)]
            if with_usage:
                obj = "chat.completion.chunk" if chat else "text_completion"
                chunks.append({**base, "object": obj, "choices": [], "usage": usage})
            return await self._stream(request, headers, chunks)
        choices: list[Json] = []
        for index in range(count):
            choice: Json = {"index": index, "logprobs": None, "finish_reason": "stop"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            choices.append(choice)
        obj = "chat.completion" if chat else "text_completion"
        return web.json_response(
            {**base, "object": obj, "choices": choices, "usage": usage}, headers=headers
        )

    def _stream_chunks(self, base: Json, text: str, chat: bool, index: int) -> list[Json]:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(piece: str | None, role: bool = False, finish: str | None = None) -> Json:
            choice: Json = {"index": index, "logprobs": None, "finish_reason": finish}
            if chat:
                delta: Json = {"role": "assistant", "content": ""} if role else {}
                if piece is not None:
                    delta["content"] = piece
                choice["delta"] = delta
            else:
                choice["text"] = piece or ""
            return {**base, "object": obj, "choices": [choice]}

        chunks = [chunk(None, role=True)] if chat else []
        chunks += [chunk(piece) for piece in _split(text, self.spec.stream_chunks)]
        chunks.append(chunk(None, finish="stop"))
        return chunks

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        """``/v1/responses`` (the Responses API): a ``response`` object, or its events."""
        headers = {BACKEND_ID_HEADER: self.spec.backend_id}
        try:
            body = json.loads(await request.read())
        except ValueError:
            self._record(request, None)
            return _error(400, "body is not valid JSON", None, "invalid_json", headers)
        self._record(request, body if isinstance(body, dict) else None)
        model = body.get("model") if isinstance(body, dict) else None
        headers[RECEIVED_MODEL_HEADER] = str(model)
        if model not in self.spec.models:
            return _error(404, f"The model `{model}` does not exist.", "model",
                          "model_not_found", headers)
        text = f"[{self.spec.backend_id}] model={model} {REPLY_TEXT}"
        words = len(text.split())
        response = response_object(text, model, uuid.uuid4().hex, int(time.time()), (1, words))
        if body.get("stream") is not True:
            return web.json_response(response, headers=headers)
        resp = web.StreamResponse(headers={**headers, "content-type": "text/event-stream"})
        await resp.prepare(request)
        for n, event in enumerate(response_events(response, _split(text, self.spec.stream_chunks))):
            if n:
                await asyncio.sleep(self.spec.stream_delay_s)
            await resp.write(event)
        await resp.write_eof()
        return resp

    async def _stream(
        self, request: web.Request, headers: dict[str, str], chunks: list[Json]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={**headers, "content-type": "text/event-stream", "cache-control": "no-cache"}
        )
        await resp.prepare(request)
        try:
            for i, payload in enumerate(chunks):
                if i:
                    await asyncio.sleep(self.spec.stream_delay_s)
                await resp.write(_sse(payload))
            await resp.write(_sse("[DONE]"))
            await resp.write_eof()
        except ConnectionResetError:
            # The client went away mid-stream (tests cancel streams on purpose); nothing to do.
            pass
        return resp


async def serve_backends(specs: Iterable[BackendSpec]) -> list[SimulatedBackend]:
    """Start one backend per spec; if any fails to start, stop those already started."""
    started: list[SimulatedBackend] = []
    try:
        for spec in specs:
            backend = SimulatedBackend(spec)
            await backend.start()
            started.append(backend)
    except BaseException:
        for backend in started:
            await backend.stop()
        raise
    return started


async def _run(spec: BackendSpec) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with SimulatedBackend(spec) as backend:
        # One JSON line on stdout so a parent started with --port 0 can learn the address.
        ready = {"event": "backend_ready", "backend_id": spec.backend_id, "url": backend.url}
        print(json.dumps({**ready, "models": list(spec.models)}), flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m extproc.simulated_backend",
        description="Run one simulated OpenAI/vLLM backend.",
    )
    parser.add_argument("--id", required=True, dest="backend_id", help="backend id to echo")
    parser.add_argument("--model", required=True, action="append", dest="models", help="repeatable")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--stream-delay", type=float, default=0.02, help="seconds between chunks")
    parser.add_argument("--stream-chunks", type=int, default=5)
    args = parser.parse_args(argv)
    models = tuple(args.models)
    delay, chunks = args.stream_delay, args.stream_chunks
    asyncio.run(_run(BackendSpec(args.backend_id, models, args.host, args.port, delay, chunks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
