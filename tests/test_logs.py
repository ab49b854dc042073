"""JSON log lines, the background writer, and its bounded queue."""

from __future__ import annotations

import io
import json
import logging
import threading
import time

from extproc.logs import BackgroundHandler, JsonFormatter


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
