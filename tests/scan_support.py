"""Shared fakes for the bounded-scan tests: a log handler that keeps its records, and a
detector whose scan is slow and checks its budget between chunks as the real ones do."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from classifiers.scan import ScanBudget


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def busy(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time, as a scan of a chunk does."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


class SlowScan:
    """A detector that scans ``total`` chunks of 10 ms of CPU, checking the budget before
    each, as ``PiiDetector`` and ``LanguageDetector`` do. ``short_texts_only``: texts scanned
    without a budget (chat-sized, inline) are answered at once. ``starved``: each chunk waits
    10 ms instead (a thread that gets no CPU on a busy host)."""

    def __init__(self, total: int = 1000, short_texts_only: bool = False,
                 starved: bool = False) -> None:
        self.total = total
        self.short_texts_only = short_texts_only
        self.starved = starved
        self.chunks = 0
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def detect(self, text: str, budget: ScanBudget | None = None) -> Any:
        if budget is None and self.short_texts_only:
            return ()
        try:
            for _ in range(self.total):
                if budget is not None:
                    budget.check()
                self.chunks += 1
                if self.starved:
                    time.sleep(0.01)
                else:
                    busy(0.01)
            return ()
        except BaseException as err:
            self.error = err
            raise
        finally:
            self.stopped.set()
