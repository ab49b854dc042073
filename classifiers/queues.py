"""One batching queue per model, with its workers and CPU thread budget (`classifiers.threads`).

Logs one JSON `classifier_queue_ready` line per queue (queue, device, workers, threads, and
whether the fast tokenizer tokenizes a batch in parallel).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from classifiers.api import ClassifierSettings
from classifiers.batching import BatchCallback, BatchQueue, StageReporter, TimingCallback
from classifiers.runners import EncoderRequest
from classifiers.threads import PARALLEL_MIN_CHARS, queue_threads, tokenizer_parallelism


def classifier_queue(
    name: str,
    runner: Callable[[list[Any], StageReporter], Sequence[Any]],
    settings: ClassifierSettings,
    device: str,
    log: logging.Logger,
    *,
    on_timing: TimingCallback | None,
    on_batch: BatchCallback | None,
) -> BatchQueue[Any, Any]:
    """One batching queue with its workers and CPU thread budget (see `classifiers.threads`)."""
    plan = queue_threads(device, settings.batching.workers)
    fields = {"event": "classifier_queue_ready", "queue": name, "device": device,
              "workers": plan.workers, "threads": plan.threads,
              "tokenizer_parallel": tokenizer_parallelism(device)}
    log.info(json.dumps(fields), extra=fields)
    return BatchQueue(
        name, runner, settings.batching, workers=plan.workers, threads=plan.threads,
        set_threads=plan.set_threads, on_timing=on_timing, on_batch=on_batch,
        size_of=text_length, parallel_size=PARALLEL_MIN_CHARS,
    )


def text_length(item: EncoderRequest | str) -> int:
    """A queue item's size for `BatchQueue.size_of`: its text's length in characters."""
    return len(item if isinstance(item, str) else item.text)
