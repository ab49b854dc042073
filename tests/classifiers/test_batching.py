"""Batching queue: concurrency, ordering, bounds (Overloaded, timeout), errors, shutdown."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from classifiers import BatchingSettings, ClassifierError, ClassifierTimeout, Overloaded
from classifiers.batching import WORKER_NICE, BatchQueue, StageReporter

Process = Callable[[list[int], StageReporter], Sequence[int]]
MakeQueue = Callable[..., BatchQueue[int, int]]


def doubling(delay: float = 0.0) -> Process:
    def process(items: list[int], report: StageReporter) -> list[int]:
        report("inference", delay)
        time.sleep(delay)
        return [2 * x for x in items]

    return process


def blocking(gate: threading.Event) -> Process:
    def process(items: list[int], report: StageReporter) -> list[int]:
        gate.wait(5.0)
        return items

    return process


@pytest.fixture
async def make_queue() -> AsyncIterator[MakeQueue]:
    made: list[BatchQueue[int, int]] = []

    def make(process: Process, **settings: float) -> BatchQueue[int, int]:
        queue: BatchQueue[int, int] = BatchQueue(
            "test", process, BatchingSettings(**settings)  # type: ignore[arg-type]
        )
        made.append(queue)
        return queue

    yield make
    for queue in made:
        await queue.close()


async def test_concurrent_callers_get_their_own_results(make_queue: MakeQueue) -> None:
    sizes: list[int] = []
    stages: list[str] = []
    queue = BatchQueue(
        "test", doubling(0.005), BatchingSettings(max_batch_size=8, max_wait_ms=5.0),
        on_batch=lambda name, size: sizes.append(size),
        on_timing=lambda name, stage, s: stages.append(stage),
    )
    await queue.start()
    try:
        async def caller(x: int) -> int:
            await asyncio.sleep(random.random() * 0.01)
            return await queue.submit(x)

        values = list(range(100))
        results = await asyncio.gather(*(caller(x) for x in values))
    finally:
        await queue.close()
    assert results == [2 * x for x in values]
    assert sum(sizes) == 100
    assert max(sizes) > 1 and max(sizes) <= 8
    assert {"queue", "inference"} <= set(stages)


async def test_lone_request_does_not_wait_for_a_batch(make_queue: MakeQueue) -> None:
    queue = make_queue(doubling(), max_wait_ms=1000.0)
    await queue.start()
    started = time.perf_counter()
    assert await queue.submit(21) == 42
    assert time.perf_counter() - started < 0.5


async def test_full_queue_raises_overloaded(make_queue: MakeQueue) -> None:
    gate = threading.Event()
    queue = make_queue(blocking(gate), max_batch_size=1, max_queue=2, max_wait_ms=0.0)
    await queue.start()
    first = asyncio.create_task(queue.submit(1))
    while queue.depth():  # the worker has picked the first item and blocks on the gate
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    waiting = [asyncio.create_task(queue.submit(i)) for i in (2, 3)]
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded):
        await queue.submit(4)
    gate.set()
    assert await first == 1
    assert await asyncio.gather(*waiting) == [2, 3]


async def test_timeout_raises_classifier_timeout(make_queue: MakeQueue) -> None:
    gate = threading.Event()
    queue = make_queue(blocking(gate), timeout_ms=50.0)
    await queue.start()
    with pytest.raises(ClassifierTimeout):
        await queue.submit(1)
    gate.set()
    assert await queue.submit(2, timeout_s=2.0) == 2


async def test_a_call_that_never_got_a_worker_in_time_is_an_overload(
    make_queue: MakeQueue,
) -> None:
    """Timed out while still queued (the worker busy with an earlier batch): the queue was
    too long, `Overloaded`; the entry leaves the queue, and the worker never runs it."""
    gate = threading.Event()
    ran: list[int] = []

    def process(items: list[int], report: StageReporter) -> list[int]:
        ran.extend(items)
        gate.wait(5.0)
        return items

    queue = make_queue(process, max_batch_size=1, max_wait_ms=0.0)
    await queue.start()
    first = asyncio.create_task(queue.submit(1, timeout_s=5.0))
    while queue.depth() or not ran:
        await asyncio.sleep(0.001)
    with pytest.raises(Overloaded):
        await queue.submit(2, timeout_s=0.05)
    assert queue.depth() == 0
    gate.set()
    assert await first == 1
    assert await queue.submit(3) == 3
    assert ran == [1, 3]


async def test_forward_error_reaches_every_caller_of_the_batch(make_queue: MakeQueue) -> None:
    def broken(items: list[int], report: StageReporter) -> list[int]:
        time.sleep(0.01)
        raise RuntimeError("CUDA out of memory")

    queue = make_queue(broken, max_wait_ms=20.0)
    await queue.start()
    outcomes = await asyncio.gather(*(queue.submit(i) for i in range(5)), return_exceptions=True)
    assert all(isinstance(o, ClassifierError) for o in outcomes)
    assert "CUDA out of memory" in str(outcomes[0])


async def test_wrong_result_count_is_an_error(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda items, report: [])
    await queue.start()
    with pytest.raises(ClassifierError, match="returned 0 results"):
        await queue.submit(1)


async def test_submit_before_start_and_after_close(make_queue: MakeQueue) -> None:
    queue = make_queue(doubling())
    with pytest.raises(ClassifierError, match="not started"):
        await queue.submit(1)
    await queue.start()
    await queue.close()
    with pytest.raises(ClassifierError):
        await queue.submit(1)


async def test_close_fails_waiting_callers(make_queue: MakeQueue) -> None:
    gate = threading.Event()
    queue = make_queue(blocking(gate), max_batch_size=1, max_wait_ms=0.0)
    await queue.start()
    tasks = [asyncio.create_task(queue.submit(i)) for i in range(3)]
    await asyncio.sleep(0.02)
    closing = asyncio.create_task(queue.close())
    await asyncio.sleep(0.01)
    gate.set()
    await closing
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert any(isinstance(o, ClassifierError) for o in outcomes)


async def test_broken_metrics_callback_does_not_kill_worker() -> None:
    def bad(*args: object) -> None:
        raise ValueError("metrics bug")

    queue = BatchQueue("test", doubling(), BatchingSettings(), on_timing=bad, on_batch=bad)
    await queue.start()
    try:
        assert await queue.submit(1) == 2
        assert await queue.submit(2) == 4
    finally:
        await queue.close()


async def test_a_backlog_that_cannot_be_served_in_time_sheds_at_once(
    make_queue: MakeQueue,
) -> None:
    """At 20 ms an item on one worker, a 200 ms timeout serves about 7 waiting items
    (SHED_FRACTION of it); a burst of 40 gets `Overloaded` on arrival for the rest, instead of
    every late caller waiting out its timeout, and each admitted caller is served in time."""
    queue = make_queue(doubling(0.02), max_batch_size=1, max_wait_ms=0.0, timeout_ms=200.0)
    await queue.start()
    assert await queue.submit(1) == 2  # one batch measured: the cost per item is known

    async def caller(x: int) -> tuple[str, float]:
        started = time.perf_counter()
        try:
            await queue.submit(x)
        except Overloaded:
            return "shed", time.perf_counter() - started
        except ClassifierTimeout:
            return "timeout", time.perf_counter() - started
        return "served", time.perf_counter() - started

    outcomes = await asyncio.gather(*(caller(x) for x in range(40)))
    kinds = [kind for kind, _ in outcomes]
    assert kinds.count("timeout") == 0, outcomes
    assert 3 <= kinds.count("served") <= 12, kinds
    assert all(seconds < 0.01 for kind, seconds in outcomes if kind == "shed"), outcomes
    await asyncio.sleep(0.3)  # the backlog cleared: a new caller is served again
    assert await queue.submit(5) == 10


async def test_workers_run_below_the_event_loops_cpu_priority(make_queue: MakeQueue) -> None:
    """On a saturated CPU the loop that admits and sheds requests runs first (Linux)."""
    seen: list[int] = []

    def process(items: list[int], report: StageReporter) -> list[int]:
        seen.append(os.getpriority(os.PRIO_PROCESS, 0))  # 0: the calling thread, on Linux
        return items

    queue = make_queue(process)
    await queue.start()
    assert await queue.submit(1) == 1
    assert seen == [min(19, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE)]
