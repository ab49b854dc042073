"""Batching queue under a burst: the cost estimate counts running batches, and a worker never
starts a batch it cannot finish before its callers' deadlines (fourteenth session's audit)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import pytest

from classifiers import BatchingSettings, ClassifierTimeout, Overloaded
from classifiers.batching import BatchQueue, StageReporter, _Entry


@pytest.fixture
async def queues() -> AsyncIterator[list[BatchQueue[int, int]]]:
    made: list[BatchQueue[int, int]] = []
    yield made
    for queue in made:
        await queue.close()


def _queue(
    made: list[BatchQueue[int, int]], process: object, **settings: float
) -> BatchQueue[int, int]:
    queue: BatchQueue[int, int] = BatchQueue(
        "test", process, BatchingSettings(**settings)  # type: ignore[arg-type]
    )
    made.append(queue)
    return queue


def _waiting(queue: BatchQueue[int, int], *deadlines: float) -> None:
    """Put entries with these deadlines in the queue directly (no event loop, no worker)."""
    loop = asyncio.new_event_loop()
    try:
        for k, deadline in enumerate(deadlines):
            queue._pending.append(_Entry(k, loop.create_future(), 0.0, deadline))
    finally:
        loop.close()


def test_a_batch_takes_only_what_it_can_finish_before_the_earliest_deadline() -> None:
    queue: BatchQueue[int, int] = BatchQueue("test", lambda items, report: items,
                                             BatchingSettings())
    queue._item_seconds = 0.1
    now = 100.0
    _waiting(queue, now + 0.35, now + 0.35, now + 0.35, now + 0.35, now + 0.35)
    assert queue._fits(5, now) == 3  # 3 x 0.1 s fits in 0.35 s, 4 does not
    queue._pending.clear()
    _waiting(queue, now + 5.0, now + 0.25, now + 5.0, now + 5.0)  # a shorter timeout second
    assert queue._fits(4, now) == 2
    queue._pending.clear()
    _waiting(queue, now - 1.0, now + 5.0)  # even a late first item is taken: always progress
    assert queue._fits(2, now) == 1
    queue._item_seconds = 0.0  # nothing measured yet: no limit
    assert queue._fits(2, now) == 2


def test_a_running_batch_counts_in_the_cost_and_in_the_wait() -> None:
    queue: BatchQueue[int, int] = BatchQueue("test", lambda items, report: items,
                                             BatchingSettings(max_batch_size=8))
    now = 100.0
    assert queue._predicted_wait(5, now) == 0.0  # nothing measured, nothing running
    queue._item_seconds = 0.1
    assert queue._predicted_wait(2, now) == pytest.approx((2 + 3) * 0.1)
    queue._started[1] = (now - 0.1, 4)  # 4 items, 0.1 s in: 0.3 s of work left at 0.1 s each
    assert queue._item_cost(now) == pytest.approx(0.1)
    assert queue._predicted_wait(2, now) == pytest.approx(0.3 + (2 + 3) * 0.1)
    queue._started[1] = (now - 2.0, 2)  # running long: at least 1 s an item so far
    assert queue._item_cost(now) == pytest.approx(1.0)
    assert queue._predicted_wait(0, now) == pytest.approx(1.0)


async def test_a_batch_running_long_sheds_new_callers_on_arrival(
    queues: list[BatchQueue[int, int]],
) -> None:
    """The finished batches were fast, but the running one has taken 0.5 s for its one item:
    a caller with a 0.4 s timeout is told at once, not after waiting out its timeout."""
    gate, running = threading.Event(), threading.Event()

    def process(items: list[int], report: StageReporter) -> list[int]:
        if -1 in items:
            running.set()
            gate.wait(5.0)
        return items

    queue = _queue(queues, process, max_batch_size=1, max_wait_ms=0.0)
    await queue.start()
    assert await queue.submit(1) == 1  # a fast batch measured
    slow = asyncio.create_task(queue.submit(-1, timeout_s=5.0))
    await asyncio.to_thread(running.wait, 5.0)
    await asyncio.sleep(0.5)
    with pytest.raises(Overloaded, match="would take"):
        await queue.submit(2, timeout_s=0.4)
    gate.set()
    assert await slow == -1


async def test_a_cold_burst_is_not_started_past_its_deadline(
    queues: list[BatchQueue[int, int]],
) -> None:
    """Nothing measured yet, so a burst behind the first batch is admitted; once that batch
    shows 0.2 s an item, the worker takes only what it can finish in time (not all ten, which
    would end 2 s later, long past the 0.9 s timeout, scored too late to count); the rest wait
    for the next batch or time out still queued: an overload (429), never a timeout."""
    sizes: list[int] = []
    gate = threading.Event()

    def process(items: list[int], report: StageReporter) -> list[int]:
        sizes.append(len(items))
        if 0 in items:
            gate.wait(5.0)
        time.sleep(0.2 * len(items))
        return items

    queue = _queue(queues, process, max_batch_size=32, max_wait_ms=0.0, timeout_ms=900.0)
    await queue.start()
    first = asyncio.create_task(queue.submit(0))
    while not sizes:
        await asyncio.sleep(0.001)
    burst = [asyncio.create_task(queue.submit(x)) for x in range(1, 11)]
    await asyncio.sleep(0.01)
    assert queue.depth() == 10  # all admitted: no cost known yet
    gate.set()
    assert await first == 0
    outcomes = await asyncio.gather(*burst, return_exceptions=True)
    assert sizes[0] == 1 and 1 <= sizes[1] <= 4, sizes
    assert sum(sizes[1:]) < 10, sizes
    late = [o for o in outcomes if isinstance(o, BaseException)]
    assert late and all(isinstance(o, Overloaded | ClassifierTimeout) for o in late), outcomes
    assert any(isinstance(o, Overloaded) and "still queued" in str(o) for o in late), outcomes
