"""Logging set-up: JSON lines by default (one object per line), ``text`` for humans.

Fields passed with ``extra=`` become JSON keys. Nothing here ever formats request headers;
callers pass only what is safe to print (prompts only at debug level, never credentials).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import queue
import sys
import threading
import time
from typing import Any

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
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
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str, ensure_ascii=False)


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


class BackgroundHandler(logging.Handler):
    """Formats and writes records on its own thread, so the event loop only enqueues.

    The queue is bounded: when it is full (a stalled stderr), records are dropped and
    counted, and the count is reported once the writer catches up, never silently."""

    def __init__(self, target: logging.Handler, capacity: int = 10_000) -> None:
        super().__init__()
        self._target = target
        self._queue: queue.Queue[logging.LogRecord | None] = queue.Queue(capacity)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        reported = 0
        while True:
            record = self._queue.get()
            if record is None:
                return
            self._target.handle(record)
            if self.dropped != reported:
                lost = self.dropped - reported
                reported = self.dropped
                self._target.handle(logging.makeLogRecord({
                    "name": "semantic_router.logs", "levelno": logging.WARNING,
                    "levelname": "WARNING", "msg": f"{lost} log records dropped (queue full)"}))

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=1.0)
        self._thread.join(timeout=2.0)
        self._target.flush()
        super().close()


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler = BackgroundHandler(stream)
    atexit.register(handler.close)
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiohttp.access", "grpc", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
