"""Logging set-up: JSON lines by default (one object per line), ``text`` for humans.

Fields passed with ``extra=`` become JSON keys. Nothing here ever formats request headers;
callers pass only what is safe to print (prompts only at debug level, never credentials).
"""

from __future__ import annotations

import atexit
import collections
import functools
import json
import json.encoder
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}


def _json_encoder() -> Callable[[dict[str, Any]], str]:
    """``json.dumps(payload, default=str, ensure_ascii=False)``, byte for byte, without the
    Python frames json.dumps runs on every call (JSONEncoder construction, iterencode): it
    calls the same C encoder directly, a new one per call, so the circular-reference check
    keeps its own state per line, as in json.dumps. Pure-Python json builds use json.dumps."""
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:
        return functools.partial(json.dumps, default=str, ensure_ascii=False)
    escape = json.encoder.encode_basestring  # what ensure_ascii=False selects

    def encode(payload: dict[str, Any]) -> str:
        # (markers, default, encoder, indent, key_sep, item_sep, sort_keys, skipkeys, allow_nan)
        return "".join(make({}, str, escape, None, ": ", ", ", False, False, True)(payload, 0))

    return encode


_ENCODE = _json_encoder()


class JsonFormatter(logging.Formatter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A record's attribute names in order -> its extras: records from one call site
        # share them, and finding them once is cheaper than testing every name per record.
        self._extras: dict[tuple[str, ...], tuple[str, ...]] = {}

    def _extra_names(self, fields: dict[str, Any]) -> tuple[str, ...]:
        shape = tuple(fields)
        names = self._extras.get(shape)
        if names is None:
            names = tuple(k for k in shape if k not in _STANDARD and not k.startswith("_"))
            if len(self._extras) < 256:  # bounded: call sites are few
                self._extras[shape] = names
        return names

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        payload: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        # A message that is itself a JSON object (e.g. model_binding_ready) is merged in.
        if message.startswith("{") and message.endswith("}"):
            try:
                parsed = json.loads(message)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                payload.update(parsed)
            else:
                payload["msg"] = message
        else:
            payload["msg"] = message
        fields = record.__dict__
        for key in self._extra_names(fields):
            payload[key] = fields[key]
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return _ENCODE(payload)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(
            f"{k}={v}"
            for k, v in record.__dict__.items()
            if k not in _STANDARD and not k.startswith("_")
        )
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f" {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


_BATCH = 256  # records per write; a batch is formatted before it is written


class BatchStreamHandler(logging.StreamHandler):
    """A ``StreamHandler`` whose lines go out in one write per batch: ``emit`` formats into
    memory and ``flush`` writes what collected. Behind :class:`BackgroundHandler`, which
    flushes after every batch it drains, that is one write() syscall per batch instead of
    one per record (the stream is line-buffered)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._last: logging.LogRecord | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record) + self.terminator)
            self._last = record
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:
            self.handleError(record)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # Handler.createLock always sets it
            if not self._lines:
                return
            text = "".join(self._lines)
            self._lines.clear()
            try:
                self.stream.write(text)
                self.stream.flush()
            except RecursionError:
                raise
            except Exception:
                if self._last is not None:
                    self.handleError(self._last)


class BackgroundHandler(logging.Handler):
    """Formats and writes records on its own thread, so the event loop only appends.

    The writer wakes every ``interval_s`` and drains what accumulated: one thread switch per
    batch instead of one per record (a wake-up per record made the event loop and the writer
    trade the GIL on every request, which cost more than the logging itself). The buffer is
    bounded: when it is full (a stalled stderr), records are dropped and counted, and the
    count is reported once the writer catches up, never silently. At most ``_BATCH`` more
    are held while a batch is being written."""

    def __init__(
        self, target: logging.Handler, capacity: int = 10_000, interval_s: float = 0.05
    ) -> None:
        super().__init__()
        self._target = target
        self._records: collections.deque[logging.LogRecord] = collections.deque()
        self._capacity = capacity
        self._interval_s = interval_s
        self._closing = threading.Event()
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self._thread.start()

    def handle(self, record: logging.LogRecord) -> bool:
        # Handler.handle without the handler lock: emit only appends to a deque
        kept = self.filter(record)
        if isinstance(kept, logging.LogRecord):  # 3.12+: a filter may return a replacement
            record = kept
        if kept:
            self.emit(record)
        return bool(kept)

    def emit(self, record: logging.LogRecord) -> None:
        if len(self._records) >= self._capacity:
            with self.lock:  # type: ignore[union-attr]  # Handler.createLock always sets it
                self.dropped += 1
            return
        self._records.append(record)  # deque.append is thread-safe

    def pending(self) -> int:
        """Records not written yet."""
        return len(self._records)

    def _run(self) -> None:
        reported = 0
        while True:
            closing = self._closing.wait(self._interval_s)
            # at most _BATCH records leave the buffer before they are written (one write per
            # batch with BatchStreamHandler), so the bound holds while the writer is stalled
            while self._records:
                for _ in range(min(len(self._records), _BATCH)):
                    self._target.handle(self._records.popleft())
                self._target.flush()
            if self.dropped != reported:
                lost = self.dropped - reported
                reported = self.dropped
                self._target.handle(logging.makeLogRecord({
                    "name": "semantic_router.logs", "levelno": logging.WARNING,
                    "levelname": "WARNING", "msg": f"{lost} log records dropped (buffer full)"}))
                self._target.flush()
            if closing:
                return

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=2.0)
        self._target.flush()
        super().close()


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    stream = BatchStreamHandler(sys.stderr)
    stream.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler = BackgroundHandler(stream)
    atexit.register(handler.close)
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Nothing here prints thread, process or source line: skip collecting them per record
    # (the caller lookup walks the stack on every log call).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    for noisy in ("aiohttp.access", "grpc", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
