"""Logging set-up: JSON lines by default (one object per line), ``text`` for humans.

Fields passed with ``extra=`` become JSON keys. Nothing here ever formats request headers;
callers pass only what is safe to print (prompts only at debug level, never credentials).
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
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
    """Formats and writes records on its own thread, so the event loop only appends.

    The writer wakes every ``interval_s`` and drains what accumulated: one thread switch per
    batch instead of one per record (a wake-up per record made the event loop and the writer
    trade the GIL on every request, which cost more than the logging itself). The buffer is
    bounded: when it is full (a stalled stderr), records are dropped and counted, and the
    count is reported once the writer catches up, never silently."""

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

    def emit(self, record: logging.LogRecord) -> None:
        if len(self._records) >= self._capacity:
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
            # popleft one at a time: a record leaves the buffer only once written, so the
            # bound holds while the writer is stalled
            while self._records:
                self._target.handle(self._records.popleft())
            if self.dropped != reported:
                lost = self.dropped - reported
                reported = self.dropped
                self._target.handle(logging.makeLogRecord({
                    "name": "semantic_router.logs", "levelno": logging.WARNING,
                    "levelname": "WARNING", "msg": f"{lost} log records dropped (buffer full)"}))
            if closing:
                return

    def close(self) -> None:
        self._closing.set()
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
    # Nothing here prints thread, process or source line: skip collecting them per record
    # (the caller lookup walks the stack on every log call).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    for noisy in ("aiohttp.access", "grpc", "urllib3", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
