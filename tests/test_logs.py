"""JSON log lines, the background writer, and its bounded queue."""

from __future__ import annotations

import io
import json
import logging
import threading
import time

import pytest

from extproc.logs import BackgroundHandler, BatchStreamHandler, JsonFormatter


def test_json_line_merges_extras_and_json_messages() -> None:
    record = logging.makeLogRecord({"name": "x", "levelno": 20, "levelname": "INFO",
                                    "msg": "routed", "decision": "code", "request_id": "r1"})
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "routed"
    assert line["decision"] == "code"
    assert line["request_id"] == "r1"
    binding = logging.makeLogRecord({"msg": '{"event": "model_binding_ready", "device": "cpu"}',
                                     "levelname": "INFO"})
    assert json.loads(JsonFormatter().format(binding))["event"] == "model_binding_ready"


def test_background_handler_writes_in_order_and_counts_drops() -> None:
    out = io.StringIO()
    target = logging.StreamHandler(out)
    target.setFormatter(JsonFormatter())
    gate = threading.Event()
    original = target.handle

    def slow_handle(record: logging.LogRecord) -> bool:
        gate.wait(timeout=5)
        return bool(original(record))

    target.handle = slow_handle  # type: ignore[method-assign]
    handler = BackgroundHandler(target, capacity=3)
    for i in range(10):
        handler.emit(logging.makeLogRecord({"msg": f"line {i}", "levelname": "INFO"}))
    assert handler.dropped >= 6  # bounded: the writer is stalled, the queue holds 3
    gate.set()
    for _ in range(500):  # bounded wait for the writer to drain the queue
        if handler.pending() == 0:
            break
        time.sleep(0.01)
    handler.emit(logging.makeLogRecord({"msg": "after", "levelname": "INFO"}))
    handler.close()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    messages = [line["msg"] for line in lines]
    assert messages[0] == "line 0"
    assert messages[-1] == "after"
    assert any("log records dropped" in m for m in messages)


def test_json_line_is_what_json_dumps_writes() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque \u2028"

    record = logging.makeLogRecord({"name": "x", "levelno": 20, "levelname": "INFO",
                                    "msg": "routed", "created": 1.23456, "n": 1.5,
                                    "items": [1, "é", None, float("nan")], "obj": Opaque()})
    expected = {"ts": 1.235, "level": "info", "logger": "x", "msg": "routed", "created": 1.23456,
                "n": 1.5, "items": [1, "é", None, float("nan")], "obj": Opaque()}
    del expected["created"]  # a standard LogRecord attribute, never an extra
    formatter = JsonFormatter()
    for _ in range(2):  # the second record of a shape takes the cached extras
        assert formatter.format(record) == json.dumps(expected, default=str, ensure_ascii=False)
    loop: list[object] = []
    loop.append(loop)
    circular = logging.makeLogRecord({"msg": "m", "levelname": "INFO", "loop": loop})
    with pytest.raises(ValueError, match="Circular reference"):
        formatter.format(circular)


def test_batch_stream_handler_writes_one_batch_per_flush() -> None:
    class Counting(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            self.writes += 1
            return super().write(text)

    out = Counting()
    handler = BatchStreamHandler(out)
    handler.setFormatter(JsonFormatter())
    for i in range(5):
        handler.handle(logging.makeLogRecord({"msg": f"line {i}", "levelname": "INFO"}))
    assert out.getvalue() == ""  # nothing goes out before the flush
    handler.flush()
    assert out.writes == 1
    assert [json.loads(line)["msg"] for line in out.getvalue().splitlines()] == [
        f"line {i}" for i in range(5)]
